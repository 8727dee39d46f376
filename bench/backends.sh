#!/bin/bash
# The C and LLVM backends side by side, measured in the same run: per model,
# the time `accparc compile` takes with each backend (wall and CPU: the
# machine is shared, CPU time is what the load distorts least) and the time
# the program it builds runs (wall and the device thread's CPU time), then
# LLVM's over C's. Models (the zoo's, build/samples/accpar-zoo): ResNet-50
# at batch 1 and GPT-2 small forward (inference, --repeat R timed runs after
# a warm-up; GPT-2 at --seq SEQ tokens), LeNet-5 training at batch 64
# (STEPS steps). One device (cpu:1); the default optimisation of both (C:
# -O3 -march=native, LLVM: default<O3> for the host CPU).
# The backends alternate, ROUNDS times per model (compile and run C, then
# LLVM, then again), and every figure is the median over the rounds (run
# times: over all runs of all rounds), with the spread (max/min - 1, in %)
# of the CPU figures, which is the noise the ratios carry. Figures are
# measurements of this machine, not assertions; nothing here runs in ctest.
# MODELS (default: all three) picks some, e.g. "lenet5" for more rounds of
# one model in the time the three take.
# Usage: bench/backends.sh [BUILD_DIR] [REPEAT] [STEPS] [SEQ] [ROUNDS] [MODELS]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeat=${2:-5}
steps=${3:-20}
seq=${4:-128}
rounds=${5:-3}
models=${6:-resnet50 gpt2 lenet5}
accparc=$build/tools/accparc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
zoo=$build/samples/accpar-zoo
"$zoo" --seed 1 --batch 1 --inputs -o "$work" resnet50 >/dev/null
"$zoo" --seed 1 --batch 1 --seq "$seq" --inputs -o "$work" gpt2 >/dev/null
"$zoo" --seed 1 --batch 64 -o "$work" lenet5 >/dev/null

# The numbers of a report's JSON array key, one a line.
values() {
  awk -v key="\"$2\":" '
    index($0, key) { line = $0; sub(/.*\[/, "", line); sub(/\].*/, "", line)
                     n = split(line, v, ","); for (i = 1; i <= n; i++) print v[i] + 0 }
  ' "$1"
}

# The median of the numbers of a file, one a line.
median() { sort -g "$1" | awk '{a[NR]=$1} END {printf "%.6f", a[int((NR+1)/2)]}'; }
# Their spread: max/min - 1, in %.
spread() { sort -g "$1" | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.0f", (lo > 0 ? 100 * (hi / lo - 1) : 0)}'; }

# compile MODEL BACKEND MODE: appends wall and CPU seconds of accparc compile
# (with its children: the C compiler) to $work/MODEL-BACKEND.{cw,cc}.
compile() {
  local TIMEFORMAT='%R %U %S'
  rm -rf "$work/$1-$2"
  { time "$accparc" compile "$work/$1.onnx" --devices cpu:1 --mode "$3" --backend "$2" \
      -o "$work/$1-$2" >/dev/null 2>"$work/$1-$2.err"; } 2>"$work/time" ||
    { cat "$work/$1-$2.err" >&2; exit 1; }
  awk '{print $1}' "$work/time" >>"$work/$1-$2.cw"
  awk '{print $2 + $3}' "$work/time" >>"$work/$1-$2.cc"
}

# run MODEL BACKEND MODE: appends the run (step) wall times and the CPU time
# per run (step) to $work/MODEL-BACKEND.{rw,rc}.
run() {
  local n
  if [ "$3" = infer ]; then
    "$work/$1-$2/model" --inputs "$work/${1}_data" --repeat "$repeat" --report "$work/r.json" \
      >/dev/null
    values "$work/r.json" run_time_s >>"$work/$1-$2.rw"
    n=$repeat
  else
    "$work/$1-$2/model" --steps "$steps" --lr 0.01 --report "$work/r.json" >/dev/null
    values "$work/r.json" step_time_s >>"$work/$1-$2.rw"
    n=$steps
  fi
  values "$work/r.json" cpu_time_s | awk -v n="$n" '{print $1 / n}' >>"$work/$1-$2.rc"
}

printf "%-13s %7s %10s %9s %9s %9s %9s %9s\n" model backend "compile s" "cpu s" "spread%" \
  "run s" "cpu s" "spread%"
for spec in "resnet50 infer" "gpt2 infer" "lenet5 train"; do
  set -- $spec
  m=$1 mode=$2
  case " $models " in *" $m "*) ;; *) continue ;; esac
  for r in $(seq "$rounds"); do
    for b in c llvm; do
      compile "$m" "$b" "$mode"
      run "$m" "$b" "$mode"
    done
  done
  for b in c llvm; do
    for f in cw cc rw rc; do eval "${f}_$b=$(median "$work/$m-$b.$f")"; done
    printf "%-13s %7s %10.2f %9.2f %9s %9.4f %9.4f %9s\n" "$m $mode" "$b" "$(eval echo \$cw_$b)" \
      "$(eval echo \$cc_$b)" "$(spread "$work/$m-$b.cc")" "$(eval echo \$rw_$b)" \
      "$(eval echo \$rc_$b)" "$(spread "$work/$m-$b.rc")"
  done
  awk -v a="$cw_c" -v b="$cw_llvm" -v c="$cc_c" -v d="$cc_llvm" -v e="$rw_c" -v f="$rw_llvm" \
      -v g="$rc_c" -v h="$rc_llvm" -v m="$m $mode" 'BEGIN {
    printf "%-13s %7s %10.2f %9.2f %9s %9.2f %9.2f\n", m, "llvm/c", b / a, d / c, "", f / e, h / g
  }'
done
