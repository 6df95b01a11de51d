#!/usr/bin/env python3
"""The kernels the H200 scripts need, decided here once.

check.py runs a correctness matrix over `CHECK`, bench.py times the
configurations of `BENCH`; scripts/hopper-kernels.sh compiles every kernel
both name (this file's `list`) and writes the index check.py reads (`index`).
Standard library only: it runs on the compiling machine and on the GPU one.

  python3 bench/h200/variants.py list                  # name<TAB>fa4c flags
  python3 bench/h200/variants.py index --target sm_90a --sm-count 132
"""

import argparse
import datetime
import json
import subprocess
import sys
from os import path

# Query heads of the check kernels; kv heads 8, 2 and 1 make GQA ratios 1,
# 4 and 8.
CHECK_Q_HEADS = 8
CHECK_KV_HEADS = (8, 2, 1)
# (mask, window_left, window_right): unmasked, causal (bottom-right
# aligned), a causal sliding window, and a window that reaches right of the
# diagonal.
CHECK_MASKS = (("none", -1, -1), ("causal", -1, -1), ("window", 100, 0),
               ("window", 64, 32))


def _mask_name(mask, left, right):
    return f"win{left}_{right}" if mask == "window" else mask


def check_name(head_dim, dtype, mask, left, right, q_heads, kv_heads, lse):
    return (f"check-hd{head_dim}-{dtype}-{_mask_name(mask, left, right)}-"
            f"q{q_heads}kv{kv_heads}" + ("-lse" if lse else ""))


def bench_name(head_dim, dtype, causal, q_heads, kv_heads):
    return (f"bench-hd{head_dim}-{dtype}-{'causal' if causal else 'none'}-"
            f"q{q_heads}kv{kv_heads}")


def check_variants():
    """Every check kernel: head dim 64/96/128 x fp16/bf16 x the masks x GQA
    1/4/8, with the LSE; and a few without it (the kernel that writes no
    LSE is a different kernel)."""
    variants = []
    for head_dim in (64, 96, 128):
        for dtype in ("fp16", "bf16"):
            for mask, left, right in CHECK_MASKS:
                for kv_heads in CHECK_KV_HEADS:
                    variants.append(dict(head_dim=head_dim, dtype=dtype,
                                         mask=mask, window_left=left,
                                         window_right=right,
                                         q_heads=CHECK_Q_HEADS,
                                         kv_heads=kv_heads, lse=True))
    for head_dim, dtype, (mask, left, right), kv_heads in (
            (64, "fp16", CHECK_MASKS[0], 8),
            (96, "bf16", CHECK_MASKS[2], 1),
            (128, "bf16", CHECK_MASKS[1], 2),
            (128, "fp16", CHECK_MASKS[3], 8)):
        variants.append(dict(head_dim=head_dim, dtype=dtype, mask=mask,
                             window_left=left, window_right=right,
                             q_heads=CHECK_Q_HEADS, kv_heads=kv_heads,
                             lse=False))
    for v in variants:
        v["name"] = check_name(v["head_dim"], v["dtype"], v["mask"],
                               v["window_left"], v["window_right"],
                               v["q_heads"], v["kv_heads"], v["lse"])
    return variants


def bench_configs():
    """bench.py's configurations: bf16, 16 heads, 16k tokens per batch
    (batch x seq), seq 1k/4k/16k, head dim 128 and 64; and the seed's
    problem, fp16 hd128 32 q heads over 8 kv heads at seq 1024. Causal and
    not. Each names the kernel it runs (no LSE: a forward pass for
    inference, as the other implementations are timed)."""
    configs = []
    for head_dim in (128, 64):
        for seq in (1024, 4096, 16384):
            for causal in (False, True):
                configs.append(dict(head_dim=head_dim, dtype="bf16",
                                    q_heads=16, kv_heads=16,
                                    batch=16384 // seq, seq=seq, causal=causal))
    for causal in (False, True):
        configs.append(dict(head_dim=128, dtype="fp16", q_heads=32, kv_heads=8,
                            batch=1, seq=1024, causal=causal, seed=True))
    for c in configs:
        c["kernel"] = bench_name(c["head_dim"], c["dtype"], c["causal"],
                                 c["q_heads"], c["kv_heads"])
    return configs


def bench_variants():
    """The distinct kernels bench_configs names."""
    variants = {}
    for c in bench_configs():
        variants[c["kernel"]] = dict(
            name=c["kernel"], head_dim=c["head_dim"], dtype=c["dtype"],
            mask="causal" if c["causal"] else "none", window_left=-1,
            window_right=-1, q_heads=c["q_heads"], kv_heads=c["kv_heads"],
            lse=False)
    return list(variants.values())


def fa4c_flags(v):
    flags = [f"--head-dim={v['head_dim']}", f"--q-heads={v['q_heads']}",
             f"--kv-heads={v['kv_heads']}", f"--dtype={v['dtype']}",
             f"--mask={v['mask']}"]
    if v["mask"] == "window":
        flags += [f"--window-left={v['window_left']}",
                  f"--window-right={v['window_right']}"]
    if v["lse"]:
        flags.append("--lse")
    return flags


def kernels():
    """(use, variant) for every kernel, check's first."""
    return ([("check", v) for v in check_variants()] +
            [("bench", v) for v in bench_variants()])


def _git_commit():
    root = path.dirname(path.dirname(path.dirname(path.abspath(__file__))))
    try:
        return subprocess.run(["git", "-C", root, "rev-parse", "HEAD"],
                              capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="one kernel a line: name<TAB>fa4c flags")
    index = commands.add_parser("index", help="the index check.py reads (JSON)")
    index.add_argument("--target", required=True)
    index.add_argument("--sm-count", type=int, required=True)
    args = parser.parse_args()
    if args.command == "list":
        for _, v in kernels():
            print(v["name"] + "\t" + " ".join(fa4c_flags(v)))
        return 0
    json.dump({
        "target": args.target,
        "sm_count": args.sm_count,
        "compiled": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
        "commit": _git_commit(),
        "kernels": [dict(v, use=use, manifest=v["name"] + ".cubin.json",
                         fa4c_flags=fa4c_flags(v)) for use, v in kernels()],
    }, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
