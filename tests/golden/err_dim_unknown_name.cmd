dump @SOURCE@/tests/golden/models/small_cnn.onnx --dim M=3
