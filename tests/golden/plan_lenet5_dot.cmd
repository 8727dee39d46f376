plan @BUILD@/golden-models/lenet5.onnx --devices tpuv3:1,tpuv2:2 --format dot
