#!/bin/sh
# Step time of a partitioned training run on 1 and 2 devices of this host
# (each device a thread), measured in the same run: the zoo's MLP, LeNet-5 and
# small ResNet, data parallel (--strategy dp, the plan these figures were
# first measured with; any strategy trains). Prints the median wall time of a step over R runs of S
# steps each, and the 2-device speedup. A step's time is the slowest
# device's sum of its timed phases (forward, loss, backward, gradient, update,
# comm: the program's --report), so process start-up and weight loading are
# not counted. Figures are measurements of this machine, not assertions;
# nothing here is run by ctest.
# Usage: bench/step_time.sh [BUILD_DIR] [BATCH] [STEPS] [RUNS]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
batch=${2:-64}
steps=${3:-20}
runs=${4:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/samples/accpar-zoo" --seed 1 --batch "$batch" -o "$work" mlp lenet5 resnet_small >/dev/null

# Median over runs of the slowest device's timed phases per step (seconds).
median_step() {
  prog=$1
  for r in $(seq "$runs"); do
    "$prog" --steps "$steps" --lr 0.01 --seed 1 --report "$work/report.json" >/dev/null
    awk -v steps="$steps" '
      /"(forward|loss|backward|gradient|update|comm)": \[/ {
        line = $0; sub(/.*\[/, "", line); sub(/\].*/, "", line)
        n = split(line, v, ",")
        for (i = 1; i <= n; i++) dev[i] += v[i]
        if (n > nd) nd = n
      }
      END { m = 0; for (i = 1; i <= nd; i++) if (dev[i] > m) m = dev[i]; printf "%.9f\n", m / steps }
    ' "$work/report.json"
  done | sort -n | awk '{a[NR]=$1} END {printf "%.6f", a[int((NR+1)/2)]}'
}

printf "%-14s %6s %12s %12s %8s\n" model batch "1 device s" "2 devices s" speedup
for m in mlp lenet5 resnet_small; do
  "$build/tools/accparc" compile "$work/$m.onnx" --devices cpu:1 --mode train -o "$work/$m.1"
  "$build/tools/accparc" compile "$work/$m.onnx" --devices cpu:2 --strategy dp --mode train \
    -o "$work/$m.2"
  one=$(median_step "$work/$m.1/model")
  two=$(median_step "$work/$m.2/model")
  printf "%-14s %6d %12s %12s %7.2fx\n" "$m" "$batch" "$one" "$two" \
    "$(echo "$one $two" | awk '{printf "%.2f", $1 / $2}')"
done
