plan @SOURCE@/tests/golden/models/vgg11_paper.onnx --devices tpuv3:64,tpuv2:64 --batch 512 --cost paper --strategy owt
