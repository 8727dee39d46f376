#!/bin/bash
# The C and LLVM backends side by side, measured in the same run: per model,
# the time `accparc compile` takes with each backend (wall and CPU: the
# machine is shared, CPU time is what the load does not distort) and the
# run time of the program it builds, then LLVM's over C's. Models (the zoo's,
# build/samples/accpar-zoo): ResNet-50 at batch 1 and GPT-2 small forward
# (inference, --repeat R: the median of R timed runs after a warm-up; GPT-2
# at --seq SEQ tokens), LeNet-5 training at batch 64 (the median step of
# STEPS steps). One device (cpu:1); the default optimisation of both (C:
# -O3 -march=native, LLVM: default<O3> for the host CPU). Figures are
# measurements of this machine, not assertions; nothing here runs in ctest.
# Usage: bench/backends.sh [BUILD_DIR] [REPEAT] [STEPS] [SEQ]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeat=${2:-5}
steps=${3:-20}
seq=${4:-128}
accparc=$build/tools/accparc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
zoo=$build/samples/accpar-zoo
"$zoo" --seed 1 --batch 1 --inputs -o "$work" resnet50 >/dev/null
"$zoo" --seed 1 --batch 1 --seq "$seq" --inputs -o "$work" gpt2 >/dev/null
"$zoo" --seed 1 --batch 64 -o "$work" lenet5 >/dev/null

# The median of the numbers of a report's JSON array key.
median() {
  awk -v key="\"$2\":" '
    index($0, key) { line = $0; sub(/.*\[/, "", line); sub(/\].*/, "", line)
                     n = split(line, v, ","); for (i = 1; i <= n; i++) print v[i] }
  ' "$1" | sort -g | awk '{a[NR]=$1} END {printf "%.6f", a[int((NR+1)/2)]}'
}

# compile MODEL BACKEND MODE: prints "wall_s cpu_s" of accparc compile.
compile() {
  local TIMEFORMAT='%R %U %S'
  { time "$accparc" compile "$work/$1.onnx" --devices cpu:1 --mode "$3" --backend "$2" \
      -o "$work/$1-$2" >/dev/null 2>"$work/$1-$2.err"; } 2>"$work/time" ||
    { cat "$work/$1-$2.err" >&2; exit 1; }
  awk '{printf "%.3f %.3f", $1, $2 + $3}' "$work/time"
}

printf "%-16s %7s %10s %14s %10s\n" model backend "compile s" "compile cpu s" "run s"
for spec in "resnet50 infer" "gpt2 infer" "lenet5 train"; do
  set -- $spec
  m=$1 mode=$2
  for b in c llvm; do
    read -r wall cpu <<<"$(compile "$m" "$b" "$mode")"
    if [ "$mode" = infer ]; then
      "$work/$m-$b/model" --inputs "$work/${m}_data" --repeat "$repeat" --report "$work/r.json" \
        >/dev/null
      run=$(median "$work/r.json" run_time_s)
    else
      "$work/$m-$b/model" --steps "$steps" --lr 0.01 --report "$work/r.json" >/dev/null
      run=$(median "$work/r.json" step_time_s)
    fi
    eval "wall_$b=$wall cpu_$b=$cpu run_$b=$run"
    printf "%-16s %7s %10.2f %14.2f %10.4f\n" "$m $mode" "$b" "$wall" "$cpu" "$run"
  done
  awk -v wc="$wall_c" -v wl="$wall_llvm" -v cc="$cpu_c" -v cl="$cpu_llvm" -v rc="$run_c" \
      -v rl="$run_llvm" -v m="$m $mode" 'BEGIN {
    printf "%-16s %7s %10.2f %14.2f %10.2f\n", m, "llvm/c", wl / wc, cl / cc, rl / rc
  }'
done
