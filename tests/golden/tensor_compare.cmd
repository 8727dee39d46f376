tensor @SHARED@/models/mnist-8/test_data_set_0/output_0.pb --compare @SHARED@/models/mnist-8/test_data_set_1/output_0.pb
