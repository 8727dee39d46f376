dump @SOURCE@/tests/golden/models/small_cnn.onnx --batch 8 --devices tpuv3:2 --strategy dp --format json
