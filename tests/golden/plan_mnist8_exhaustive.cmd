plan @SHARED@/models/mnist-8/model.onnx --devices tpuv3:1,tpuv2:1 --strategy exhaustive
