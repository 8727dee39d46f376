compare @SHARED@/onnx-tests/light/light_resnet50.onnx --devices tpuv3:8,tpuv2:8 --format json
