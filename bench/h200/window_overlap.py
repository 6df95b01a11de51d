#!/usr/bin/env python3
"""Sliding-window kernels with and without the Hopper consumers' intra-
warpgroup overlap, timed and checked on the H200 (each kernel in a child
process with a time limit).

Here, into DIR (window LEFT RIGHT, heads QH/KVH; bf16, head dim 128):

  fa4c --target=sm_90a --sm-count=132 --head-dim=128 --q-heads=QH \\
      --kv-heads=KVH --dtype=bf16 --mask=window --window-left=LEFT \\
      --window-right=RIGHT --hopper-overlap=on|off --emit=cubin \\
      -o DIR/win-LEFT-RIGHT-qQHkvKVH-overlapon|off.cubin

There:

  python3 bench/h200/window_overlap.py DIR [--shape 4x4096] [--out F.json]

For every pair it prints the TFLOP/s of each (CUDA events, median of 20
launches after 5; FLOPs of the visible keys only) and the largest error
against a float32 reference on the first batch's first two heads.
"""

import argparse
import glob
import json
import math
import multiprocessing as mp
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def run_one(manifest, batch, seq, queue):
    try:
        import torch
        from common import event_times, load_capi
        capi = load_capi()
        kernel = capi.load_kernel(manifest, os.path.join(os.path.dirname(manifest),
                                                         "libfa4rt.so"))
        a = kernel.manifest["attention"]
        hq, hkv, d = a["q_heads"], a["kv_heads"], a["head_dim"]
        left, right = a["window_left"], a["window_right"]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(batch, seq, h, d, generator=g, device="cuda").to(torch.bfloat16)
                   for h in (hq, hkv, hkv))
        out = torch.empty_like(q)
        launch = kernel.bind(q, k, v, out)
        ms = sorted(event_times(launch, 20, warmup=5))[10]
        i = torch.arange(seq, device="cuda")
        seen = ((i[None, :] >= i[:, None] - left) & (i[None, :] <= i[:, None] + right))
        visible = seen.sum().item()
        worst = 0.0
        for h in range(2):
            qh, kh, vh = q[0, :, h].float(), k[0, :, h * hkv // hq].float(), v[0, :, h * hkv // hq].float()
            s_ = (qh @ kh.T) * a["scale"]
            s_.masked_fill_(~seen, -math.inf)
            ref = torch.softmax(s_, -1) @ vh
            worst = max(worst, (out[0, :, h].float() - ref).abs().max().item())
        flops = 4 * batch * hq * visible * d
        queue.put(dict(ms=ms, tflops=flops / (ms * 1e-3) / 1e12, max_abs_error=worst))
    except Exception as e:  # reported, the others go on
        queue.put(dict(error=f"{type(e).__name__}: {e}"[:300]))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels")
    parser.add_argument("--shape", default="4x4096", help="BATCHxSEQ (default 4x4096)")
    parser.add_argument("--out")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    batch, seq = (int(x) for x in args.shape.split("x"))
    results = {}
    ctx = mp.get_context("spawn")
    for manifest in sorted(glob.glob(os.path.join(args.kernels, "win-*.cubin.json"))):
        queue = ctx.Queue()
        child = ctx.Process(target=run_one, args=(manifest, batch, seq, queue))
        child.start()
        child.join(args.timeout)
        if child.is_alive():
            child.kill()
            result = dict(error=f"timed out after {args.timeout} s")
        else:
            result = queue.get() if not queue.empty() else dict(error="no result")
        name = os.path.basename(manifest)[:-len(".cubin.json")]
        results[name] = result
        print(name, json.dumps(result), flush=True)
    for name in sorted(results):
        if name.endswith("overlapon"):
            off = results.get(name[:-2] + "off", {})
            on = results[name]
            if "tflops" in on and "tflops" in off:
                print(f"{name[:-len('-overlapon')]}: on {on['tflops']:.0f} off {off['tflops']:.0f} "
                      f"TFLOP/s ({on['tflops'] / off['tflops']:.2f}x)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(shape=args.shape, results=results), f, indent=1)
    return 0 if all("error" not in r and r["max_abs_error"] < 2e-2 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
