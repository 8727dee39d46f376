plan @SOURCE@/tests/golden/models/small_cnn.onnx --devices cpu:2 --batch 8 --mem-limit 100
