dump @SOURCE@/tests/golden/models/unsupported.onnx
