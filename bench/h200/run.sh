#!/usr/bin/env bash
# On the GPU machine, from the repository root: the correctness matrix, then
# the benchmark, over a kernel directory scripts/hopper-kernels.sh wrote
# (kernels, index.json, libfa4rt.so). Results go to OUTDIR (default $OUT,
# else the current directory) as check.json, bench.json and the logs.
#
#   bench/h200/run.sh dist-h200 [OUTDIR]
#
# PYTHON picks the interpreter (default /opt/torch/.venv/bin/python3, the
# lent H200's torch); CHECK_ARGS and BENCH_ARGS are passed on (--only,
# --shapes, --timeout). CHECK_DEADLINE (default 360) is check.py's
# --deadline: a check whose launches hang (each costs its 10 s timeout)
# starts no case after that many seconds, so that its JSON is written and
# the benchmark still runs within one 600 s command (a check without hangs
# should take a minute or two). Exits non-zero when a check fails or either
# script cannot run.
set -uo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 KERNEL_DIR [OUTDIR]" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kernels=$1
out=${2:-${OUT:-.}}
python=${PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$out"

nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
echo "== libfa4rt.so needs:"
readelf -d "$kernels/libfa4rt.so" | grep NEEDED
# shellcheck disable=SC2086  # the extra arguments are words
"$python" "$root/bench/h200/check.py" "$kernels" --out "$out/check.json" \
  --deadline "${CHECK_DEADLINE:-360}" ${CHECK_ARGS:-} 2>&1 | tee "$out/check.log"
check=${PIPESTATUS[0]}
# shellcheck disable=SC2086
"$python" "$root/bench/h200/bench.py" "$kernels" --out "$out/bench.json" \
  ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
bench=${PIPESTATUS[0]}
echo "check exit $check, bench exit $bench"
((check == 0 && bench == 0))
