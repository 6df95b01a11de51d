#!/usr/bin/env python3
"""Varlen prefill on the H200: fa4's packed-batch kernel against fa4's own
dense kernel at the mean length and torch's SDPA on the padded batch.

A batch of 16 sequences whose lengths are drawn (seeded) uniformly from 64
to 8192, hd128 bf16, 16 heads, causal and not. Each is timed with CUDA
events around each call, the L2 flushed before it, the median of 100 after
25 of warm-up (bench.py's timer):

  varlen  the precompiled kernel of bench/h200/variants.py's
          varlen_variants on the packed [1, total, 16, 128] tensors and the
          cu_seqlens tables;
  dense   fa4's dense kernel (bench_variants', the same variant) on a
          [16, mean, 16, 128] batch, mean the sequences' mean length: the
          same number of tokens without the raggedness;
  padded  SDPA (every backend that takes it, the fastest) on the batch
          padded to the longest sequence, [16, 16, longest, 128] (causal:
          is_causal, which keeps every real row right; not causal: no mask,
          which times the padded work without masking the padding out).

TFLOP/s count real work only: 4 * head_dim * heads * the visible (query,
key) pairs of each sequence (causal: L * (L + 1) / 2 of a sequence of L).
varlen's O is checked against SDPA run sequence by sequence (bf16
tolerance) before it is timed. Goal (issue 26): varlen >= 0.9x dense.

  python3 bench/h200/varlen.py dist-h200 --out varlen.json
"""

import argparse
import datetime
import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
import variants  # noqa: E402
from common import device_info, load_capi  # noqa: E402

SEQUENCES, SHORTEST, LONGEST = 16, 64, 8192
HEADS, HEAD_DIM = 16, 128


def pairs(length, causal):
    return length * (length + 1) // 2 if causal else length * length


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernels", help="directory of the precompiled kernels")
    parser.add_argument("--lib", help="libfa4rt.so (default: KERNELS/libfa4rt.so)")
    parser.add_argument("--out", help="write the results here as JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--equal", action="store_true",
                        help="every sequence the drawn lengths' mean long "
                             "(what the packed layout costs by itself)")
    args = parser.parse_args()
    capi = load_capi()
    lib = args.lib or os.path.join(args.kernels, "libfa4rt.so")
    generator = torch.Generator().manual_seed(args.seed)
    lengths = torch.randint(SHORTEST, LONGEST + 1, (SEQUENCES,),
                            generator=generator).tolist()
    if args.equal:
        lengths = [round(sum(lengths) / SEQUENCES)] * SEQUENCES
    total, longest = sum(lengths), max(lengths)
    mean = round(total / SEQUENCES)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(),
                      dtype=torch.int32, device="cuda")
    print(f"lengths {lengths} (total {total}, mean {mean}, longest {longest})",
          flush=True)
    measure = bench.timer(None)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION}
    results = []
    for causal in (False, True):
        q = torch.randn(1, total, HEADS, HEAD_DIM, dtype=torch.bfloat16,
                        device="cuda")
        k, v = torch.randn_like(q), torch.randn_like(q)
        o = torch.empty_like(q)
        varlen = capi.load_kernel(os.path.join(
            args.kernels, variants.varlen_name(causal) + ".cubin.json"),
            library=lib)
        launch = varlen.bind(q, k, v, o, None, [cu, cu])
        launch()
        torch.cuda.synchronize()
        # Checked sequence by sequence against SDPA.
        error = 0.0
        for b in range(SEQUENCES):
            q0, q1 = int(cu[b]), int(cu[b + 1])
            want = F.scaled_dot_product_attention(
                *(t[:, q0:q1].transpose(1, 2) for t in (q, k, v)),
                is_causal=causal).transpose(1, 2)
            error = max(error, (o[:, q0:q1].float() - want.float()).abs().max().item())
        varlen_ms = measure(launch)[0]
        work = 4 * HEAD_DIM * HEADS * sum(pairs(n, causal) for n in lengths)
        # fa4 dense at the mean length.
        dense_kernel = capi.load_kernel(os.path.join(
            args.kernels,
            variants.bench_name(HEAD_DIM, "bf16", causal, HEADS, HEADS) +
            ".cubin.json"), library=lib)
        qd = torch.randn(SEQUENCES, mean, HEADS, HEAD_DIM, dtype=torch.bfloat16,
                         device="cuda")
        kd, vd, od = torch.randn_like(qd), torch.randn_like(qd), torch.empty_like(qd)
        dense_ms = measure(dense_kernel.bind(qd, kd, vd, od))[0]
        dense_work = 4 * HEAD_DIM * HEADS * SEQUENCES * pairs(mean, causal)
        del qd, kd, vd, od
        # SDPA on the batch padded to the longest.
        qp = torch.zeros(SEQUENCES, HEADS, longest, HEAD_DIM,
                         dtype=torch.bfloat16, device="cuda")
        kp, vp = torch.zeros_like(qp), torch.zeros_like(qp)
        for b in range(SEQUENCES):
            q0, q1 = int(cu[b]), int(cu[b + 1])
            qp[b, :, :q1 - q0] = q[0, q0:q1].transpose(0, 1)
            kp[b, :, :q1 - q0] = k[0, q0:q1].transpose(0, 1)
            vp[b, :, :q1 - q0] = v[0, q0:q1].transpose(0, 1)
        sdpa_times = {}
        for name, backend in backends.items():
            try:
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal)
                    sdpa_times[name] = measure(
                        lambda: F.scaled_dot_product_attention(
                            qp, kp, vp, is_causal=causal))[0]
            except RuntimeError:
                continue
        best = min(sdpa_times, key=sdpa_times.get) if sdpa_times else None
        del qp, kp, vp
        row = dict(causal=causal, lengths=lengths, total=total, mean=mean,
                   longest=longest, varlen_ms=varlen_ms,
                   varlen_tflops=work / (varlen_ms * 1e-3) / 1e12,
                   max_abs_error_vs_sdpa=error,
                   dense_ms=dense_ms,
                   dense_tflops=dense_work / (dense_ms * 1e-3) / 1e12,
                   padded_sdpa_ms={n: t for n, t in sdpa_times.items()},
                   padded_sdpa_best=best,
                   padded_sdpa_tflops=(work / (sdpa_times[best] * 1e-3) / 1e12
                                       if best else None))
        row["varlen_over_dense"] = row["varlen_tflops"] / row["dense_tflops"]
        results.append(row)
        print(f"{'causal' if causal else 'full':>6}: varlen {varlen_ms:.3f} ms "
              f"{row['varlen_tflops']:.0f} TFLOP/s (err {error:.3g}), dense at "
              f"the mean {dense_ms:.3f} ms {row['dense_tflops']:.0f} TFLOP/s, "
              f"ratio {row['varlen_over_dense']:.2f}; padded SDPA "
              f"{(sdpa_times[best] if best else float('nan')):.3f} ms ({best}) "
              f"{row['padded_sdpa_tflops'] or float('nan'):.0f} TFLOP/s real",
              flush=True)
        del q, k, v, o
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"),
                       "device": device_info(torch.device("cuda", 0)),
                       "seed": args.seed, "equal": args.equal,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
