dump @SOURCE@/tests/golden/models/small_cnn.onnx --batch 2 --format json
