dump @SOURCE@/tests/golden/models/cycle.onnx
