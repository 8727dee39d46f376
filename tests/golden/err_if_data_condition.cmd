dump @SOURCE@/tests/golden/models/if_data_condition.onnx
