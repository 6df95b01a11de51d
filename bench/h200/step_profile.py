#!/usr/bin/env python3
"""Where a training step's time goes on the H200 when fa4.attention is in
it: the host time of the forward and of the backward through torch's
autograd (cProfile, the 25 costliest calls), beside their GPU time (CUDA
events around a step, and around the kernels alone). The kernels come from
autograd.py's prebuilt directory (prebuilt_fa4.py stands in for the native
extension).

    python3 bench/h200/step_profile.py dist-autograd --case hd128-4x1k
"""

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kernels")
    parser.add_argument("--case", default="hd128-4x1k")
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    from sdpa_compile import install_fa4
    install_fa4(args.kernels)
    import torch
    import fa4
    from autograd import case_inputs
    *leaves, dout, (causal, _, _, softcap) = case_inputs(
        args.case, torch.device("cuda"))
    leaves = [t.requires_grad_() for t in leaves]
    kwargs = dict(causal=causal, softcap=softcap)

    def step():
        out = fa4.attention(*leaves, **kwargs)
        torch.autograd.grad(out, leaves, dout)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    # Host time per step (the GPU kept busy or not).
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    host = (time.perf_counter() - start) / args.steps
    torch.cuda.synchronize()
    total = (time.perf_counter() - start) / args.steps
    print(f"step: {host * 1e3:.3f} ms host, {total * 1e3:.3f} ms with the GPU")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(25)
    print(text.getvalue()[-6000:])
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(20)
    print(text.getvalue()[-5000:])
    # The GPU's side: every kernel and copy of a few steps, with its time,
    # and the gaps torch's profiler sees between them.
    from torch.profiler import ProfilerActivity, profile as trace
    with trace(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25,
                                    max_name_column_width=60))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25,
                                    max_name_column_width=60))


if __name__ == "__main__":
    main()
