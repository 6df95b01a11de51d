#!/usr/bin/env bash
# Seeds for fa4-fuzz: the examples (level A) and fa4c's output after every
# level-B/C stage for two variants (causal GQA with the LSE; a bf16 window);
# with a fourth argument, the linalg inputs of fa4-raise-attention's tests.
set -euo pipefail
fa4c=$1 examples=$2 out=$3 linalg=${4:-}
mkdir -p "$out"
cp "$examples"/*.mlir "$out"/
if [ -n "$linalg" ]; then
  for f in "$linalg"/*.mlir; do cp "$f" "$out/linalg-$(basename "$f")"; done
fi
for stage in tile warp-roles pipeline barriers tmem correction scheduler; do
  "$fa4c" --head-dim 64 --q-heads 4 --kv-heads 2 --mask causal --lse \
    --stop-after=$stage -o "$out/causal-$stage.mlir"
  "$fa4c" --head-dim 64 --q-heads 2 --kv-heads 2 --mask window --window-left 50 \
    --window-right 10 --dtype bf16 --stop-after=$stage -o "$out/window-$stage.mlir"
done
ls "$out" | wc -l
