plan @SOURCE@/tests/golden/models/small_cnn.onnx --batch 8
