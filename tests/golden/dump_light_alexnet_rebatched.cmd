dump @SHARED@/onnx-tests/light/light_bvlc_alexnet.onnx --batch 4
