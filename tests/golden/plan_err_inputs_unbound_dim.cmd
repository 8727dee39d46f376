plan @SOURCE@/tests/golden/models/symbolic_dims.onnx --devices cpu:2 --inputs @SOURCE@/tests/golden/inputs/symbolic_dims_a_only
