dump @SOURCE@/tests/golden/models/symbolic_dims.onnx --devices cpu:2 --dim B=2
