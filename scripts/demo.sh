#!/bin/sh
# The main job on a bundled sample: set up, build, generate the zoo's LeNet-5
# (seeded random weights) and a seeded input, plan it for a mixed array of one
# TPU v3 and two TPU v2, compile the partitioned program, run it on three
# threads, and check it against the same model compiled for one device; then
# plan GPT-2 small (Megatron-LM's split) and train GPT-2 tiny partitioned
# beside one device.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$(nproc 2>/dev/null || echo 2)" --target accparc accpar-zoo accpar_rt >/dev/null
accparc="$root/build/tools/accparc"
work="$root/build/demo"
devices="tpuv3:1,tpuv2:2"
model="$work/lenet5.onnx"
mkdir -p "$work"
"$root/build/samples/accpar-zoo" --seed 1 --batch 8 --inputs -o "$work" lenet5 >/dev/null

echo "== accparc plan lenet5.onnx --devices $devices"
"$accparc" plan "$model" --devices "$devices"
echo
echo "== accparc compare lenet5.onnx --devices $devices"
"$accparc" compare "$model" --devices "$devices"
echo
echo "== accparc compile lenet5.onnx --devices $devices --mode infer, and run it"
"$accparc" compile "$model" --devices "$devices" --mode infer -o "$work/hetero"
"$accparc" compile "$model" --devices cpu:1 --mode infer -o "$work/single"
mkdir -p "$work/out-hetero" "$work/out-single"
"$work/hetero/model" --inputs "$work/lenet5_data" --outputs "$work/out-hetero" \
                     --report "$work/hetero.json"
"$work/single/model" --inputs "$work/lenet5_data" --outputs "$work/out-single"
echo
echo "== the result: logits on 3 devices against the 1-device program"
"$accparc" tensor "$work/out-hetero/output_0.pb" --compare "$work/out-single/output_0.pb" --count 5
echo
echo "== bytes each device sent, measured and as the plan predicted ($work/hetero.json)"
grep -E '"(bytes_sent|predicted_bytes)"' "$work/hetero.json"
echo
echo "== training: accparc compile lenet5.onnx --devices $devices --mode train, 5 SGD steps,"
echo "   the losses beside the same model trained on one device"
"$accparc" compile "$model" --devices "$devices" --mode train --momentum 0.9 -o "$work/train-hetero"
"$accparc" compile "$model" --devices cpu:1 --mode train --momentum 0.9 -o "$work/train-single"
"$work/train-hetero/model" --steps 5 --lr 0.05 --seed 1 --report "$work/train-hetero.json" \
  >"$work/train-hetero.txt"
"$work/train-single/model" --steps 5 --lr 0.05 --seed 1 >"$work/train-single.txt"
printf '%-6s %-24s %s\n' step "loss on $devices" "loss on cpu:1"
paste "$work/train-hetero.txt" "$work/train-single.txt" |
  awk '$1 == "step" { printf "%-6s %-24s %s\n", $2, $4, $8 }'
echo
echo "== bytes each device sent in those 5 steps, measured and as the plan predicted"
grep -E '"(bytes_sent|predicted_bytes)"' "$work/train-hetero.json"

echo
echo "== transformers: accparc plan gpt2.onnx (GPT-2 small, batch 1, 1024 tokens) --devices tpuv3:2,"
echo "   its first block and LM head: Q/K/V and the first MLP layer III, heads split (f),"
echo "   the second MLP layer II; the embedding by hidden size (III), where Megatron-LM splits"
echo "   the vocabulary (II): docs/transformers.md says why"
"$root/build/samples/accpar-zoo" --no-weights --batch 1 -o "$work" gpt2 >/dev/null
"$accparc" plan "$work/gpt2.onnx" --devices tpuv3:2 |
  grep -E '^(node|transformer/wte|transformer\.h\.0[./](attn|mlp)|lm_head|step)' |
  grep -Ev '/(Add|Reshape|Transpose)'
echo
echo "== GPT-2 tiny trained as a language model on $devices (accpar), 5 steps, beside one device"
"$root/build/samples/accpar-zoo" --seed 1 --batch 4 -o "$work" gpt2_tiny >/dev/null
"$accparc" compile "$work/gpt2_tiny.onnx" --devices "$devices" --mode train -o "$work/lm-hetero" >/dev/null
"$accparc" compile "$work/gpt2_tiny.onnx" --devices cpu:1 --mode train -o "$work/lm-single" >/dev/null
"$work/lm-hetero/model" --steps 5 --lr 0.05 --seed 1 --report "$work/lm-hetero.json" >"$work/lm-hetero.txt"
"$work/lm-single/model" --steps 5 --lr 0.05 --seed 1 >"$work/lm-single.txt"
printf '%-6s %-24s %s\n' step "loss on $devices" "loss on cpu:1"
paste "$work/lm-hetero.txt" "$work/lm-single.txt" |
  awk '$1 == "step" { printf "%-6s %-24s %s\n", $2, $4, $8 }'
grep -E '"(bytes_sent|predicted_bytes)"' "$work/lm-hetero.json"
