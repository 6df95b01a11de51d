#!/usr/bin/env python3
"""The kernels the H200 scripts need, decided here once.

check.py runs a correctness matrix over `check_variants()`, bench.py times
the configurations of `bench_configs()`; scripts/hopper-kernels.sh compiles
every kernel both name (this file's `list`) and writes the index check.py
reads (`index`). Standard library only: it runs on the compiling machine and
on the GPU one.

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
# diagonal; both windows within one 128-key block of the diagonal.
CHECK_MASKS = (("none", -1, -1), ("causal", -1, -1), ("window", 100, 0),
               ("window", 64, 32))

# The Hopper schedule a kernel is compiled with (fa4c's --hopper-overlap and
# --hopper-pingpong): name -> its flags. `auto` gives none (fa4c's default:
# the overlap, and the ping-pong with it); the others force one loop.
# Ping-pong needs the overlapped loop, so there is no overlap=off
# pingpong=on. A kernel's name ends in -SCHEDULE unless it is `auto`.
SCHEDULES = {
    "auto": (),
    "pingpong": ("--hopper-overlap=on", "--hopper-pingpong=on"),
    "overlap-nopp": ("--hopper-overlap=on", "--hopper-pingpong=off"),
    "sequential": ("--hopper-overlap=off", "--hopper-pingpong=off"),
}

# Windows over several 128-key blocks on each side they bound (-1: that side
# unbounded), each under every schedule, for a few (head dim, dtype, kv
# heads, LSE) chosen so that every window has head dims 64, 96 and 128 and
# GQA ratios 1, 4 and 8, and the whole set both dtypes (not a cross
# product). (1000, 200) at hd64 bf16 kv 8 with the LSE is issue 22's kernel,
# which hung on the H200 where a persistent CTA runs several tasks.
LONG_WINDOWS = (
    ((1000, 200), ((64, "bf16", 8, True), (64, "bf16", 1, True),
                   (96, "fp16", 2, True), (128, "fp16", 8, True))),
    ((1000, 0), ((64, "bf16", 8, True), (96, "fp16", 1, True),
                 (128, "bf16", 2, True))),
    ((300, 700), ((64, "fp16", 2, True), (96, "bf16", 8, True),
                  (128, "bf16", 1, False))),
    ((-1, 500), ((64, "fp16", 1, True), (96, "bf16", 8, True),
                 (128, "fp16", 2, True))),
    ((700, -1), ((64, "bf16", 2, False), (96, "fp16", 1, True),
                 (128, "bf16", 8, True))),
)

# GQA ratios that do not pack whole (issue 26): (q heads, kv heads) giving
# 3, 5 and 7 (unpacked, the Llama 3.2 3B / Qwen2.5-14B / Qwen2.5-7B ratios),
# 6 (groups of two, three per K/V head) and 24 (groups of eight, three per
# K/V head), each with head dims 64, 96 and 128 across them, both dtypes,
# every CHECK_MASKS mask and a long window (several tasks per CTA), LSE on.
ANY_RATIOS = ((6, 2), (10, 2), (14, 2), (12, 2), (24, 1))
ANY_RATIO_MASKS = CHECK_MASKS + (("window", 1000, 200),)

# seqused_k (issue 26: a KV cache's cache_seqlens): (head dim, dtype, mask,
# q heads, kv heads), the counts drawn by check.py per shape (0, 1 and
# seq_k among them).
SEQUSED = ((64, "fp16", CHECK_MASKS[1], 8, 2), (128, "bf16", CHECK_MASKS[0], 6, 2),
           (96, "fp16", CHECK_MASKS[2], 8, 8), (128, "fp16", ("window", 1000, 200), 8, 1))

# Paged K/V caches (issue 26), every page size the issue names: (page size,
# head dim, dtype, mask, q heads, kv heads, seqused_k). check.py scatters K
# and V into a cache of blocks in random order and runs only the shapes
# whose seq_k is a whole number of pages.
PAGED = ((16, 128, "bf16", CHECK_MASKS[1], 8, 2, True),
         (32, 64, "fp16", CHECK_MASKS[0], 6, 2, False),
         (64, 96, "fp16", CHECK_MASKS[2], 8, 8, True),
         (128, 128, "fp16", CHECK_MASKS[1], 8, 1, False),
         (256, 64, "bf16", ("window", 1000, 200), 8, 2, True))

# Split-KV (issue 26): (parts, page size or 0, head dim, dtype, mask, q
# heads, kv heads, seqused_k). check.py gives each a zeroed workspace.
SPLITS = ((4, 64, 128, "bf16", CHECK_MASKS[0], 32, 8, True),
          (3, 0, 64, "fp16", CHECK_MASKS[1], 8, 2, True),
          (7, 0, 96, "bf16", ("window", 1000, 200), 6, 2, False),
          (16, 16, 128, "fp16", CHECK_MASKS[1], 8, 1, True),
          (2, 256, 64, "bf16", CHECK_MASKS[0], 12, 4, True))

# Varlen (issue 26: cu_seqlens): (head dim, dtype, mask, q heads, kv heads,
# seqused_k). check.py packs each shape's batch of sequences (lengths 0, 1,
# 127, 128, 129 and the longest among them) and checks every sequence's
# rows against its own reference.
VARLEN = ((128, "bf16", CHECK_MASKS[1], 8, 2, False),
          (64, "fp16", CHECK_MASKS[0], 6, 2, True),
          (96, "bf16", ("window", 1000, 200), 8, 8, False),
          (128, "fp16", CHECK_MASKS[1], 14, 2, False),
          (64, "bf16", CHECK_MASKS[2], 10, 2, True))

# Head dims apart (issue 30: DeepSeek-V3's (192, 128)): (head dim, V head
# dim, dtype, mask, q heads, kv heads, extra variant fields), every mask of
# CHECK_MASKS and a long window at (192, 128), GQA 1/4/8 and 3, both dtypes,
# and (192, 128) with varlen, a paged cache and split-KV.
HEAD_DIMS = ((192, 128, "bf16", CHECK_MASKS[0], 8, 8, {}),
             (192, 128, "fp16", CHECK_MASKS[1], 8, 2, {}),
             (192, 128, "bf16", CHECK_MASKS[2], 8, 1, {}),
             (192, 128, "fp16", CHECK_MASKS[3], 6, 2, {}),
             (192, 128, "bf16", ("window", 1000, 200), 8, 2, {}),
             (192, 64, "fp16", CHECK_MASKS[1], 8, 8, {}),
             (192, 96, "bf16", CHECK_MASKS[0], 8, 2, {}),
             (128, 64, "bf16", CHECK_MASKS[1], 8, 1, {}),
             (128, 96, "fp16", CHECK_MASKS[2], 8, 8, {}),
             (192, 128, "bf16", CHECK_MASKS[1], 8, 2, {"varlen": True}),
             (192, 128, "fp16", CHECK_MASKS[0], 8, 2,
              {"page_size": 64, "seqused_k": True}),
             (192, 128, "bf16", CHECK_MASKS[1], 8, 1,
              {"num_splits": 3, "seqused_k": True}),
             # Head dim 256 (Gemma's): K/V blocks of 80 keys, 64 beside
             # pages of 64, 96 at (256, 128).
             (256, 256, "bf16", CHECK_MASKS[0], 8, 8, {}),
             (256, 256, "fp16", CHECK_MASKS[1], 8, 2, {}),
             (256, 256, "bf16", CHECK_MASKS[2], 8, 1, {}),
             (256, 256, "fp16", CHECK_MASKS[3], 6, 2, {}),
             (256, 256, "bf16", ("window", 1000, 200), 8, 2, {}),
             (256, 128, "bf16", CHECK_MASKS[1], 8, 2, {}),
             (256, 64, "fp16", CHECK_MASKS[0], 8, 8, {}),
             (256, 256, "bf16", CHECK_MASKS[1], 8, 2, {"varlen": True}),
             (256, 256, "fp16", CHECK_MASKS[0], 8, 2,
              {"page_size": 64, "seqused_k": True}),
             (256, 256, "bf16", CHECK_MASKS[1], 8, 1,
              {"num_splits": 3, "seqused_k": True}),
             # Head dim 32: half a swizzle line a row, the boxes 64 columns
             # wide (zeros past the head dim).
             (32, 32, "bf16", CHECK_MASKS[0], 8, 8, {}),
             (32, 32, "fp16", CHECK_MASKS[1], 8, 2, {}),
             (32, 32, "bf16", CHECK_MASKS[2], 8, 1, {}),
             (32, 32, "fp16", CHECK_MASKS[3], 6, 2, {}),
             (64, 32, "bf16", CHECK_MASKS[1], 8, 2, {}),
             (32, 32, "bf16", CHECK_MASKS[1], 8, 2, {"varlen": True}),
             (32, 32, "fp16", CHECK_MASKS[0], 8, 2,
              {"page_size": 16, "seqused_k": True}),
             (32, 32, "bf16", CHECK_MASKS[1], 8, 1,
              {"num_splits": 3, "seqused_k": True}))

# K/V blocks other than the head dim's default (fa4c --block-n), each a
# schedule of its own: (schedule, head dim, dtype, mask, kv heads).
BLOCK_SCHEDULES = {"n176": ("--block-n=176",), "n64": ("--block-n=64",),
                   "n96": ("--block-n=96",), "n208": ("--block-n=208",)}
BLOCK_NS = (("n176", 128, "bf16", CHECK_MASKS[0], 8),
            ("n176", 128, "fp16", CHECK_MASKS[1], 2),
            ("n64", 128, "bf16", CHECK_MASKS[2], 1),
            ("n96", 96, "fp16", CHECK_MASKS[3], 8),
            ("n208", 64, "bf16", CHECK_MASKS[1], 2),
            ("n64", 256, "bf16", CHECK_MASKS[1], 2))

# The persistent grid for kernels `--grid=auto` compiles per-task (Hopper's
# dense fp16/bf16 causal forward at head dims 96 to 256, whatever the SM
# count): its CTAs run several tasks in the heaviest-first order, which the
# per-task grid never does, so the matrix keeps a few of each.
GRID_SCHEDULES = {"persistent": ("--grid=persistent",)}
PERSISTENT = ((128, "bf16", CHECK_MASKS[1], 2), (128, "fp16", CHECK_MASKS[1], 8),
              (96, "fp16", CHECK_MASKS[1], 1), (96, "bf16", CHECK_MASKS[1], 4))

# Kernels of the CHECK_MASKS matrix (with the LSE) also compiled under the
# three forced schedules: (head dim, dtype, mask, kv heads).
SCHEDULED_MATRIX = ((64, "fp16", CHECK_MASKS[0], 8),
                    (128, "bf16", CHECK_MASKS[1], 2),
                    (96, "bf16", CHECK_MASKS[2], 1),
                    (128, "fp16", CHECK_MASKS[3], 8))


def _mask_name(mask, left, right):
    def side(n):
        return "inf" if n < 0 else str(n)
    return f"win{side(left)}_{side(right)}" if mask == "window" else mask


def check_name(head_dim, dtype, mask, left, right, q_heads, kv_heads, lse,
               schedule="auto", seqused_k=False, page_size=0, num_splits=1,
               varlen=False, v_head_dim=None):
    dv = "" if v_head_dim in (None, head_dim) else f"v{v_head_dim}"
    return (f"check-hd{head_dim}{dv}-{dtype}-{_mask_name(mask, left, right)}-"
            f"q{q_heads}kv{kv_heads}" + ("-lse" if lse else "") +
            ("-seqused" if seqused_k else "") +
            ("-varlen" if varlen else "") +
            (f"-page{page_size}" if page_size else "") +
            (f"-split{num_splits}" if num_splits > 1 else "") +
            ("" if schedule == "auto" else "-" + schedule))


def bench_name(head_dim, dtype, causal, q_heads, kv_heads):
    return (f"bench-hd{head_dim}-{dtype}-{'causal' if causal else 'none'}-"
            f"q{q_heads}kv{kv_heads}")


def _check_variant(head_dim, dtype, mask, left, right, kv_heads, lse,
                   schedule="auto", q_heads=CHECK_Q_HEADS, seqused_k=False,
                   page_size=0, num_splits=1, varlen=False, v_head_dim=None):
    return dict(head_dim=head_dim, dtype=dtype, mask=mask, window_left=left,
                window_right=right, q_heads=q_heads, kv_heads=kv_heads,
                lse=lse, schedule=schedule, seqused_k=seqused_k,
                page_size=page_size, num_splits=num_splits, varlen=varlen,
                v_head_dim=head_dim if v_head_dim is None else v_head_dim)


def check_variants():
    """Every check kernel, the kernels of one variant (all but the
    schedule) next to each other, so that check.py computes its reference
    once for them:

    - head dim 64/96/128 x fp16/bf16 x CHECK_MASKS x GQA 1/4/8, with the
      LSE, under the `auto` schedule; the SCHEDULED_MATRIX ones also under
      the three forced schedules;
    - LONG_WINDOWS, each of its variants under the four schedules;
    - a few without the LSE (the kernel that writes no LSE is a different
      kernel);
    - ANY_RATIOS x ANY_RATIO_MASKS, with the LSE;
    - SEQUSED, with the LSE and a seqused_k table;
    - PAGED, with the LSE: a paged K/V cache of each page size;
    - PERSISTENT: causal kernels `auto` compiles per-task, on the
      persistent grid."""
    variants = []
    forced = [s for s in SCHEDULES if s != "auto"]
    for head_dim in (64, 96, 128):
        for dtype in ("fp16", "bf16"):
            for mask, left, right in CHECK_MASKS:
                for kv_heads in CHECK_KV_HEADS:
                    scheduled = ((head_dim, dtype, (mask, left, right), kv_heads)
                                 in SCHEDULED_MATRIX)
                    for schedule in ["auto"] + (forced if scheduled else []):
                        variants.append(_check_variant(
                            head_dim, dtype, mask, left, right, kv_heads, True,
                            schedule))
    for (left, right), chosen in LONG_WINDOWS:
        for head_dim, dtype, kv_heads, lse in chosen:
            for schedule in SCHEDULES:
                variants.append(_check_variant(head_dim, dtype, "window", left,
                                               right, kv_heads, lse, schedule))
    for head_dim, dtype, (mask, left, right), kv_heads in (
            (64, "fp16", CHECK_MASKS[0], 8),
            (96, "bf16", CHECK_MASKS[2], 1),
            (128, "bf16", CHECK_MASKS[1], 2),
            (128, "fp16", CHECK_MASKS[3], 8)):
        variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                       kv_heads, False))
    for i, (q_heads, kv_heads) in enumerate(ANY_RATIOS):
        for j, (mask, left, right) in enumerate(ANY_RATIO_MASKS):
            head_dim = (64, 96, 128)[(i + j) % 3]
            dtype = ("fp16", "bf16")[(i + j) % 2]
            variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                           kv_heads, True, q_heads=q_heads))
    for head_dim, dtype, (mask, left, right), q_heads, kv_heads in SEQUSED:
        variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                       kv_heads, True, q_heads=q_heads,
                                       seqused_k=True))
    for page, head_dim, dtype, (mask, left, right), q_heads, kv_heads, used \
            in PAGED:
        variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                       kv_heads, True, q_heads=q_heads,
                                       seqused_k=used, page_size=page))
    for splits, page, head_dim, dtype, (mask, left, right), q_heads, \
            kv_heads, used in SPLITS:
        variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                       kv_heads, True, q_heads=q_heads,
                                       seqused_k=used, page_size=page,
                                       num_splits=splits))
    for head_dim, dtype, (mask, left, right), q_heads, kv_heads, used \
            in VARLEN:
        variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                       kv_heads, True, q_heads=q_heads,
                                       seqused_k=used, varlen=True))
    for head_dim, dv, dtype, (mask, left, right), q_heads, kv_heads, extra \
            in HEAD_DIMS:
        variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                       kv_heads, True, q_heads=q_heads,
                                       v_head_dim=dv, **extra))
    for schedule, head_dim, dtype, (mask, left, right), kv_heads in BLOCK_NS:
        variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                       kv_heads, True, schedule))
    for head_dim, dtype, (mask, left, right), kv_heads in PERSISTENT:
        variants.append(_check_variant(head_dim, dtype, mask, left, right,
                                       kv_heads, True, "persistent"))
    for v in variants:
        v["name"] = check_name(v["head_dim"], v["dtype"], v["mask"],
                               v["window_left"], v["window_right"],
                               v["q_heads"], v["kv_heads"], v["lse"],
                               v["schedule"], v["seqused_k"], v["page_size"],
                               v["num_splits"], v["varlen"], v["v_head_dim"])
    return variants


def bench_configs():
    """bench.py's configurations: bf16, 16 heads, 16k tokens per batch
    (batch x seq), seq 1k/4k/16k, head dim 128 and 64; the seed's problem,
    fp16 hd128 32 q heads over 8 kv heads at seq 1024; causal and not; then
    issue 28's other rows (hd128 2 x 8k, 16 x 512, GQA 32/8 4 x 4k causal,
    hd64 8 x 4k, hd96 4 x 4k). Each names the kernel it runs (no LSE: a forward pass for
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
    # Issue 28's table beside the above: hd128 2 x 8k and 16 x 512, GQA
    # 32/8 at 4 x 4k, hd64 8 x 4k, hd96.
    for causal in (False, True):
        configs.append(dict(head_dim=128, dtype="bf16", q_heads=16, kv_heads=16,
                            batch=2, seq=8192, causal=causal))
    configs.append(dict(head_dim=128, dtype="bf16", q_heads=16, kv_heads=16,
                        batch=16, seq=512, causal=False))
    configs.append(dict(head_dim=128, dtype="bf16", q_heads=32, kv_heads=8,
                        batch=4, seq=4096, causal=True))
    configs.append(dict(head_dim=64, dtype="bf16", q_heads=16, kv_heads=16,
                        batch=8, seq=4096, causal=False))
    for causal in (False, True):
        configs.append(dict(head_dim=96, dtype="bf16", q_heads=16, kv_heads=16,
                            batch=4, seq=4096, causal=causal))
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
            lse=False, schedule="auto", seqused_k=False, page_size=0)
    return list(variants.values())


# The decode benchmark's kernels (bench/h200/decode.py): hd128 bf16, 32
# query heads over 8 K/V heads, a paged cache of each page size, its
# cache_seqlens the seqused_k table; seq_q 1 (the query heads of a group
# packed in the tile's rows).
DECODE_PAGES = (16, 64, 256)
# Split-KV part counts compiled for decode.py, which picks one per problem.
DECODE_SPLITS = (1, 2, 4, 8, 16, 32)


def decode_name(page_size, num_splits=1):
    return (f"decode-hd128-bf16-q32kv8-page{page_size}" +
            (f"-split{num_splits}" if num_splits > 1 else ""))


def decode_variants():
    return [dict(name=decode_name(page, splits), head_dim=128, dtype="bf16",
                 mask="none", window_left=-1, window_right=-1, q_heads=32,
                 kv_heads=8, lse=False, schedule="auto", seqused_k=True,
                 page_size=page, num_splits=splits)
            for page in DECODE_PAGES for splits in DECODE_SPLITS]


# The varlen prefill benchmark's kernels (bench/h200/varlen.py): hd128
# bf16, 16 heads, causal and not, packed sequences; its dense comparison
# runs bench_variants' kernels of the same variant.
def varlen_name(causal):
    return f"varlen-hd128-bf16-{'causal' if causal else 'none'}-q16kv16"


def varlen_variants():
    return [dict(name=varlen_name(causal), head_dim=128, dtype="bf16",
                 mask="causal" if causal else "none", window_left=-1,
                 window_right=-1, q_heads=16, kv_heads=16, lse=False,
                 schedule="auto", seqused_k=False, page_size=0, varlen=True)
            for causal in (False, True)]


def fa4c_flags(v):
    flags = [f"--head-dim={v['head_dim']}", f"--q-heads={v['q_heads']}",
             f"--kv-heads={v['kv_heads']}", f"--dtype={v['dtype']}",
             f"--mask={v['mask']}"]
    if v.get("v_head_dim", v["head_dim"]) != v["head_dim"]:
        flags.append(f"--v-head-dim={v['v_head_dim']}")
    if v["mask"] == "window":
        flags += [f"--window-left={v['window_left']}",
                  f"--window-right={v['window_right']}"]
    if v["lse"]:
        flags.append("--lse")
    if v.get("seqused_k"):
        flags.append("--seqused-k")
    if v.get("page_size"):
        flags += ["--paged-kv", f"--page-size={v['page_size']}"]
    if v.get("num_splits", 1) > 1:
        flags.append(f"--num-splits={v['num_splits']}")
    if v.get("varlen"):
        flags.append("--varlen")
    flags += {**SCHEDULES, **BLOCK_SCHEDULES, **GRID_SCHEDULES}[v["schedule"]]
    return flags


def kernels():
    """(use, variant) for every kernel, check's first."""
    return ([("check", v) for v in check_variants()] +
            [("bench", v) for v in bench_variants()] +
            [("decode", v) for v in decode_variants()] +
            [("varlen", v) for v in varlen_variants()])


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
    index.add_argument("--fa4-flags", default="",
                       help="the flags given to fa4c before every kernel's "
                            "own (scripts/hopper-kernels.sh's FA4_FLAGS)")
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
        # Before each kernel's own flags on fa4c's command line: a kernel's
        # schedule flags override these, an `auto` kernel takes them.
        "fa4_flags": args.fa4_flags.split(),
        "kernels": [dict(v, use=use, manifest=v["name"] + ".cubin.json",
                         fa4c_flags=fa4c_flags(v)) for use, v in kernels()],
    }, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
