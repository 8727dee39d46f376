plan @SOURCE@/tests/golden/models/two_dims.onnx --devices cpu:2 --dim length=4
