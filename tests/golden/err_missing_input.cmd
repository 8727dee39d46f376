dump @SOURCE@/tests/golden/models/missing_input.onnx
