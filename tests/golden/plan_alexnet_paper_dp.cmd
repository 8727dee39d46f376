plan @SOURCE@/tests/golden/models/alexnet_paper.onnx --devices tpuv3:64,tpuv2:64 --batch 512 --cost paper --strategy dp
