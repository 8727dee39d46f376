dump @SOURCE@/tests/golden/models/two_inputs_layer.onnx --devices cpu:2 --inputs @SOURCE@/tests/golden/inputs/two_inputs_layer
