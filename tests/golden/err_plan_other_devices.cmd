plan @BUILD@/golden-models/lenet5.onnx --plan @SOURCE@/tests/golden/plans/lenet5_hypar.json --devices cpu:3
