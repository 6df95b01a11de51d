#!/usr/bin/env python3
"""fa4.attention trained through torch's autograd on the H200: the torch
op's CUDA backward (fa4's Hopper backward kernels, compiled by
fa4.compile_backward) against float32 autograd, and a training step's time
against torch's SDPA (cuDNN).

The fa4 package compiles in process with its native extension, which does
not load on the GPU machine (no LLVM): prebuilt_fa4.py stands in for it
there, serving the forward and backward kernels this script's `prebuild`
step compiled on the build machine for the variants below (as the torch op
asks for them: sm_90a, 132 SMs).

    # build machine
    PYTHONPATH=build/python build/python-venv/bin/python \\
        bench/h200/autograd.py prebuild dist-autograd
    # H200 (dist-autograd is ignored by git: carry it to the GPU machine)
    python3 bench/h200/autograd.py run dist-autograd --out $OUT/autograd.json

Each case runs in a child process with a --timeout (a hang is a failed
case). A case passes when fa4's dQ, dK and dV are within twice the error of
SDPA's FlashAttention-2 backward (cuDNN's where FA2 refuses) plus 1e-3,
against the float32 gradients (FlashAttention's rule; a fixed bound where
SDPA has no such variant), and (for `compiled`) when a torch.compile'd
training step gives the eager step's gradients within rounding.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# name: (batch, seq_q, seq_k, q_heads, kv_heads, head_dim, dtype, causal,
# window or None, softcap, how): how is "plain", "strided" (q, k, v views
# of (b, h, s, d) tensors), "compiled" (a torch.compile'd training step) or
# "deterministic" (the fixed dQ order: two backwards, the same bits).
CASES = {
    "hd128-4x1k": (4, 1024, 1024, 16, 16, 128, "bf16", False, None, 0.0, "plain"),
    "hd128-causal-2x2k": (2, 2048, 2048, 16, 16, 128, "bf16", True, None, 0.0, "plain"),
    "hd128-causal-strided": (2, 1024, 1024, 16, 16, 128, "bf16", True, None, 0.0, "strided"),
    "hd64-gqa4-777x1333": (2, 777, 1333, 8, 2, 64, "fp16", False, None, 0.0, "plain"),
    "hd96-gqa3-causal": (1, 1000, 1000, 12, 4, 96, "bf16", True, None, 0.0, "plain"),
    "hd64-window": (2, 512, 700, 8, 8, 64, "bf16", False, (128, 0), 0.0, "plain"),
    "hd128-softcap": (1, 1024, 1024, 8, 8, 128, "fp16", False, None, 30.0, "plain"),
    "hd64-causal-compiled": (2, 1024, 1024, 8, 8, 64, "bf16", True, None, 0.0, "compiled"),
    "hd128-4x1k-deterministic": (4, 1024, 1024, 16, 16, 128, "bf16", False, None, 0.0, "deterministic"),
    "hd64-causal-1x4k-deterministic": (1, 4096, 4096, 16, 16, 64, "bf16", True, None, 0.0, "deterministic"),
}


def variant_of(case):
    """The op's arguments of a case: causal, (left, right), softcap."""
    _, _, _, _, _, _, _, causal, window, softcap, _ = case
    left, right = window if window else (-1, -1)
    if causal:
        right = 0
    return causal, left, right, softcap


def case_inputs(name, device):
    """Case `name`'s inputs on `device` for the host-time scripts
    (step_profile.py, host_overhead.py): q, k, v drawn (batch, seq, heads,
    head_dim) in its dtype, dO like q, and its (causal, left, right,
    softcap)."""
    import torch
    case = CASES[name]
    b, sq, sk, hq, hkv, d, dtype, *_ = case
    dt = torch.bfloat16 if dtype == "bf16" else torch.float16
    q, k, v = (torch.randn(b, s, h, d, device=device, dtype=dt)
               for s, h in ((sq, hq), (sk, hkv), (sk, hkv)))
    dout = torch.randn(b, sq, hq, d, device=device, dtype=dt)
    return q, k, v, dout, variant_of(case)


def prebuild(out):
    """Compiles every case's forward and backward as the torch op asks for
    them on an H200, into `out` with prebuilt_fa4.py's index."""
    import torch
    import fa4
    from fa4 import _torch
    from prebuilt_fa4 import backward_key, variant_key
    os.makedirs(out, exist_ok=True)
    native = fa4._fa4
    asked = []
    compile_native, backward_native = native.compile, native.compile_backward

    def forward(*args):
        asked.append(variant_key(*args[:10], args[10], args[14], *args[15:]))
        return compile_native(*args)

    def backward(*args):
        asked.append(backward_key(*args))
        return backward_native(*args)
    native.compile, native.compile_backward = forward, backward
    index = {}
    try:
        for name, case in CASES.items():
            b, sq, sk, hq, hkv, d, dtype, *_ = case
            causal, left, right, softcap = variant_of(case)
            dt = torch.bfloat16 if dtype == "bf16" else torch.float16
            q = torch.empty(b, sq, hq, d, dtype=dt, device="meta")
            k = torch.empty(b, sk, hkv, d, dtype=dt, device="meta")
            variant = _torch._validate(q, k, k, causal, left, right, softcap,
                                       None, True)
            # The op's calls: the forward with the LSE, then its backward
            # (each asked of the extension: no memo between cases).
            fa4._memo.clear()
            kernels = [fa4.compile(target="sm_90a", sm_count=132,
                                   seqused_k=False, num_splits=1, **variant),
                       _torch._compile_backward(
                           variant, "sm_90a", 132,
                           deterministic=case[-1] == "deterministic")]
            assert len(asked) == 2, asked
            for kind, kernel, key in zip(("fwd", "bwd"), kernels, asked):
                stem = f"{name}-{kind}"
                with open(os.path.join(out, stem + ".cubin"), "wb") as f:
                    f.write(kernel.cubin)
                with open(os.path.join(out, stem + ".ptx"), "w") as f:
                    f.write(kernel.ptx)
                with open(os.path.join(out, stem + ".cubin.json"), "w") as f:
                    f.write(kernel._native.manifest_json)
                index[key] = stem
            asked.clear()
    finally:
        native.compile, native.compile_backward = compile_native, backward_native
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    shutil.copy(os.path.join(os.path.dirname(fa4.__file__), "libfa4rt.so"),
                os.path.join(out, "libfa4rt.so"))
    print(f"{len(index)} kernels for {len(CASES)} cases in {out}")


def run_case(args, name):
    from sdpa_compile import install_fa4
    install_fa4(args.kernels)
    import torch
    import torch.nn.functional as F
    import fa4
    from backward import reference
    case = CASES[name]
    b, sq, sk, hq, hkv, d, dtype, _, window, _, how = case
    causal, left, right, softcap = variant_of(case)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float16
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(sq + sk)

    def draw(*shape):
        return torch.randn(*shape, device=dev, generator=g).to(dt)
    if how == "strided":
        # (b, h, s, d) tensors seen as (b, s, h, d): read in place.
        q, k, v = (draw(b, h, s, d).transpose(1, 2)
                   for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
    else:
        q, k, v = draw(b, sq, hq, d), draw(b, sk, hkv, d), draw(b, sk, hkv, d)
    dout = draw(b, sq, hq, d)
    group, scale = hq // hkv, d ** -0.5
    window_arg = (left, right) if window else None
    kwargs = dict(causal=causal, softcap=softcap,
                  deterministic=how == "deterministic")
    if window:
        kwargs["window"] = window

    q32, k32, v32 = (t.float().requires_grad_() for t in (q, k, v))
    o32, _ = reference(q32, k32, v32, causal, window_arg, scale, softcap, group)
    want = torch.autograd.grad(o32, (q32, k32, v32), dout.float())

    def err(x, ref):
        return (x.float() - ref).abs().max().item()

    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o = fa4.attention(*leaves, **kwargs)
    o.backward(dout)
    torch.cuda.synchronize()
    result = {"name": name, "case": case,
              "fa4": {n: err(t.grad, w) for n, t, w in
                      zip(("dq", "dk", "dv"), leaves, want)}}
    result["fa4"]["o"] = err(o, o32.detach())
    result["grad_strides"] = [list(t.grad.stride()) for t in leaves]
    if how == "deterministic":
        first = [t.grad.clone() for t in leaves]
        again = torch.autograd.grad(fa4.attention(*leaves, **kwargs), leaves, dout)
        result["same_bits"] = all(torch.equal(a, b) for a, b in zip(first, again))

    def timed(fn):
        from common import event_times
        times = sorted(event_times(fn, args.reps, warmup=args.warmup))
        return times[len(times) // 2]

    # A training step's attention: forward and backward through autograd.
    def fa4_step():
        out = fa4.attention(*leaves, **kwargs)
        torch.autograd.grad(out, leaves, dout)
    flops = 3.5 * 4 * b * hq * sq * sk * d * (0.5 if causal else 1.0)
    ms = timed(fa4_step)
    result["fa4"].update(step_ms=ms, step_tflops=flops / ms / 1e9)

    if how == "compiled":
        weight = torch.nn.Parameter(torch.eye(d, device=dev, dtype=dt))

        def step(x):
            return fa4.attention(x @ weight, k, v, **kwargs).float().square().sum()
        eager = torch.autograd.grad(step(q), weight)[0]
        compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
        traced = torch.autograd.grad(compiled(q), weight)[0]
        scale_of = eager.float().abs().max().item()
        result["compiled"] = {"max_difference": err(traced, eager.float()),
                              "max_gradient": scale_of}

    if window is None and softcap == 0 and not (causal and sq != sk):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        views = [t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v)]
        dot = dout.transpose(1, 2)
        for label, backend in (("fa2", SDPBackend.FLASH_ATTENTION),
                               ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    def sdpa_step():
                        out = F.scaled_dot_product_attention(
                            *views, is_causal=causal, scale=scale,
                            enable_gqa=group > 1)
                        return torch.autograd.grad(out, views, dot)
                    grads = sdpa_step()
                    torch.cuda.synchronize()
                    entry = {n: err(gr.transpose(1, 2), w) for n, gr, w in
                             zip(("dq", "dk", "dv"), grads, want)}
                    ms = timed(sdpa_step)
                    entry.update(step_ms=ms, step_tflops=flops / ms / 1e9)
                    result[label] = entry
            except Exception as e:  # noqa: BLE001 - a backend refusing the variant
                result[label] = {"error": str(e).splitlines()[0][:200]}
    yardstick = next((result[n] for n in ("fa2", "cudnn")
                      if "dq" in result.get(n, {})), None)
    finite = all(x == x and abs(x) != float("inf") for x in result["fa4"].values())
    if yardstick is not None:
        ok = all(result["fa4"][n] <= 2 * yardstick[n] + 1e-3
                 for n in ("dq", "dk", "dv"))
        result["judged_by"] = "fa2" if "dq" in result.get("fa2", {}) else "cudnn"
    else:
        bound = 0.05 if dt == torch.bfloat16 else 0.01
        ok = all(result["fa4"][n] <= bound for n in ("dq", "dk", "dv"))
        result["judged_by"] = f"max error <= {bound}"
    if "same_bits" in result:
        ok = ok and result["same_bits"]
    if "compiled" in result:
        c = result["compiled"]
        ok = ok and c["max_difference"] <= 1e-2 * max(c["max_gradient"], 1.0)
    result["ok"] = finite and ok
    return result


def run(args):
    names = [n for n in CASES if args.only in n]
    if args.case:
        print(json.dumps(run_case(args, args.case)))
        return 0
    results, failed = [], 0
    for name in names:
        started = time.time()
        try:
            done = subprocess.run(
                [sys.executable, __file__, "run", args.kernels, "--case", name,
                 "--warmup", str(args.warmup), "--reps", str(args.reps)],
                capture_output=True, text=True, timeout=args.timeout)
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            result = json.loads(line) if done.returncode == 0 and line else {
                "name": name, "ok": False,
                # The exception's own line is not always the last (dynamo
                # ends with advice): the tail of stderr.
                "error": "\n".join(done.stderr.strip().splitlines()[-15:])[-3000:]
                         or "exit " + str(done.returncode)}
        except subprocess.TimeoutExpired:
            result = {"name": name, "ok": False,
                      "error": f"timed out after {args.timeout} s (a hang?)"}
        result["seconds"] = round(time.time() - started, 1)
        failed += not result.get("ok")
        results.append(result)
        print(json.dumps(result), flush=True)
    import torch
    from common import device_info
    with open(args.out, "w") as f:
        json.dump({"device": device_info(torch.device("cuda")),
                   "results": results}, f, indent=1)
    print(f"{len(results) - failed} of {len(results)} cases ok")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("prebuild", "run"))
    parser.add_argument("kernels")
    parser.add_argument("--out", default="autograd.json")
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--only", default="")
    parser.add_argument("--case", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step == "prebuild":
        prebuild(args.kernels)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
