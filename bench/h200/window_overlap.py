#!/usr/bin/env python3
"""Sliding-window kernels with and without the Hopper consumers' intra-
warpgroup overlap, compiled here and timed and checked on the H200.

A pair is one window variant compiled twice, `--hopper-overlap=on` (the
ping-pong with it) and `--hopper-overlap=off` (the sequential loop), named
win-LEFT-RIGHT-hdD[vDV]-DTYPE-qQHkvKVH[-seqused][-pageP][-splitS]-overlapon|off.
SETS holds the pairs of each run: `run41`, hd128 bf16 windows on a
contiguous K/V; `paged-split`, hd128 and (192, 128) windows on a paged cache
or split-KV (the ones ScheduleConfig::overlapFits decides), every page size
and part count decode uses, and `paged-split-timed`, the subset timed.

Here (no GPU): compile a set's pairs into DIR, print ptxas's registers,
spill bytes and stack of each (from the manifests) and write DIR/index.json,
which bench/h200/check.py reads (the `on` kernels under the schedule name
`pingpong`, the `off` ones `sequential`):

  python3 bench/h200/window_overlap.py DIR --compile build/bin/fa4c \\
      --set paged-split [--jobs 2] [--spills spills.json]

There (DIR with libfa4rt.so beside the kernels):

  python3 bench/h200/window_overlap.py DIR [--shapes 4x4096,1x1x16384] \\
      [--out F.json]

Each pair runs in a child process with a time limit. Per shape (BATCHxSEQ,
or BATCHxSEQ_QxSEQ_K with the window aligned bottom-right) both kernels get
the same inputs (a paged cache in a random page order, with a full
seqused_k table where the kernel has one; split-KV's zeroed workspace),
their O is compared with a float32 reference on the first batch's first
two K/V heads' query heads, and they are timed alternately: ROUNDS rounds
of the on kernel then the off one (the order turned every round), each
common.event_times over a CUDA graph of `reps` launches (no host time in
the events; reps so that a replay takes about half a millisecond), the
median per launch of all rounds. It prints each pair's microseconds, TFLOP/s
(FLOPs of the visible keys only) and off / on, and exits non-zero if any
error passes the dtype's tolerance or a pair fails.
"""

import argparse
import datetime
import glob
import json
import math
import multiprocessing as mp
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WINDOWS = ((256, 0), (1024, 0), (1000, 200))
# A pair: (head dim, V head dim, dtype, q heads, kv heads, (left, right),
# page size or 0, parts, seqused_k).
KV_CACHES = ((16, 1, True), (64, 1, True), (256, 1, True), (64, 1, False),
             (0, 2, False), (0, 4, False), (0, 16, False), (64, 4, True))
SETS = {
    "run41": [(128, 128, "bf16", qh, kvh, w, 0, 1, False)
              for w in WINDOWS for qh, kvh in ((16, 16), (32, 8))],
    "paged-split": [(hd, dv, dtype, qh, kvh, w, page, splits, used)
                    for hd, dv in ((128, 128), (192, 128))
                    for page, splits, used in KV_CACHES
                    for dtype in ("bf16", "fp16")
                    for qh, kvh in ((32, 32), (32, 8))
                    for w in WINDOWS],
    "paged-split-timed": [
        (128, 128, "bf16", 32, 8, (1000, 200), 16, 1, True),
        (128, 128, "fp16", 32, 32, (1024, 0), 16, 1, True),
        (128, 128, "bf16", 32, 32, (256, 0), 16, 1, True),
        (128, 128, "bf16", 32, 8, (1000, 200), 64, 1, True),
        (128, 128, "bf16", 32, 8, (1000, 200), 256, 1, True),
        (128, 128, "bf16", 32, 8, (256, 0), 64, 1, True),
        (128, 128, "fp16", 32, 32, (1024, 0), 64, 1, True),
        (128, 128, "bf16", 32, 8, (1000, 200), 0, 2, False),
        (128, 128, "bf16", 32, 8, (1000, 200), 0, 4, False),
        (128, 128, "bf16", 32, 8, (1000, 200), 0, 16, False),
        (128, 128, "fp16", 32, 32, (256, 0), 0, 4, False),
        (128, 128, "bf16", 32, 8, (1024, 0), 64, 4, True),
        (192, 128, "bf16", 32, 8, (1000, 200), 64, 1, True),
        (192, 128, "fp16", 32, 8, (1000, 200), 0, 4, False),
    ],
}
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}
ROUNDS = 10


def pair_name(hd, dv, dtype, qh, kvh, window, page, splits, used):
    left, right = window
    return (f"win-{left}-{right}-hd{hd}" + (f"v{dv}" if dv != hd else "") +
            f"-{dtype}-q{qh}kv{kvh}" + ("-seqused" if used else "") +
            (f"-page{page}" if page else "") +
            (f"-split{splits}" if splits > 1 else ""))


def fa4c_flags(hd, dv, dtype, qh, kvh, window, page, splits, used):
    flags = [f"--head-dim={hd}", f"--v-head-dim={dv}", f"--q-heads={qh}",
             f"--kv-heads={kvh}", f"--dtype={dtype}", "--mask=window",
             f"--window-left={window[0]}", f"--window-right={window[1]}"]
    if used:
        flags.append("--seqused-k")
    if page:
        flags += ["--paged-kv", f"--page-size={page}"]
    if splits > 1:
        flags.append(f"--num-splits={splits}")
    return flags


def compile_set(args):
    """Compiles the set's pairs into args.kernels; prints ptxas's figures,
    writes index.json (and --spills)."""
    os.makedirs(args.kernels, exist_ok=True)
    jobs = []
    for pair in SETS[args.set]:
        for overlap in ("on", "off"):
            name = f"{pair_name(*pair)}-overlap{overlap}"
            jobs.append((name, pair, overlap,
                         [args.compile, "--target=sm_90a", "--sm-count=132",
                          "--cache", *fa4c_flags(*pair),
                          f"--hopper-overlap={overlap}", "--emit=cubin",
                          "-o", os.path.join(args.kernels, name + ".cubin")]))

    def run(job):
        done = subprocess.run(job[3], capture_output=True, text=True)
        return job, done

    rows, failed = [], 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for (name, pair, overlap, _), done in pool.map(run, jobs):
            if done.returncode:
                failed += 1
                print(f"{name}: fa4c failed: {done.stderr.strip()[:500]}",
                      flush=True)
                continue
            with open(os.path.join(args.kernels, name + ".cubin.json")) as f:
                manifest = json.load(f)
            ptxas = manifest["ptxas"]
            rows.append(dict(name=name, pair=pair_name(*pair), overlap=overlap,
                             **{k: ptxas[k] for k in (
                                 "registers", "spill_store_bytes",
                                 "spill_load_bytes", "stack_bytes")}))
            print(f"{name:<58} regs {ptxas['registers']:>3} spill "
                  f"{ptxas['spill_store_bytes']:>3}/{ptxas['spill_load_bytes']:>3}"
                  f" stack {ptxas['stack_bytes']:>3}", flush=True)
    from variants import _git_commit
    index = {"target": "sm_90a", "sm_count": 132, "fa4_flags": [],
             "compiled": datetime.datetime.now(datetime.timezone.utc).isoformat(
                 timespec="seconds"),
             "commit": _git_commit(), "kernels": []}
    for name, pair, overlap, _ in jobs:
        hd, dv, dtype, qh, kvh, (left, right), page, splits, used = pair
        index["kernels"].append(dict(
            name=name, manifest=name + ".cubin.json", use="check",
            schedule="pingpong" if overlap == "on" else "sequential",
            head_dim=hd, v_head_dim=dv, dtype=dtype, q_heads=qh,
            kv_heads=kvh, mask="window", window_left=left, window_right=right,
            lse=False, seqused_k=used, page_size=page, num_splits=splits))
    with open(os.path.join(args.kernels, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    if args.spills:
        with open(args.spills, "w") as f:
            json.dump(rows, f, indent=1)
    spilled = [r["name"] for r in rows if r["spill_store_bytes"] or
               r["spill_load_bytes"] or r["stack_bytes"]]
    print(f"{len(rows)} of {len(jobs)} compiled; {len(spilled)} with spills "
          f"or stack: {' '.join(spilled) or 'none'}")
    return 1 if failed else 0


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        parts = [int(p) for p in item.lower().split("x")]
        shapes.append((parts[0], parts[1], parts[1]) if len(parts) == 2
                      else tuple(parts))
    return shapes


def prepare(attention, shape, device):
    """q, k, v (a paged cache where the kernel reads one), the extras, the
    contiguous K and V, and the FLOPs of the visible keys."""
    import torch
    from check import split_workspace_words, visible
    batch, seq_q, seq_k = shape
    a = attention
    hq, hkv, d = a["q_heads"], a["kv_heads"], a["head_dim"]
    dv = a.get("v_head_dim", d)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[a["dtype"]]
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(batch, seq_q, hq, d, generator=g, device=device).to(dtype)
    k = torch.randn(batch, seq_k, hkv, d, generator=g, device=device).to(dtype)
    v = torch.randn(batch, seq_k, hkv, dv, generator=g, device=device).to(dtype)
    extras = []
    if a.get("seqused_k") is not None:
        extras.append(torch.full((batch,), seq_k, dtype=torch.int32,
                                 device=device))
    k_in, v_in = k, v
    page = a.get("page_size") or 0
    if a.get("block_table") is not None:
        blocks = seq_k // page
        order = torch.randperm(batch * blocks, generator=g, device=device)
        extras.append(order.reshape(batch, blocks).to(torch.int32))
        k_in = torch.empty(batch * blocks, page, hkv, d, dtype=dtype, device=device)
        v_in = torch.empty(batch * blocks, page, hkv, dv, dtype=dtype, device=device)
        k_in[order] = k.reshape(batch * blocks, page, hkv, d)
        v_in[order] = v.reshape(batch * blocks, page, hkv, dv)
    if a.get("num_splits", 1) > 1:
        extras.append(torch.zeros(split_workspace_words(a, batch, seq_q),
                                  dtype=torch.int32, device=device))
    seen = int(visible(seq_q, seq_k, a, device).sum())
    flops = 2 * batch * hq * seen * (d + dv)
    return q, k_in, v_in, extras, k, v, flops


def max_error(o, q, k, v, attention):
    """|O - reference| on the first batch, K/V heads 0 and 1 and their
    query heads."""
    from check import reference
    ratio = attention["q_heads"] // attention["kv_heads"]
    heads = 2 * ratio
    want, _ = reference(q[:1, :, :heads], k[:1, :, :2], v[:1, :, :2], attention)
    return (o[:1, :, :heads].float() - want).abs().max().item()


def graph_of(launch, reps):
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            launch()
    torch.cuda.synchronize()
    return graph


def run_pair(manifests, shapes, queue):
    """Both kernels of a pair at every shape: errors, then alternated
    timings. Puts {shape: {on: ..., off: ...}} on the queue."""
    try:
        import statistics
        import torch
        from common import event_times, load_capi
        capi = load_capi()
        kernels = {side: capi.load_kernel(
            path, os.path.join(os.path.dirname(path), "libfa4rt.so"))
            for side, path in manifests.items()}
        a = kernels["on"].manifest["attention"]
        results = {}
        for shape in shapes:
            q, k_in, v_in, extras, k, v, flops = prepare(a, shape, "cuda")
            launches, errors = {}, {}
            for side, kernel in kernels.items():
                out = torch.full((*q.shape[:3], v.shape[3]), math.nan,
                                 dtype=q.dtype, device="cuda")
                launches[side] = kernel.bind(q, k_in, v_in, out, None, extras)
                launches[side]()
                torch.cuda.synchronize()
                errors[side] = max_error(out, q, k, v, a)
            single = sorted(event_times(launches["on"], 5, warmup=2))[2]
            reps = max(1, min(50, math.ceil(0.5 / max(single, 1e-3))))
            graphs = {side: graph_of(launch, reps)
                      for side, launch in launches.items()}
            samples = {"on": [], "off": []}
            for r in range(ROUNDS):
                for side in (("on", "off") if r % 2 == 0 else ("off", "on")):
                    samples[side] += [t / reps for t in event_times(
                        graphs[side].replay, 5, warmup=1)]
            row = {}
            for side in ("on", "off"):
                ms = statistics.median(samples[side])
                row[side] = dict(us=ms * 1e3, tflops=flops / (ms * 1e-3) / 1e12,
                                 max_abs_error=errors[side],
                                 us_p20=sorted(samples[side])[len(samples[side]) // 5] * 1e3,
                                 us_p80=sorted(samples[side])[4 * len(samples[side]) // 5] * 1e3)
            row["off_over_on"] = row["off"]["us"] / row["on"]["us"]
            row["reps_per_graph"] = reps
            results["x".join(map(str, shape))] = row
            del graphs, launches, q, k_in, v_in, extras, k, v
            torch.cuda.empty_cache()
        queue.put(dict(attention=a, shapes=results))
    except Exception as e:  # reported, the others go on
        queue.put(dict(error=f"{type(e).__name__}: {e}"[:500]))


def time_pairs(args):
    from check import TOLERANCE as _  # noqa: F401  (check.py is importable)
    pairs = sorted({m[:-len("-overlapon.cubin.json")] for m in glob.glob(
        os.path.join(args.kernels, "win-*-overlapon.cubin.json"))})
    if args.only:
        pairs = [p for p in pairs if re.search(args.only, os.path.basename(p))]
    shapes = parse_shapes(args.shapes)
    results, ok = {}, True
    ctx = mp.get_context("spawn")
    for stem in pairs:
        name = os.path.basename(stem)
        manifests = {side: f"{stem}-overlap{side}.cubin.json"
                     for side in ("on", "off")}
        with open(manifests["on"]) as f:
            page = json.load(f)["attention"].get("page_size") or 0
        pair_shapes = [s for s in shapes if not page or s[2] % page == 0]
        queue = ctx.Queue()
        child = ctx.Process(target=run_pair, args=(manifests, pair_shapes, queue))
        child.start()
        child.join(args.timeout)
        if child.is_alive():
            child.kill()
            result = dict(error=f"timed out after {args.timeout} s")
        else:
            result = queue.get() if not queue.empty() else dict(
                error=f"no result (exit status {child.exitcode})")
        results[name] = result
        if "error" in result:
            ok = False
            print(f"{name}: {result['error']}", flush=True)
            continue
        tolerance = TOLERANCE[result["attention"]["dtype"]]
        for shape, row in result["shapes"].items():
            bad = [s for s in ("on", "off")
                   if not row[s]["max_abs_error"] <= tolerance]
            ok = ok and not bad
            print(f"{name:<52} {shape:>12}  on {row['on']['us']:>8.1f} us "
                  f"{row['on']['tflops']:>4.0f} TF  off {row['off']['us']:>8.1f} us "
                  f"{row['off']['tflops']:>4.0f} TF  off/on {row['off_over_on']:.3f}"
                  f"  err {row['on']['max_abs_error']:.1e}/"
                  f"{row['off']['max_abs_error']:.1e}"
                  + (f"  ERROR ABOVE {tolerance} ({','.join(bad)})" if bad else ""),
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(shapes=args.shapes, rounds=ROUNDS, results=results),
                      f, indent=1)
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels", help="the kernels' directory")
    parser.add_argument("--compile", metavar="FA4C",
                        help="compile --set's pairs with this fa4c (here)")
    parser.add_argument("--set", choices=sorted(SETS), default="run41")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--spills", help="with --compile: ptxas's figures as JSON")
    parser.add_argument("--shapes", "--shape", default="4x4096",
                        help="BATCHxSEQ or BATCHxSEQ_QxSEQ_K, comma-separated "
                             "(default 4x4096); a paged pair skips shapes whose "
                             "seq_k is not whole pages")
    parser.add_argument("--only", help="time only pairs whose name matches")
    parser.add_argument("--out")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds a pair's child may take (default 120)")
    args = parser.parse_args()
    return compile_set(args) if args.compile else time_pairs(args)


if __name__ == "__main__":
    sys.exit(main())
