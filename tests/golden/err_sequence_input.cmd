dump @SOURCE@/tests/golden/models/sequence_input.onnx
