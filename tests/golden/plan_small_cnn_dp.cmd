plan @SOURCE@/tests/golden/models/small_cnn.onnx --devices cpu:6 --batch 12 --strategy dp
