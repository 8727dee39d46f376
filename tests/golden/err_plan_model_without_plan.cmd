plan @BUILD@/golden-models/lenet5.onnx --plan @BUILD@/golden-models/lenet5.onnx
