compare @SOURCE@/tests/golden/models/small_cnn.onnx --devices tpuv3:4,tpuv2:4 --batch 16 --mem-limit 5000
