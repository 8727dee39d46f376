dump @SOURCE@/tests/golden/models/small_cnn.onnx --dump-after nonsense
