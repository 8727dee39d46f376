dump @SOURCE@/tests/golden/models/conv_rank.onnx
