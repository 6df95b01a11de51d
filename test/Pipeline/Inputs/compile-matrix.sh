#!/usr/bin/env bash
# Compiles every variant of one head dim to an sm_100a cubin: fp16/bf16 x
# none/causal/window x GQA 1/4/8 x LSE off/on. Each must assemble with no
# spills and no stack (local memory); one PTX per dtype must hold the
# instructions FA4 is made of. Prints one line per variant.
set -euo pipefail
fa4c=$1 out=$2 headdim=$3
mkdir -p "$out"
required=(tcgen05.mma tcgen05.ld tcgen05.st tcgen05.commit cp.async.bulk.tensor
          mbarrier.try_wait.parity setmaxnreg)
count=0
for dtype in fp16 bf16; do
  for mask in none causal window; do
    window=()
    [[ $mask == window ]] && window=(--window-left 256 --window-right 0)
    for ratio in 1 4 8; do
      for lse in "" --lse; do
        name="d${headdim}-${dtype}-${mask}-gqa${ratio}${lse:+-lse}"
        "$fa4c" --head-dim "$headdim" --q-heads $((2 * ratio)) --kv-heads 2 \
          --dtype "$dtype" --mask "$mask" "${window[@]}" $lse -o "$out/$name.cubin"
        manifest="$out/$name.cubin.json"
        for field in '"spill_store_bytes": 0' '"spill_load_bytes": 0' '"stack_bytes": 0'; do
          grep -q "$field" "$manifest" || { echo "$name: expected $field"; cat "$manifest"; exit 1; }
        done
        registers=$(grep -o '"registers": [0-9]*' "$manifest")
        echo "$name: cubin, $registers, 0 spill bytes, 0 stack bytes"
        count=$((count + 1))
      done
    done
  done
  "$fa4c" --head-dim "$headdim" --q-heads 8 --kv-heads 2 --dtype "$dtype" --mask causal \
    --lse -o "$out/d${headdim}-${dtype}.ptx"
  for instruction in "${required[@]}"; do
    grep -q "$instruction" "$out/d${headdim}-${dtype}.ptx" \
      || { echo "d${headdim}-${dtype}.ptx lacks $instruction"; exit 1; }
  done
  echo "d${headdim}-${dtype}.ptx: ${required[*]}"
done
echo "$count variants of head dim $headdim compiled"
