@SOURCE@/tests/golden/models/small_cnn.onnx --devices cpu:2 --strategy owt --batch 4 --mode train --momentum 0.9
