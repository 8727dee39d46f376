@SOURCE@/tests/golden/models/small_cnn.onnx --devices cpu:1 --batch 2
