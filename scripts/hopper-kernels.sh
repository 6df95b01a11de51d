#!/usr/bin/env bash
# Compiles, here, every kernel bench/h200/check.py and bench/h200/bench.py
# run on the H200 (the list is bench/h200/variants.py's), writes the index
# check.py reads and copies libfa4rt.so beside them: OUTDIR is then all the
# GPU machine needs besides the repository (docs/Runtime.md, "On the H200").
#
#   scripts/hopper-kernels.sh OUTDIR
#
# FA4_TARGET (default sm_90a) and FA4_SM_COUNT (default 132, the H200's SMs:
# the persistent grid's size) choose what fa4c compiles for; FA4_JOBS
# compilations run at once (default 1); FA4_FLAGS are passed on to fa4c
# (e.g. --hopper-overlap=off) before each kernel's own flags, so they apply
# to the kernels of the `auto` schedule while the kernels that name a
# schedule (-pingpong, -overlap-nopp, -sequential) keep theirs; the index
# records them. fa4c's compile cache serves what an earlier run compiled.
# fa4c and libfa4rt.so are taken from the build directory ($FA4_BUILD_DIR,
# default build/) as they are: build them first (cmake --build build
# --target fa4c fa4rt).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FA4_BUILD_DIR:-$root/build}
target=${FA4_TARGET:-sm_90a}
sm_count=${FA4_SM_COUNT:-132}
jobs=${FA4_JOBS:-1}
out=$1
fa4c=$build/bin/fa4c
library=$build/lib/libfa4rt.so
for needed in "$fa4c" "$library"; do
  if [[ ! -e $needed ]]; then
    echo "$0: $needed is missing: build it first (cmake --build $build --target fa4c fa4rt)" >&2
    exit 1
  fi
done
mkdir -p "$out"

list=$(python3 "$root/bench/h200/variants.py" list)
count=$(wc -l <<<"$list")
echo "fa4: compiling $count kernels for $target (sm count $sm_count) into $out"
failed=0
started=$SECONDS
running=0
while IFS=$'\t' read -r name flags; do
  # shellcheck disable=SC2086  # the flags are one word each
  "$fa4c" --target="$target" --sm-count="$sm_count" --cache ${FA4_FLAGS:-} $flags \
    --emit=cubin -o "$out/$name.cubin" 2>"$out/$name.log" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || failed=$((failed + 1))
    running=$((running - 1))
  fi
done <<<"$list"
while ((running > 0)); do
  wait -n || failed=$((failed + 1))
  running=$((running - 1))
done
# A kernel's log is kept only when fa4c said something.
for log in "$out"/*.log; do
  [[ -s $log ]] || rm -f "$log"
done

python3 "$root/bench/h200/variants.py" index --target="$target" \
  --sm-count="$sm_count" --fa4-flags="${FA4_FLAGS:-}" >"$out/index.json"
cp "$library" "$out/libfa4rt.so"
echo "fa4: $((count - failed)) of $count compiled in $((SECONDS - started)) s;" \
     "index.json and libfa4rt.so beside them"
if ((failed)); then
  echo "fa4: $failed failed; their fa4c output:" >&2
  for log in "$out"/*.log; do
    [[ -e $log ]] && { echo "== $log" >&2; head -n 20 "$log" >&2; }
  done
  exit 1
fi
