dump @SOURCE@/tests/golden/models/broadcast.onnx
