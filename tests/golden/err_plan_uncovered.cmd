plan @BUILD@/golden-models/lenet5.onnx --plan @SOURCE@/tests/golden/plans/bad_uncovered.json
