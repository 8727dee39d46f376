@SOURCE@/tests/golden/models/small_cnn.onnx --devices tpuv3:1,tpuv2:2 --strategy owt --batch 4
