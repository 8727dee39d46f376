dump @SOURCE@/tests/golden/models/no_such_model.onnx
