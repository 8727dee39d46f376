dump @SOURCE@/tests/golden/models/small_cnn.onnx --strategy dp
