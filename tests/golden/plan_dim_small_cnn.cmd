plan @SOURCE@/tests/golden/models/small_cnn.onnx --devices cpu:2 --dim N=4
