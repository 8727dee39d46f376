plan @SOURCE@/tests/golden/models/two_inputs_layer.onnx --devices cpu:2 --dim batch=2 --dim frames=6
