plan @SOURCE@/tests/golden/models/two_inputs_layer.onnx --devices tpuv3:1,tpuv2:2 --strategy hypar --inputs @SOURCE@/tests/golden/inputs/two_inputs_layer --format json
