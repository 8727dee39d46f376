plan @SHARED@/models/mnist-8/model.onnx --devices eyeriss:4 --strategy hypar --cost paper
