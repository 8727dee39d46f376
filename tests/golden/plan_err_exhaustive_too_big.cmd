plan @SHARED@/onnx-tests/light/light_squeezenet.onnx --devices cpu:2 --strategy exhaustive
