dump @SOURCE@/tests/golden/models/einsum_sum.onnx
