dump @SOURCE@/tests/golden/models/small_cnn.onnx --inputs @SOURCE@/tests/golden/models/
