#!/usr/bin/env bash
# The main job, end to end: build; parse and verify the seed's attention
# (examples/attention.mlir); compile it to an sm_100a cubin with its launch
# manifest and the time of every pass; then run its Blackwell schedule on the
# CPU — numerics against a float64 reference, and the barrier protocol under
# many interleavings; and finally run the cubin's own PTX in fa4-emu (no
# Blackwell GPU is needed for any of it).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FA4_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
cmake --build "$build" --target fa4-opt fa4c fa4-sim >/dev/null

example="$root/examples/attention.mlir"
echo "== entry IR, parsed and verified (fa4-opt $example)"
"$build/bin/fa4-opt" "$example"

echo
echo "== fa4c $example -o attention.cubin --timing"
"$build/bin/fa4c" "$example" -o "$build/attention.cubin" --timing
echo
echo "== $build/attention.cubin ($(wc -c < "$build/attention.cubin") bytes) and its manifest:"
cat "$build/attention.cubin.json"

echo
echo "== the schedule (level C): roles and barriers"
"$build/bin/fa4c" "$example" -o "$build/attention.schedule.mlir"
grep -o 'fa4.role "[a-z0-9]*" warps([0-9, ]*) registers([0-9]*)' "$build/attention.schedule.mlir" | sed 's/^/   /'
grep -o 'fa4.mbarrier_alloc "[a-z0-9_A-Z]*" {count = [0-9]* : i64} : <[a-z0-9]*, stages = [0-9]*>' \
  "$build/attention.schedule.mlir" | sed 's/^/   /'

echo
echo "== the schedule on the CPU: B=1, S=1024, Hq=32, Hkv=8, D=128, fp16, causal, 148 SMs"
"$build/bin/fa4-sim" "$build/attention.schedule.mlir" --batch 1 --seq-q 1024 --seq-k 1024

echo
echo "== its protocol under 20 interleavings: S=300, 2 CTAs so that every ring wraps"
"$build/bin/fa4c" "$example" --sm-count 2 | \
  "$build/bin/fa4-sim" --batch 1 --seq-q 300 --seq-k 300 --interleavings 20

echo
echo "== the cubin's own PTX on the CPU (fa4-emu): every thread of the persistent grid,"
echo "   TMA, mbarriers, TMEM and tcgen05 MMAs, against the float64 reference"
cmake --build "$build" --target fa4-emu >/dev/null
"$build/bin/fa4-emu" "$build/attention.cubin.json" --batch 1 --seq-q 1024 --seq-k 1024
