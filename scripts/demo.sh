#!/bin/sh
# The main job on a bundled sample: set up, build, generate the zoo's LeNet-5
# with seeded random weights, and show what accparc makes of it.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
bin="$root/build"
models="$bin/demo"
mkdir -p "$models"
"$bin/samples/accpar-zoo" --seed 1 --batch 8 -o "$models" lenet5

echo "== accparc dump $models/lenet5.onnx"
"$bin/tools/accparc" dump "$models/lenet5.onnx"
