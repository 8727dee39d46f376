#!/bin/sh
# Draws the plans of LeNet-5 and a small ResNet (tpuv3:1,tpuv2:2) and checks
# the pictures against `accparc plan --format json` (check.py): the DOT
# rendered to SVG by Graphviz's dot, the HTML page loaded in headless
# Chromium, its DOM and a screenshot.
# Usage: run.sh ACCPARC MODELS_DIR WORK_DIR
set -eu
accparc=$1 models=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "plan pictures: $*" >&2; exit 1; }
command -v dot >/dev/null || fail "no Graphviz dot (scripts/setup.sh installs graphviz)"
command -v chromium >/dev/null || fail "no chromium (scripts/setup.sh installs it)"
rm -rf "$work"
mkdir -p "$work"
for spec in lenet5:1 resnet_small:8; do
  model=${spec%:*} batch=${spec#*:}
  base="$work/$model"
  set -- "$models/$model.onnx" --devices tpuv3:1,tpuv2:2 --batch "$batch"
  "$accparc" plan "$@" --format json >"$base.json"
  "$accparc" plan "$@" --format dot >"$base.dot"
  "$accparc" plan "$@" --format html >"$base.html"
  dot -Tsvg "$base.dot" -o "$base.svg" 2>"$base.dot.err" ||
    fail "$model: dot -Tsvg failed: $(cat "$base.dot.err")"
  [ ! -s "$base.dot.err" ] || fail "$model: dot warned: $(cat "$base.dot.err")"
  /usr/bin/python3 "$here/check.py" dot "$base.json" "$base.dot" "$base.svg" ||
    fail "$model: the DOT does not match the plan"
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking \
    --no-first-run --user-data-dir="$profile" --dump-dom "file://$base.html" \
    >"$base.dom.html" 2>"$base.chromium.log" || fail "$model: chromium --dump-dom failed"
  chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking \
    --no-first-run --user-data-dir="$profile" --window-size=1200,1600 \
    --screenshot="$base.png" "file://$base.html" >>"$base.chromium.log" 2>&1 ||
    fail "$model: chromium --screenshot failed"
  rm -rf "$profile"
  /usr/bin/python3 "$here/check.py" html "$base.json" "$base.html" "$base.dom.html" "$base.png" ||
    fail "$model: the HTML page does not match the plan"
done
echo "plan pictures: lenet5 and resnet_small drawn and checked"
