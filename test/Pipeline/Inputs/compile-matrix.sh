#!/usr/bin/env bash
# Compiles every variant of one head dim to an sm_100a cubin: fp16/bf16 x
# none/causal/window x GQA 1/4/8 x LSE off/on. Each must assemble with no
# spills and no stack (local memory); one PTX per dtype must hold the
# instructions FA4 is made of. With fa4-emu as a fourth argument, each cubin's
# PTX then runs in the emulator at one of a cycle of odd shapes (Sq = 1, tails,
# Sq != Sk both ways, batch 2), on 3 persistent CTAs so that every ring wraps,
# under one schedule (its kind cycles with the variant, so the matrix runs all
# four of fa4-emu's kinds): it must be within tolerance, with no hazard, misuse
# or deadlock. The suite emulates one variant in FA4_MATRIX_EMULATE_EVERY (3
# by default), offset by head dim so that the three head dims' matrices
# together emulate every dtype x mask x GQA x LSE combination once; every
# variant is compiled and checked. Prints one line per variant.
# FA4_MATRIX_EMULATE_EVERY=1 FA4_MATRIX_INTERLEAVINGS=4 emulates every variant
# under all four kinds (the long run the README lists). FA4_MATRIX_TARGET
# names another Blackwell chip (sm_103a): the same matrix compiled for it.
# FA4_MATRIX_DTYPES lists the dtypes (default "fp16 bf16"; "e4m3" runs the
# FP8 kernels, whose O is bf16: docs/FP8.md).
set -euo pipefail
fa4c=$1 out=$2 headdim=$3 emu=${4:-}
target=${FA4_MATRIX_TARGET:-sm_100a}
interleavings=${FA4_MATRIX_INTERLEAVINGS:-1} every=${FA4_MATRIX_EMULATE_EVERY:-3}
offset=$(( (headdim / 32) % 3 ))
shapes=("1 1 1" "2 127 127" "1 300 300" "1 520 520" "1 127 300" "2 300 127" "1 520 200" "1 520 40" "1 40 520")
for knob in "$interleavings" "$every"; do
  [[ $knob =~ ^[1-9][0-9]*$ ]] || {
    echo "FA4_MATRIX_* must be positive integers, got '$knob'" >&2; exit 2; }
done
mkdir -p "$out"
required=(tcgen05.mma tcgen05.ld tcgen05.st tcgen05.commit cp.async.bulk.tensor
          mbarrier.try_wait.parity setmaxnreg)
count=0 emulated=0
for dtype in ${FA4_MATRIX_DTYPES:-fp16 bf16}; do
  for mask in none causal window; do
    window=()
    [[ $mask == window ]] && window=(--window-left 256 --window-right 0)
    for ratio in 1 4 8; do
      for lse in "" --lse; do
        # Softcap rides on the GQA-4 variants without the LSE.
        softcap=()
        [[ $ratio == 4 && -z $lse ]] && softcap=(--softcap 30)
        name="d${headdim}-${dtype}-${mask}-gqa${ratio}${lse:+-lse}${softcap:+-softcap}"
        "$fa4c" --target "$target" --head-dim "$headdim" --q-heads $((2 * ratio)) --kv-heads 2 \
          --dtype "$dtype" --mask "$mask" "${window[@]}" "${softcap[@]}" $lse \
          -o "$out/$name.cubin"
        manifest="$out/$name.cubin.json"
        for field in '"spill_store_bytes": 0' '"spill_load_bytes": 0' '"stack_bytes": 0'; do
          grep -q "$field" "$manifest" || { echo "$name: expected $field"; cat "$manifest"; exit 1; }
        done
        registers=$(grep -o '"ptxas": {"registers": [0-9]*' "$manifest" | sed 's/"ptxas": {//')
        echo "$name: cubin, $registers, 0 spill bytes, 0 stack bytes"
        if [[ -n $emu ]] && (( (count + offset) % every == 0 )); then
          read -r batch seqq seqk <<< "${shapes[$((count % ${#shapes[@]}))]}"
          report=$("$emu" "$out/$name.cubin.json" --batch "$batch" --seq-q "$seqq" \
                     --seq-k "$seqk" --seed "$count" --interleavings "$interleavings" --sm-count 3) \
            || { echo "$name: fa4-emu failed at B=$batch Sq=$seqq Sk=$seqk: $report"; exit 1; }
          echo "$name: emulated B=$batch Sq=$seqq Sk=$seqk ok"
          emulated=$((emulated + 1))
        fi
        count=$((count + 1))
      done
    done
  done
  "$fa4c" --target "$target" --head-dim "$headdim" --q-heads 8 --kv-heads 2 --dtype "$dtype" --mask causal \
    --lse -o "$out/d${headdim}-${dtype}.ptx"
  for instruction in "${required[@]}"; do
    grep -q "$instruction" "$out/d${headdim}-${dtype}.ptx" \
      || { echo "d${headdim}-${dtype}.ptx lacks $instruction"; exit 1; }
  done
  echo "d${headdim}-${dtype}.ptx: ${required[*]}"
done
echo "$count variants of head dim $headdim compiled, $emulated emulated"
