dump @SHARED@/models/mnist-8/model.onnx
