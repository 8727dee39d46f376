plan @SOURCE@/tests/golden/models/small_cnn.onnx --devices tpuv3:1,tpuv2:1 --batch 8 --format json
