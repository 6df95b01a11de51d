#!/usr/bin/env bash
# Compiles every Hopper variant of one head dim to an sm_90a cubin: fp16/bf16
# x none/causal/window x GQA 1/4/8 x LSE off/on (softcap on the GQA-4
# variants without the LSE), the window long enough to span several KV
# blocks on each side, and the schedule options in turn (auto, the
# sequential loop, the overlapped loop without and with the ping-pong).
# Each must assemble with no spills and no stack; one PTX must hold the
# instructions the FA3-style schedule is made of and none of Blackwell's.
# Every variant's PTX then runs in fa4-emu at one of a cycle of odd shapes
# (Sq = 1, tails, Sq != Sk both ways, batch 2) on 2 persistent CTAs, so that
# a CTA runs several tasks and every ring wraps, under one schedule (its kind
# cycles with the variant, so the matrix runs all four of fa4-emu's kinds):
# within tolerance, no hazard, misuse or deadlock. Every sixth variant's level
# C also runs in fa4-sim. The suite emulates one variant in
# FA4_MATRIX_EMULATE_EVERY (3 by default), offset by head dim so that the
# three head dims' matrices together emulate every dtype x mask x GQA x LSE
# combination once; every variant is compiled and checked. Prints one line
# per variant. FA4_MATRIX_EMULATE_EVERY=1, FA4_MATRIX_INTERLEAVINGS and
# FA4_MATRIX_SIM_EVERY widen it (the long run the README lists).
set -euo pipefail
fa4c=$1 out=$2 headdim=$3 sim=$4 emu=$5
interleavings=${FA4_MATRIX_INTERLEAVINGS:-1} sim_every=${FA4_MATRIX_SIM_EVERY:-6}
every=${FA4_MATRIX_EMULATE_EVERY:-3} offset=$(( (headdim / 32) % 3 ))
shapes=("1 1 1" "2 127 127" "1 300 700" "2 520 300" "1 700 520" "2 300 300" "1 127 300" "1 700 40" "1 40 700")
schedules=("" "--hopper-overlap=off" "--hopper-overlap=on --hopper-pingpong=off"
           "--hopper-overlap=on --hopper-pingpong=on")
for knob in "$interleavings" "$sim_every" "$every"; do
  [[ $knob =~ ^[1-9][0-9]*$ ]] || {
    echo "FA4_MATRIX_* must be positive integers, got '$knob'" >&2; exit 2; }
done
mkdir -p "$out"
required=(wgmma.mma_async wgmma.fence wgmma.commit_group wgmma.wait_group
          cp.async.bulk.tensor mbarrier.try_wait.parity setmaxnreg elect.sync)
count=0 emulated=0
for dtype in fp16 bf16; do
  for mask in none causal window; do
    window=()
    [[ $mask == window ]] && window=(--window-left 300 --window-right 150)
    for ratio in 1 4 8; do
      for lse in "" --lse; do
        softcap=()
        [[ $ratio == 4 && -z $lse ]] && softcap=(--softcap 30)
        name="d${headdim}-${dtype}-${mask}-gqa${ratio}${lse:+-lse}${softcap:+-softcap}"
        # shellcheck disable=SC2206  # the schedule is zero to two flags
        schedule=(${schedules[$((count % ${#schedules[@]}))]})
        flags=(--head-dim "$headdim" --q-heads $((2 * ratio)) --kv-heads 2
               --dtype "$dtype" --mask "$mask" "${window[@]}" "${softcap[@]}"
               $lse --target sm_90a "${schedule[@]}")
        "$fa4c" "${flags[@]}" -o "$out/$name.cubin"
        manifest="$out/$name.cubin.json"
        for field in '"spill_store_bytes": 0' '"spill_load_bytes": 0' '"stack_bytes": 0' '"target": "sm_90a"'; do
          grep -q "$field" "$manifest" || { echo "$name: expected $field"; cat "$manifest"; exit 1; }
        done
        echo "$name: cubin, 0 spill bytes, 0 stack bytes${schedule:+ (${schedule[*]})}"
        read -r batch seqq seqk <<< "${shapes[$((count % ${#shapes[@]}))]}"
        if (( (count + offset) % every == 0 )); then
          report=$("$emu" "$manifest" --batch "$batch" --seq-q "$seqq" --seq-k "$seqk" \
                     --seed "$count" --interleavings "$interleavings" --sm-count 2) \
            || { echo "$name: fa4-emu failed at B=$batch Sq=$seqq Sk=$seqk: $report"; exit 1; }
          echo "$name: emulated B=$batch Sq=$seqq Sk=$seqk ok"
          emulated=$((emulated + 1))
        fi
        if (( count % sim_every == 0 )); then
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
echo "$count sm_90a variants of head dim $headdim compiled, $emulated emulated"
