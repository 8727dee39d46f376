#!/bin/sh
# The main job on a bundled sample: set up, build, generate the zoo's LeNet-5
# and a small ResNet (seeded random weights), then plan them for a mixed
# array of one TPU v3 and two TPU v2 and compare the strategies.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$(nproc 2>/dev/null || echo 2)" --target accparc accpar-zoo >/dev/null
accparc="$root/build/tools/accparc"
models="$root/build/demo"
devices="tpuv3:1,tpuv2:2"
mkdir -p "$models"
"$root/build/samples/accpar-zoo" --seed 1 --batch 64 -o "$models" lenet5 resnet_small >/dev/null

for m in lenet5 resnet_small; do
  echo "== accparc plan $m.onnx --devices $devices"
  "$accparc" plan "$models/$m.onnx" --devices "$devices"
  echo
  echo "== accparc compare $m.onnx --devices $devices"
  "$accparc" compare "$models/$m.onnx" --devices "$devices"
  echo
done
echo "== accparc dump lenet5.onnx --devices $devices (the plan on every node)"
"$accparc" dump "$models/lenet5.onnx" --devices "$devices"
