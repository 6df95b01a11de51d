#!/usr/bin/env bash
# The main job, end to end as far as fa4 goes today: build, then parse, verify
# and print the seed's attention (examples/attention.mlir), lower it to the
# FlashAttention tile program, and run that on the CPU against a float64
# reference.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FA4_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
cmake --build "$build" --target fa4-opt fa4c fa4-sim >/dev/null

example="$root/examples/attention.mlir"
echo "== entry IR, parsed and verified (fa4-opt $example)"
"$build/bin/fa4-opt" "$example"

echo
echo "== tile program: fa4c --stop-after=tile --timing (first lines)"
"$build/bin/fa4c" "$example" --stop-after=tile --timing -o "$build/attention.tile.mlir"
head -n 40 "$build/attention.tile.mlir"
echo "   ... ($(wc -l < "$build/attention.tile.mlir") lines in $build/attention.tile.mlir)"

echo
echo "== the tile program on the CPU: B=1, S=1024, Hq=32, Hkv=8, D=128, fp16, causal"
"$build/bin/fa4-sim" "$build/attention.tile.mlir" --batch 1 --seq-q 1024 --seq-k 1024
