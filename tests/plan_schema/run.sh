#!/bin/sh
# Plans of the zoo's LeNet-5 (mixed array), small ResNet (joins), Inception
# block and GPT-2 tiny under every strategy, validated against
# docs/plan.schema.json (tests/plan_schema/check.py).
# Usage: run.sh ACCPARC ZOO SOURCE_DIR WORK_DIR
set -eu
accparc=$1 zoo=$2 source=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
"$zoo" -o "$work" lenet5 resnet_small inception_block gpt2_tiny >/dev/null
plans=""
for spec in lenet5:tpuv3:1,tpuv2:2 resnet_small:tpuv3:2,tpuv2:6 inception_block:cpu:3 gpt2_tiny:tpuv3:2; do
  model=${spec%%:*} devices=${spec#*:}
  for strategy in dp owt hypar accpar; do
    "$accparc" plan "$work/$model.onnx" --devices "$devices" --strategy "$strategy" --format json \
      >"$work/$model.$strategy.json"
    plans="$plans $work/$model.$strategy.json"
  done
done
# A plan without its boxes (--no-boxes) is a plan too.
"$accparc" plan "$work/resnet_small.onnx" --devices tpuv3:2,tpuv2:6 --format json --no-boxes \
  >"$work/resnet_small.no_boxes.json"
plans="$plans $work/resnet_small.no_boxes.json"
# shellcheck disable=SC2086 # the list is split into paths on purpose
/usr/bin/python3 "$source/tests/plan_schema/check.py" "$source/docs/plan.schema.json" \
  "$work/lenet5.accpar.json" "$work/resnet_small.accpar.json" $plans
