#!/usr/bin/env bash
# Compiles every Hopper variant to an sm_90a cubin: head dim 64/96/128 x
# fp16/bf16 x none/causal/window x GQA 1/4/8 x LSE off/on (softcap on the
# GQA-4 variants without the LSE). Each must assemble with no spills and no
# stack; one PTX per head dim must hold the instructions the FA3-style
# schedule is made of. Every third variant's level C then runs in fa4-sim
# under 2 schedules at one of a cycle of odd shapes: within tolerance, no
# hazard, misuse or deadlock. Prints one line per variant.
set -euo pipefail
fa4c=$1 out=$2 sim=$3
shapes=("1 1 1" "2 127 127" "1 300 300" "1 127 300" "2 300 127" "1 520 200")
mkdir -p "$out"
required=(wgmma.mma_async wgmma.fence wgmma.commit_group wgmma.wait_group
          cp.async.bulk.tensor mbarrier.try_wait.parity setmaxnreg)
count=0
for headdim in 64 96 128; do
  for dtype in fp16 bf16; do
    for mask in none causal window; do
      window=()
      [[ $mask == window ]] && window=(--window-left 256 --window-right 0)
      for ratio in 1 4 8; do
        for lse in "" --lse; do
          softcap=()
          [[ $ratio == 4 && -z $lse ]] && softcap=(--softcap 30)
          name="d${headdim}-${dtype}-${mask}-gqa${ratio}${lse:+-lse}${softcap:+-softcap}"
          flags=(--head-dim "$headdim" --q-heads $((2 * ratio)) --kv-heads 2
                 --dtype "$dtype" --mask "$mask" "${window[@]}" "${softcap[@]}"
                 $lse --target sm_90a)
          "$fa4c" "${flags[@]}" -o "$out/$name.cubin"
          manifest="$out/$name.cubin.json"
          for field in '"spill_store_bytes": 0' '"spill_load_bytes": 0' '"stack_bytes": 0' '"target": "sm_90a"'; do
            grep -q "$field" "$manifest" || { echo "$name: expected $field"; cat "$manifest"; exit 1; }
          done
          echo "$name: cubin, 0 spill bytes, 0 stack bytes"
          if (( count % 3 == 0 )); then
            read -r batch seqq seqk <<< "${shapes[$(((count / 3) % ${#shapes[@]}))]}"
            "$fa4c" "${flags[@]}" --emit=mlir --stop-after=scheduler -o "$out/$name.mlir"
            report=$("$sim" "$out/$name.mlir" --batch "$batch" --seq-q "$seqq" \
                       --seq-k "$seqk" --seed "$count" --interleavings 2) \
              || { echo "$name: fa4-sim failed at B=$batch Sq=$seqq Sk=$seqk: $report"; exit 1; }
            echo "$name: level C simulated B=$batch Sq=$seqq Sk=$seqk ok"
          fi
          count=$((count + 1))
        done
      done
    done
  done
  "$fa4c" --head-dim "$headdim" --q-heads 8 --kv-heads 2 --dtype bf16 --mask causal \
    --lse --target sm_90a -o "$out/d${headdim}.ptx"
  for instruction in "${required[@]}"; do
    grep -q "$instruction" "$out/d${headdim}.ptx" \
      || { echo "d${headdim}.ptx lacks $instruction"; exit 1; }
  done
  # Nothing of Blackwell's.
  if grep -q "tcgen05" "$out/d${headdim}.ptx"; then
    echo "d${headdim}.ptx holds tcgen05"; exit 1
  fi
  echo "d${headdim}.ptx: ${required[*]}"
done
echo "$count sm_90a variants compiled"
