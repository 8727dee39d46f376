compare @SHARED@/onnx-tests/light/light_squeezenet.onnx --devices tpuv3:1,tpuv2:2
