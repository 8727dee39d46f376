plan @SOURCE@/tests/golden/models/small_cnn.onnx --devices tpuv9:2 --batch 8
