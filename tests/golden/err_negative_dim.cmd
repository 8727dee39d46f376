dump @SOURCE@/tests/golden/models/negative_dim.onnx
