tensor @SOURCE@/tests/golden/models/not_onnx.onnx
