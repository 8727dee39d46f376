plan @SOURCE@/tests/golden/models/small_cnn.onnx --devices tpuv3:2,tpuv2:2 --batch 8
