dump @SOURCE@/tests/golden/models/two_dims.onnx --dim batch_size=2 --dim samples=8
