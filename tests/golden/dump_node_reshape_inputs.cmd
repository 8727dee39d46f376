dump @SHARED@/onnx-tests/node-v1.22/test_reshape_negative_dim/model.onnx --inputs @SHARED@/onnx-tests/node-v1.22/test_reshape_negative_dim/test_data_set_0
