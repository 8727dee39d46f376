dump @SOURCE@/tests/golden/models/opset_99.onnx
