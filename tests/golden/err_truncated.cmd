dump @SOURCE@/tests/golden/models/truncated.onnx
