plan @BUILD@/golden-models/resnet_small.onnx --devices tpuv3:1,tpuv2:2 --batch 8 --format dot
