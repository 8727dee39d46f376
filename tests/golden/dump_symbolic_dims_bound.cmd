dump @SOURCE@/tests/golden/models/symbolic_dims.onnx --dim B=2 --dim S=3
