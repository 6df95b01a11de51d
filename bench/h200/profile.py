#!/usr/bin/env python3
"""Launches one fa4 kernel (a forward or a backward manifest) on random
inputs, for a profiler to watch: ncu through bench/h200/profile.sh.

  python3 bench/h200/profile.py KERNEL.cubin.json BATCH SEQ_Q SEQ_K \
      [--launches N] [--lib libfa4rt.so]

A forward takes q, k, v and the output (and the LSE when its manifest has
one; an FP8 one e4m3 inputs, V in its vt layout and descale tables of
ones); a backward takes the eleven tensors of its launch, with O and the LSE
of a float32 reference forward, so that its softmax sees real statistics.
Prints the median time of the launches after the first (CUDA events).

For a comparison in the same profiler, KERNEL.cubin.json may instead name
FlashAttention-4's own Hopper path, flash-attn-4/HD/DTYPE/MASK/QH/KVH
(e.g. flash-attn-4/128/bf16/causal/16/16: head dim, bf16 or fp16, none or
causal, query and K/V heads), launched through its interface into a
preallocated O; its first call compiles the kernel (bench.py's
load_flash_attn_4 finds the package)."""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("manifest")
    parser.add_argument("batch", type=int)
    parser.add_argument("seq_q", type=int)
    parser.add_argument("seq_k", type=int)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--lib", default=None)
    args = parser.parse_args()

    if args.launches < 1:
        parser.error("--launches must be at least 1")
    if args.manifest.startswith("flash-attn-4"):
        spec = parse_peer(args.manifest)
        import torch
        return launch_flash_attn_4(args, spec, torch)
    if not os.path.isfile(args.manifest):
        sys.exit(f"profile: {args.manifest}: no such manifest")
    import torch
    from backward import reference
    from common import load_capi
    capi = load_capi()
    lib = args.lib or os.path.join(os.path.dirname(args.manifest), "libfa4rt.so")
    import json
    with open(args.manifest) as f:
        kind = json.load(f).get("kind", "forward")
    kernel = (capi.load_backward if kind == "backward" else capi.load_kernel)(
        args.manifest, lib)
    a = kernel.manifest["attention"]
    b, sq, sk = args.batch, args.seq_q, args.seq_k
    hq, hkv, d = a["q_heads"], a["kv_heads"], a["head_dim"]
    dtype = torch.bfloat16 if a["dtype"] == "bf16" else torch.float16
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device=dev, generator=g).to(dtype)

    q, k, v = randn(b, sq, hq, d), randn(b, sk, hkv, d), randn(b, sk, hkv, d)
    if kind == "backward":
        causal = a["mask"] == "causal"
        window = ((a["window_left"], a["window_right"]) if a["mask"] == "window"
                  else None)
        with torch.no_grad():
            o32, lse = reference(q.float(), k.float(), v.float(), causal, window,
                                 a["scale"], a["softcap"], hq // hkv)
        o, lse = o32.to(dtype), lse.float().contiguous()
        dout = randn(b, sq, hq, d)
        tensors = (q, k, v, o, dout, lse, torch.empty_like(q), torch.empty_like(k),
                   torch.empty_like(v),
                   torch.empty(b, hq, sq, device=dev, dtype=torch.float32),
                   torch.empty(b, sq, hq, d, device=dev, dtype=torch.float32))
        launch = kernel.bind(*tensors)
    elif a["dtype"] == "e4m3":
        # FP8: e4m3 inputs with descale tables of ones, V in the vt layout
        # the kernel reads (python/fa4/_fp8.py), O in its own dtype.
        from common import load_package_file
        layout = load_package_file("_fp8").prepare_fp8_value
        fp8 = torch.float8_e4m3fn
        q8, k8 = q.to(fp8), k.to(fp8)
        vt = layout(v.to(fp8))
        out = torch.empty(b, sq, hq, a["v_head_dim"], device=dev,
                          dtype=torch.bfloat16 if a.get("out_dtype", "bf16") == "bf16"
                          else torch.float16)
        lse = (torch.empty(b, hq, sq, device=dev, dtype=torch.float32)
               if a.get("lse") else None)
        ones = torch.ones(b, hkv, device=dev, dtype=torch.float32)
        launch = kernel.bind(q8, k8, vt, out, lse, extras=(ones, ones, ones))
    else:
        out = torch.empty_like(q)
        lse = (torch.empty(b, hq, sq, device=dev, dtype=torch.float32)
               if a.get("lse") else None)
        launch = kernel.bind(q, k, v, out, lse)
    return time_launches(launch, args, os.path.basename(args.manifest), torch)


def parse_peer(spec):
    """(head dim, dtype name, causal, query heads, K/V heads) of a
    flash-attn-4/HD/DTYPE/MASK/QH/KVH spec, or exit saying what is wrong."""
    usage = (f"profile: {spec} is not flash-attn-4/HD/DTYPE/MASK/QH/KVH (HD a head "
             "dim, DTYPE bf16 or fp16, MASK none or causal, QH query heads a "
             "multiple of KVH K/V heads, e.g. flash-attn-4/128/bf16/causal/16/16)")
    parts = spec.split("/")
    if len(parts) != 6 or parts[0] != "flash-attn-4":
        sys.exit(usage)
    _, d, dtype, mask, hq, hkv = parts
    try:
        d, hq, hkv = int(d), int(hq), int(hkv)
    except ValueError:
        sys.exit(usage)
    if (d <= 0 or hq <= 0 or hkv <= 0 or hq % hkv or dtype not in ("bf16", "fp16")
            or mask not in ("none", "causal")):
        sys.exit(usage)
    return d, dtype, mask == "causal", hq, hkv


def launch_flash_attn_4(args, spec, torch):
    """The peer's launches, for the profiler beside fa4's."""
    from bench import load_flash_attn_4
    d, dtype, causal, hq, hkv = spec
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    interface, version = load_flash_attn_4()
    if interface is None:
        sys.exit(f"profile: flash-attn-4 does not import: {version}")
    b, sq, sk = args.batch, args.seq_q, args.seq_k
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device=dev, generator=g).to(dtype)

    q, k, v = randn(b, sq, hq, d), randn(b, sk, hkv, d), randn(b, sk, hkv, d)
    out = torch.empty_like(q)

    def launch():
        interface._flash_attn_fwd(q, k, v, causal=causal, out=out)
    return time_launches(launch, args, f"flash-attn-4 {version}", torch)


def time_launches(launch, args, what, torch):
    from common import event_times
    b, sq, sk = args.batch, args.seq_q, args.seq_k
    times = event_times(launch, args.launches)
    rest = sorted(times[1:] or times)
    print(f"{what} {b}x{sq}x{sk}: "
          f"{rest[len(rest) // 2] * 1000:.1f} us (median of {len(rest)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
