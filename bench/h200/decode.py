#!/usr/bin/env python3
"""Decode on the H200: fa4's paged-cache kernels against the copy bandwidth
and torch's SDPA.

hd128 bf16, 32 query heads over 8 K/V heads, seq_q = 1, every sequence
`context` keys long (cache_seqlens), the cache paged at 16, 64 and 256 keys
a page with the pages of all sequences in a random order. For each batch x
context x page size this times (CUDA events around each call, the L2
flushed before it, the median of 100 after 25 of warm-up: bench.py's
timer):

  fa4    the precompiled kernel of bench/h200/variants.py's decode_variants
         (python/fa4/_capi.py, Kernel.bind: the arguments described once),
         split-KV into the parts choose_splits picks among DECODE_SPLITS
         (fa4.attention_with_kvcache's rule for num_splits=0), with a
         zeroed workspace each problem;
  SDPA   torch's scaled_dot_product_attention on the same keys as a
         contiguous [batch, 8, context, 128] cache (enable_gqa), every
         backend that takes it, the fastest reported;

and reports fa4's achieved bandwidth (the K and V bytes it must read,
2 * batch * context * 8 * 128 * 2, per second) against the device-to-device
copy bandwidth measured in the same run (a 4 GiB copy_: its bytes read plus
written per second). fa4's output is checked against SDPA's (bf16
tolerance) before it is timed.

  python3 bench/h200/decode.py dist-h200 --out decode.json
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
import variants  # noqa: E402
from common import device_info, load_capi  # noqa: E402

BATCHES = (1, 8, 32, 128)
CONTEXTS = (1024, 8192, 32768, 131072)
# Keys resident at once (the paged cache and SDPA's contiguous copy both):
# 4 Mi keys are 16 GiB of K and V each way.
MAX_KEYS = 1 << 22
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def choose_splits(tiles, blocks, sm_count, available):
    """fa4's rule (python/fa4/_torch.py, _choose_splits) over the part
    counts compiled: none when the tiles fill the GPU, else the fewest parts
    within 85 % of the best wave efficiency."""
    if blocks < 2 or tiles >= 0.8 * sm_count:
        return 1
    candidates = [s for s in available if s <= blocks and
                  (s == 1 or -(-blocks // s) != -(-blocks // (s - 1)))] or [1]

    def efficiency(splits):
        waves = tiles * splits / sm_count
        return waves / -(-waves // 1)
    best = max(efficiency(s) for s in candidates)
    return next(s for s in candidates if efficiency(s) >= 0.85 * best)


def workspace_words(batch, splits):
    """The split-KV workspace of seq_q = 1, 32 query heads over 8 (8 head
    groups of 4, one tile of 4 rows each)."""
    tiles = batch * (Q_HEADS // 4)
    return tiles * 4 * (4 * (1 + splits) + splits * HEAD_DIM)


def median_timer():
    """fn -> median ms: bench.py's CUDA-event timer (the L2 flushed before
    each of 100 calls, after 25 of warm-up)."""
    measure = bench.timer(None)
    return lambda fn: measure(fn)[0]


def warm_up(seconds):
    """Device-to-device copies for `seconds`, so that the GPU's clocks are
    up before anything is timed."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            y.copy_(x)
        torch.cuda.synchronize()
    del x, y


def copy_bandwidth(measure):
    x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = measure(lambda: y.copy_(x))
    del x, y
    return 2 * (4 << 30) / (ms * 1e-3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernels", help="directory of the precompiled kernels")
    parser.add_argument("--lib", help="libfa4rt.so (default: KERNELS/libfa4rt.so)")
    parser.add_argument("--out", help="write the results here as JSON")
    parser.add_argument("--short", type=int, default=0,
                        help="every sequence this many keys short of "
                             "`context` (its last block partial: the kernel "
                             "clears its V rows past the count); SDPA on as "
                             "many keys")
    args = parser.parse_args()
    capi = load_capi()
    lib = args.lib or os.path.join(args.kernels, "libfa4rt.so")
    torch.manual_seed(0)
    measure = median_timer()
    # Clocks up first: run 13's first problems, timed on a GPU just started,
    # took up to 3x longer than the same kernels a minute later.
    warm_up(seconds=3.0)
    copy = copy_bandwidth(measure)
    print(f"device-to-device copy: {copy / 1e9:.0f} GB/s", flush=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION,
                "math": SDPBackend.MATH}
    results = []
    kernels = {(page, splits): capi.load_kernel(
        os.path.join(args.kernels,
                     variants.decode_name(page, splits) + ".cubin.json"),
        library=lib)
        for page in variants.DECODE_PAGES for splits in variants.DECODE_SPLITS}
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{'batch':>5} {'context':>7} {'page':>4} {'split':>5} {'fa4 us':>8} {'GB/s':>6} "
          f"{'of copy':>7} {'SDPA us':>8} {'backend':>9} {'SDPA/fa4':>8}",
          flush=True)
    for batch in BATCHES:
        for context in CONTEXTS:
            if batch * context > MAX_KEYS:
                continue
            q = torch.randn(batch, 1, Q_HEADS, HEAD_DIM, dtype=torch.bfloat16,
                            device="cuda")
            k = torch.randn(batch, context, KV_HEADS, HEAD_DIM,
                            dtype=torch.bfloat16, device="cuda")
            v = torch.randn_like(k)
            keys = context - args.short
            used = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
            # SDPA: the contiguous cache, every backend that takes it.
            qt, kt, vt = (q.transpose(1, 2), k[:, :keys].transpose(1, 2),
                          v[:, :keys].transpose(1, 2))
            sdpa_times, sdpa_out = {}, None
            for name, backend in backends.items():
                try:
                    with sdpa_kernel(backend):
                        out = F.scaled_dot_product_attention(qt, kt, vt,
                                                             enable_gqa=True)
                        sdpa_times[name] = measure(
                            lambda: F.scaled_dot_product_attention(
                                qt, kt, vt, enable_gqa=True))
                    sdpa_out = out if sdpa_out is None else sdpa_out
                except RuntimeError:
                    continue
            best = min(sdpa_times, key=sdpa_times.get) if sdpa_times else None
            for page in variants.DECODE_PAGES:
                blocks = context // page
                order = torch.randperm(batch * blocks, device="cuda")
                table = order.reshape(batch, blocks).to(torch.int32)
                k_cache = torch.empty(batch * blocks, page, KV_HEADS, HEAD_DIM,
                                      dtype=torch.bfloat16, device="cuda")
                v_cache = torch.empty_like(k_cache)
                k_cache[order] = k.reshape(batch * blocks, page, KV_HEADS, HEAD_DIM)
                v_cache[order] = v.reshape(batch * blocks, page, KV_HEADS, HEAD_DIM)
                o = torch.empty_like(q)
                splits = choose_splits(batch * KV_HEADS, -(-context // 128),
                                       sm_count, variants.DECODE_SPLITS)
                extras = [used, table]
                if splits > 1:
                    extras.append(torch.zeros(workspace_words(batch, splits),
                                              dtype=torch.int32, device="cuda"))
                launch = kernels[(page, splits)].bind(q, k_cache, v_cache, o,
                                                      None, extras)
                launch()
                torch.cuda.synchronize()
                error = ((o.float() - sdpa_out.transpose(1, 2).float()).abs().max().item()
                         if sdpa_out is not None else None)
                ms = measure(launch)
                bytes_read = 2 * batch * keys * KV_HEADS * HEAD_DIM * 2
                bandwidth = bytes_read / (ms * 1e-3)
                row = dict(batch=batch, context=context, keys=keys,
                           page_size=page,
                           num_splits=splits,
                           fa4_us=ms * 1e3, fa4_gbps=bandwidth / 1e9,
                           fraction_of_copy=bandwidth / copy,
                           max_abs_error_vs_sdpa=error,
                           sdpa_us={n: t * 1e3 for n, t in sdpa_times.items()},
                           sdpa_best=best,
                           sdpa_over_fa4=(sdpa_times[best] / ms) if best else None)
                results.append(row)
                flag = "" if error is not None and error <= 2e-2 else " !"
                print(f"{batch:>5} {context:>7} {page:>4} {splits:>5} {ms * 1e3:>8.1f} "
                      f"{bandwidth / 1e9:>6.0f} {bandwidth / copy:>7.2f} "
                      f"{(sdpa_times[best] * 1e3 if best else float('nan')):>8.1f} "
                      f"{best or '-':>9} "
                      f"{(sdpa_times[best] / ms if best else float('nan')):>8.2f}{flag}",
                      flush=True)
                del k_cache, v_cache, table, order
            del q, k, v, qt, kt, vt, sdpa_out
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"),
                       "device": device_info(torch.device("cuda", 0)),
                       "copy_gbps": copy / 1e9, "short": args.short,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
