dump @SOURCE@/tests/golden/models/gru_sequence_lens.onnx
