plan @SHARED@/models/mnist-8/model.onnx --devices tpuv3:4,tpuv2:4 --strategy owt
