#!/usr/bin/env python3
"""The host time of each piece of an fa4 training step on the H200 (a step
whose GPU work is short is bound by it): torch's device and stream lookups,
fa4's launch layers from the C API up to the torch op and autograd, beside
SDPA's step. Host microseconds per call, the GPU kept busy (no
synchronization inside a loop). Kernels from autograd.py's prebuilt
directory.

    python3 bench/h200/host_overhead.py dist-autograd [--out FILE]
"""

import argparse
import gc
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kernels")
    parser.add_argument("--case", default="hd128-4x1k")
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--out")
    args = parser.parse_args()
    from sdpa_compile import install_fa4
    install_fa4(args.kernels)
    import torch
    import torch.nn.functional as F
    import fa4
    from fa4 import _torch
    from autograd import case_inputs
    dev = torch.device("cuda")
    q, k, v, dout, (causal, left, right, softcap) = case_inputs(args.case, dev)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o, lse = torch.ops.fa4.attention(q, k, v, causal, left, right, softcap,
                                     None, True)
    variant = _torch._validate(q, k, v, causal, left, right, softcap, None, True)
    target, sms = _torch._target(dev)
    fwd = fa4.compile(target=target, sm_count=sms, **variant)
    bwd = _torch._backward_kernel(variant, dev, False)
    scratch = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
               torch.empty_like(lse), torch.empty(q.shape, device=dev,
                                                  dtype=torch.float32)]
    capi_fwd = fwd._capi_kernel()
    capi_bwd = bwd._capi_kernel()
    bound_bwd = capi_bwd.bind(q, k, v, o, dout, lse, *scratch)
    sdpa_leaves = [t.detach().transpose(1, 2).clone().requires_grad_()
                   for t in (q, k, v)]
    sdpa_dout = dout.transpose(1, 2)

    def sdpa_step():
        out = F.scaled_dot_product_attention(*sdpa_leaves, is_causal=causal)
        torch.autograd.grad(out, sdpa_leaves, sdpa_dout)

    def fa4_step():
        out = fa4.attention(*leaves, causal=causal, softcap=softcap)
        torch.autograd.grad(out, leaves, dout)

    def device_scope():
        with torch.cuda.device(dev):
            pass

    def forward_with_grad():
        return fa4.attention(*leaves, causal=causal, softcap=softcap)

    retained = forward_with_grad()

    def backward_only():
        torch.autograd.grad(retained, leaves, dout, retain_graph=True)

    def fa4_step_no_gc():
        gc.disable()
        try:
            fa4_step()
        finally:
            gc.enable()

    # torch's own floor: a custom op with the same signature and autograd
    # registration whose forward and backward only allocate.
    @torch.library.custom_op("host_overhead::null", mutates_args=())
    def null_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.empty_like(q),
                q.new_empty((q.shape[0], q.shape[2], q.shape[1]),
                            dtype=torch.float32))

    @torch.library.custom_op("host_overhead::null_backward", mutates_args=())
    def null_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                torch.Tensor]:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def null_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:3], *output)
        ctx.mark_non_differentiable(output[1])

    def null_grad(ctx, dout, dlse):
        q, k, v, _, _ = ctx.saved_tensors
        return null_backward(dout.contiguous(), q, k, v) + (None,)

    null_op.register_autograd(null_grad, setup_context=null_setup)

    def null_step():
        out, _ = null_op(*leaves, causal)
        torch.autograd.grad(out, leaves, dout)

    pieces = {
        "torch.cuda.device(dev) enter+exit": device_scope,
        "current_stream(dev).cuda_stream":
            lambda: torch.cuda.current_stream(dev).cuda_stream,
        "_target(dev)": lambda: _torch._target(dev),
        "_validate": lambda: _torch._validate(q, k, v, causal, left, right,
                                              softcap, None, True),
        "fa4.compile (memo hit)":
            lambda: fa4.compile(target=target, sm_count=sms, **variant),
        "torch.empty_like(q)": lambda: torch.empty_like(q),
        "capi forward kernel(q,k,v,o,lse)":
            lambda: capi_fwd(q, k, v, o, lse, [], None),
        "fa4.Kernel(q,k,v,o,lse)": lambda: fwd(q, k, v, o, lse),
        "capi backward bind()":
            lambda: capi_bwd.bind(q, k, v, o, dout, lse, *scratch),
        "capi backward bound launch (3 kernels)": bound_bwd,
        "fa4.BackwardKernel(...)":
            lambda: bwd(q, k, v, o, dout, lse, *scratch),
        "torch.ops.fa4.attention (no grad)":
            lambda: torch.ops.fa4.attention(q, k, v, causal, left, right,
                                            softcap, None, True),
        "torch.ops.fa4.attention_backward":
            lambda: torch.ops.fa4.attention_backward(
                dout, q, k, v, o, lse, causal, left, right, softcap, None),
        "torch.zeros(lse's shape)": lambda: torch.zeros(lse.shape, device=dev),
        "fa4.attention with grad (forward, graph)": forward_with_grad,
        "autograd.grad of a retained fa4 graph": backward_only,
        "fa4 step (forward + autograd.grad)": fa4_step,
        "fa4 step, Python's gc off": fa4_step_no_gc,
        "sdpa step (forward + autograd.grad)": sdpa_step,
        "null custom op step (torch's floor)": null_step,
    }
    results = {}
    collections = []
    gc.callbacks.append(lambda phase, info: phase == "start" and
                        collections.append(info["generation"]))
    for name, fn in pieces.items():
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        collections.clear()
        start = time.perf_counter()
        for _ in range(args.iters):
            fn()
        host = (time.perf_counter() - start) / args.iters * 1e6
        torch.cuda.synchronize()
        total = (time.perf_counter() - start) / args.iters * 1e6
        gcs = [collections.count(g) for g in range(3)]
        results[name] = {"host_us": round(host, 1), "with_gpu_us": round(total, 1),
                         "gc_collections_by_generation": gcs}
        print(f"{name:45s} {host:9.1f} us host {total:9.1f} us with the GPU "
              f"gc {gcs}", flush=True)
    # Where the fa4 step's host time goes: fa4's functions timed inside it
    # (inclusive; a function called inside another counts in both).
    spent = {}

    def timed(owner, name, label):
        """owner.name (a module's function, or a class's __call__) counted
        and timed under `label` at every call."""
        inner = getattr(owner, name)

        def wrapper(*a, **kw):
            start = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                entry = spent.setdefault(label, [0, 0.0])
                entry[0] += 1
                entry[1] += time.perf_counter() - start
        setattr(owner, name, wrapper)

    from fa4 import _capi
    for name in ("_validate", "_check_tensors", "_target", "_tma_ready",
                 "_allocate", "_launch", "_backward_kernel",
                 "_check_backward_tensors", "_save_for_backward", "compile",
                 "_needs_grad"):
        timed(_torch, name, f"fa4._torch.{name}")
    for name in ("_arguments", "_tensor", "_describe", "_current_stream"):
        timed(_capi, name, f"fa4._capi.{name}")
    for cls in (_capi.Kernel, _capi.BackwardKernel, fa4.Kernel,
                fa4.BackwardKernel):
        timed(cls, "__call__", f"{cls.__module__}.{cls.__name__}.__call__")
    for _ in range(10):
        fa4_step()
    torch.cuda.synchronize()
    spent.clear()
    start = time.perf_counter()
    for _ in range(args.iters):
        fa4_step()
    step = (time.perf_counter() - start) / args.iters * 1e6
    torch.cuda.synchronize()
    print(f"instrumented fa4 step: {step:.1f} us host")
    breakdown = {}
    for name, (calls, seconds) in sorted(spent.items(), key=lambda e: -e[1][1]):
        per_step = seconds / args.iters * 1e6
        breakdown[name] = {"calls_per_step": calls / args.iters,
                           "us_per_step": round(per_step, 1)}
        print(f"  {name:45s} {calls / args.iters:5.1f} calls {per_step:9.1f} us")
    results["instrumented fa4 step"] = {"host_us": round(step, 1),
                                        "breakdown": breakdown}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"case": args.case, "pieces": results}, f, indent=1)


if __name__ == "__main__":
    main()
