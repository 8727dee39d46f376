dump @SOURCE@/tests/golden/models/external_escape.onnx
