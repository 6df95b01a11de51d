#!/usr/bin/env bash
# Compiles, here, the backward kernels bench/h200/backward.py runs on the
# H200 (fa4c --backward, sm_90a: three kernels and a manifest each), writes
# the index it reads (each kernel's variant flags and shapes) and copies
# libfa4rt.so beside them.
#
#   scripts/hopper-backward-kernels.sh OUTDIR
#
# FA4_SM_COUNT (default 132, the H200's SMs) sizes the main kernel's
# persistent grid. fa4c and libfa4rt.so come from $FA4_BUILD_DIR (default
# build/): build them first (cmake --build build --target fa4c fa4rt).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FA4_BUILD_DIR:-$root/build}
sm_count=${FA4_SM_COUNT:-132}
out=$1
for needed in "$build/bin/fa4c" "$build/lib/libfa4rt.so"; do
  if [[ ! -e $needed ]]; then
    echo "$0: $needed is missing: build it first" >&2
    exit 1
  fi
done
mkdir -p "$out"

# name, fa4c flags, shapes (batch x seq_q x seq_k, space-separated).
kernels=(
  "bwd-hd128-bf16-none-h16|--head-dim 128 --q-heads 16 --kv-heads 16 --dtype bf16|4x1024x1024 1x4096x4096 2x777x1333 16x1024x1024 4x4096x4096 1x16384x16384"
  "bwd-hd128-bf16-causal-h16|--head-dim 128 --q-heads 16 --kv-heads 16 --dtype bf16 --mask causal|4x1024x1024 1x4096x4096 2x777x1333 16x1024x1024 4x4096x4096 1x16384x16384"
  "bwd-hd64-bf16-none-h16|--head-dim 64 --q-heads 16 --kv-heads 16 --dtype bf16|4x1024x1024 1x4096x4096 16x1024x1024"
  "bwd-hd64-bf16-causal-h16|--head-dim 64 --q-heads 16 --kv-heads 16 --dtype bf16 --mask causal|4x1024x1024 1x4096x4096 16x1024x1024"
  "bwd-hd128-fp16-causal-q32kv8|--head-dim 128 --q-heads 32 --kv-heads 8 --dtype fp16 --mask causal|2x1024x1024 1x333x1500"
  "bwd-hd96-fp16-none-q6kv2|--head-dim 96 --q-heads 6 --kv-heads 2 --dtype fp16|2x1000x700"
  "bwd-hd128-bf16-window-h8|--head-dim 128 --q-heads 8 --kv-heads 8 --dtype bf16 --mask window --window-left 256 --window-right 0|2x2048x2048"
  "bwd-hd64-bf16-softcap-h8|--head-dim 64 --q-heads 8 --kv-heads 8 --dtype bf16 --softcap 30 --mask causal|2x1024x1024"
  # Head dim 32 (half a swizzle line a row).
  "bwd-hd32-bf16-none-h16|--head-dim 32 --q-heads 16 --kv-heads 16 --dtype bf16|4x1024x1024 1x4096x4096 16x1024x1024"
  "bwd-hd32-bf16-causal-h16|--head-dim 32 --q-heads 16 --kv-heads 16 --dtype bf16 --mask causal|4x1024x1024 1x4096x4096 16x1024x1024"
  "bwd-hd32-fp16-window-q6kv2|--head-dim 32 --q-heads 6 --kv-heads 2 --dtype fp16 --mask window --window-left 200 --window-right 30 --softcap 20|2x777x1333"
  # The deterministic order (the issue's "deterministic and not"): at 16
  # heads a 16 x 1k batch fills the SMs, a 1 x 4k one does not.
  "bwd-hd128-bf16-none-h16-det|--head-dim 128 --q-heads 16 --kv-heads 16 --dtype bf16 --deterministic|1x4096x4096 16x1024x1024"
  "bwd-hd128-bf16-causal-h16-det|--head-dim 128 --q-heads 16 --kv-heads 16 --dtype bf16 --mask causal --deterministic|1x4096x4096 16x1024x1024"
  "bwd-hd64-bf16-none-h16-det|--head-dim 64 --q-heads 16 --kv-heads 16 --dtype bf16 --deterministic|16x1024x1024"
  "bwd-hd32-bf16-causal-h16-det|--head-dim 32 --q-heads 16 --kv-heads 16 --dtype bf16 --mask causal --deterministic|4x1024x1024"
)
index="{\"sm_count\": $sm_count, \"kernels\": ["
first=1
for line in "${kernels[@]}"; do
  IFS='|' read -r name flags shapes <<<"$line"
  # shellcheck disable=SC2086  # the flags are words
  "$build/bin/fa4c" --backward --target sm_90a --sm-count "$sm_count" $flags \
    -o "$out/$name.cubin"
  json_shapes=$(for s in $shapes; do IFS=x read -r b q k <<<"$s"; echo "[$b, $q, $k]"; done | paste -sd, -)
  ((first)) || index+=", "
  first=0
  index+="{\"name\": \"$name\", \"flags\": \"$flags\", \"shapes\": [$json_shapes]}"
done
index+="]}"
echo "$index" | python3 -m json.tool > "$out/index.json"
cp "$build/lib/libfa4rt.so" "$out/"
echo "fa4: ${#kernels[@]} backward kernels in $out"
