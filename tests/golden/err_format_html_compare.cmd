compare @BUILD@/golden-models/lenet5.onnx --devices cpu:2 --format html
