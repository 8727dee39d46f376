dump @SOURCE@/tests/golden/models/small_cnn.onnx --batch 8 --devices tpuv3:1,tpuv2:2
