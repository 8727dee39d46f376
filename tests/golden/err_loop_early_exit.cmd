dump @SOURCE@/tests/golden/models/loop_early_exit.onnx
