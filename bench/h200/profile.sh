#!/usr/bin/env bash
# On the GPU machine, from the repository root: Nsight Compute on fa4's
# kernels, one case a line, each in its own process with a time limit.
#
#   bench/h200/profile.sh OUTDIR CASE...
#
# A CASE is NAME:MANIFEST:KERNEL:BATCHxSEQ_QxSEQ_K, e.g.
#   bwd128:dist-bwd/bwd-hd128-bf16-none-h16.cubin.json:attention_backward:1x4096x4096
# KERNEL is the function ncu profiles (its first launch after one warm-up);
# one starting with "~" is a regular expression (ncu's regex:), for
# FlashAttention-4's generated names: MANIFEST flash-attn-4/HD/DTYPE/MASK/
# QH/KVH profiles its Hopper path (profile.py), e.g.
#   peer128:flash-attn-4/128/bf16/none/16/16:~[Ff]lash:4x4096x4096
# For each case OUTDIR gets NAME.ncu-rep, NAME-details.txt (every section
# of `--set full`: speed of light, warp states and their stall reasons,
# memory, occupancy) and NAME-sass.csv (the SASS with each instruction's
# sampled stall reasons). NCU (default ncu), PYTHON (default python3) and
# TIMEOUT (default 240 s a case) can be set. --clock-control none: the
# clocks are left as the GPU sets them, as the timing runs see them.
set -uo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUTDIR NAME:MANIFEST:KERNEL:BxSQxSK..." >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$1
shift
mkdir -p "$out"
ncu=${NCU:-ncu}
python=${PYTHON:-python3}
failed=0
for case in "$@"; do
  IFS=: read -r name manifest kernel shape <<<"$case"
  IFS=x read -r b sq sk <<<"$shape"
  echo "== $name: $kernel of $manifest at $b x $sq x $sk"
  if [[ $kernel == "~"* ]]; then
    kernel="regex:${kernel#"~"}"
  fi
  timeout "${TIMEOUT:-240}" "$ncu" --clock-control none --set full \
    --import-source no --kernel-name "$kernel" --launch-skip 1 --launch-count 1 \
    -f -o "$out/$name" \
    "$python" "$root/bench/h200/profile.py" "$manifest" "$b" "$sq" "$sk" --launches 2 \
    >"$out/$name-ncu.log" 2>&1
  status=$?
  tail -n 3 "$out/$name-ncu.log"
  if ((status != 0)) || [[ ! -e $out/$name.ncu-rep ]]; then
    echo "$name: ncu failed (exit $status)" >&2
    failed=$((failed + 1))
    continue
  fi
  "$ncu" --import "$out/$name.ncu-rep" --page details >"$out/$name-details.txt" 2>&1
  "$ncu" --import "$out/$name.ncu-rep" --page source --csv --print-source sass \
    >"$out/$name-sass.csv" 2>&1
done
((failed == 0))
