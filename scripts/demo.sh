#!/usr/bin/env bash
# The main job, end to end as far as fa4 goes today: build, then parse, verify
# and print the seed's attention (examples/attention.mlir), lower it to the
# FlashAttention tile program and to the Blackwell schedule, and run the
# schedule on the CPU — numerics against a float64 reference, and the barrier
# protocol under many interleavings.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FA4_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
cmake --build "$build" --target fa4-opt fa4c fa4-sim >/dev/null

example="$root/examples/attention.mlir"
echo "== entry IR, parsed and verified (fa4-opt $example)"
"$build/bin/fa4-opt" "$example"

echo
echo "== tile program: fa4c --stop-after=tile (first lines)"
"$build/bin/fa4c" "$example" --stop-after=tile -o "$build/attention.tile.mlir"
head -n 30 "$build/attention.tile.mlir"
echo "   ... ($(wc -l < "$build/attention.tile.mlir") lines in $build/attention.tile.mlir)"

echo
echo "== Blackwell schedule (level C): fa4c --timing"
"$build/bin/fa4c" "$example" --timing -o "$build/attention.schedule.mlir"
echo "   roles:"
grep -o 'fa4.role "[a-z0-9]*" warps([0-9, ]*) registers([0-9]*)' "$build/attention.schedule.mlir" | sed 's/^/     /'
echo "   barriers:"
grep -o 'fa4.mbarrier_alloc "[a-z0-9_A-Z]*" {count = [0-9]* : i64} : <[a-z0-9]*, stages = [0-9]*>' \
  "$build/attention.schedule.mlir" | sed 's/^/     /'
echo "   ... ($(wc -l < "$build/attention.schedule.mlir") lines in $build/attention.schedule.mlir)"

echo
echo "== the schedule on the CPU: B=1, S=1024, Hq=32, Hkv=8, D=128, fp16, causal, 148 SMs"
"$build/bin/fa4-sim" "$build/attention.schedule.mlir" --batch 1 --seq-q 1024 --seq-k 1024

echo
echo "== its protocol under 20 interleavings: S=300, 2 CTAs so that every ring wraps"
"$build/bin/fa4c" "$example" --sm-count 2 | \
  "$build/bin/fa4-sim" --batch 1 --seq-q 300 --seq-k 300 --interleavings 20
