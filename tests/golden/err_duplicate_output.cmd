dump @SOURCE@/tests/golden/models/duplicate_output.onnx
