compare @SOURCE@/tests/golden/models/two_dims.onnx --devices cpu:2 --dim batch_size=2 --dim samples=8 --format json
