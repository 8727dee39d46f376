dump @SOURCE@/tests/golden/models/float_axis.onnx
