dump @SOURCE@/tests/golden/models/lstm_clip.onnx
