plan @SHARED@/onnx-tests/light/light_squeezenet.onnx --devices tpuv3:2,tpuv2:2
