#!/usr/bin/env python3
"""A varlen kernel launched inside CUDA graph capture on the H200: the
launch is captured once (python/fa4/_capi.py's Kernel.bind; nothing waits
for the GPU, nothing reads the tables on the host), then replayed with new
cu_seqlens contents and new inputs of the same sizes; each replay's O is
checked sequence by sequence against SDPA (bf16 tolerance).

  python3 bench/h200/graph_varlen.py KERNELS --out graph.json
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import variants  # noqa: E402
from common import device_info, load_capi  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernels")
    parser.add_argument("--out")
    args = parser.parse_args()
    capi = load_capi()
    kernel = capi.load_kernel(
        os.path.join(args.kernels, variants.varlen_name(True) + ".cubin.json"),
        library=os.path.join(args.kernels, "libfa4rt.so"))
    total, sequences = 6000, 8
    q = torch.empty(1, total, 16, 128, dtype=torch.bfloat16, device="cuda")
    k, v, o = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)
    cu = torch.zeros(sequences + 1, dtype=torch.int32, device="cuda")
    launch = kernel.bind(q, k, v, o, None, [cu, cu])
    launch()  # loads the module outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    results = []
    generator = torch.Generator().manual_seed(0)
    for replay in range(3):
        cuts = sorted(torch.randint(0, total + 1, (sequences - 1,),
                                    generator=generator).tolist())
        table = [0] + cuts + [total]
        cu.copy_(torch.tensor(table, dtype=torch.int32))
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, generator=generator).to(t.dtype))
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        error = 0.0
        for b in range(sequences):
            q0, q1 = table[b], table[b + 1]
            if q1 == q0:
                continue
            want = F.scaled_dot_product_attention(
                *(t[:, q0:q1].transpose(1, 2) for t in (q, k, v)),
                is_causal=True).transpose(1, 2)
            error = max(error, (o[:, q0:q1].float() - want.float()).abs().max().item())
        ok = error <= 2e-2
        results.append(dict(replay=replay, cu_seqlens=table, max_abs_error=error,
                            ok=ok))
        print(f"replay {replay}: lengths {[table[i + 1] - table[i] for i in range(sequences)]}"
              f" max |dO| {error:.3g} {'ok' if ok else 'FAILED'}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": device_info(torch.device("cuda", 0)),
                       "results": results}, f, indent=1)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
