"""On the H200: fa4.torch under torch.compile — a bf16 decoder layer that
calls F.scaled_dot_product_attention, run eagerly (PyTorch's own SDPA:
cuDNN or FlashAttention-2) and compiled with fa4.torch's rewrite (SDPA
replaced by torch.ops.fa4.attention on fa4's Hopper kernels), against the
same layer compiled without the rewrite. Reports the outputs' differences,
the layer's times and the attention kernels' alone, whose ratio the layer's
speed-up should follow. Each configuration runs in a child process with a
timeout; results JSON to --out.

The fa4 package needs its native extension to compile, which does not load
here (no LLVM): prebuilt_fa4.py stands in for it, serving the kernels
prebuild_sdpa.py compiled on the build machine (--kernels DIR).

    python3 bench/h200/sdpa_compile.py --kernels dist-sdpa --out $OUT/sdpa.json
"""

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# (batch, seq, heads, kv_heads, head_dim, causal)
CONFIGS = [(4, 2048, 16, 16, 128, True), (2, 4096, 16, 16, 128, True),
           (4, 2048, 16, 4, 128, True), (4, 2048, 16, 16, 128, False),
           (4, 2048, 16, 16, 64, True)]


def install_fa4(kernels):
    """The fa4 package with prebuilt_fa4 as its extension, importable."""
    package = os.path.join(tempfile.mkdtemp(prefix="fa4pkg-"), "fa4")
    os.makedirs(package)
    for name in ("__init__.py", "_capi.py", "_torch.py", "torch.py"):
        shutil.copy(os.path.join(ROOT, "python", "fa4", name), package)
    shutil.copy(os.path.join(HERE, "prebuilt_fa4.py"),
                os.path.join(package, "_fa4.py"))
    shutil.copy(os.path.join(kernels, "libfa4rt.so"), package)
    os.environ["FA4_PREBUILT_DIR"] = os.path.abspath(kernels)
    sys.path.insert(0, os.path.dirname(package))


def run(config, kernels, queue):
    try:
        queue.put(measure(config, kernels))
    except BaseException as e:  # noqa: BLE001 - a failed case, reported
        queue.put({"config": config, "error": f"{type(e).__name__}: {e}"[:2000]})


def timed(fn, *args, iters=20):
    import torch
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e3


def measure(config, kernels):
    install_fa4(kernels)
    import functools
    import torch
    import torch.nn.functional as F
    import fa4.torch
    batch, seq, heads, kv_heads, head_dim, causal = config
    torch.manual_seed(0)
    dim = heads * head_dim
    dev, dt = torch.device("cuda"), torch.bfloat16

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = torch.nn.LayerNorm(dim, dtype=dt)
            self.q = torch.nn.Linear(dim, dim, bias=False, dtype=dt)
            self.kv = torch.nn.Linear(dim, 2 * kv_heads * head_dim, bias=False, dtype=dt)
            self.o = torch.nn.Linear(dim, dim, bias=False, dtype=dt)
            self.norm2 = torch.nn.LayerNorm(dim, dtype=dt)
            self.up = torch.nn.Linear(dim, 4 * dim, bias=False, dtype=dt)
            self.down = torch.nn.Linear(4 * dim, dim, bias=False, dtype=dt)

        def forward(self, x):
            b, s, _ = x.shape
            h = self.norm1(x)
            q = self.q(h).view(b, s, heads, head_dim).transpose(1, 2)
            k, v = self.kv(h).view(b, s, 2, kv_heads, head_dim).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                               enable_gqa=kv_heads != heads)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, dim))
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    layer = Layer().to(dev)
    x = torch.randn(batch, seq, dim, device=dev, dtype=dt)
    with torch.no_grad():
        eager = layer(x)
        plain = torch.compile(layer, backend="aot_eager")
        want = plain(x)
        torch._dynamo.reset()
        report = []
        def rewriting(gm, example_inputs):
            report.extend(fa4.torch.replace_sdpa(gm))
            return fa4.torch.backend(gm, example_inputs, inner="aot_eager")
        with_fa4 = torch.compile(layer, backend=rewriting)
        got = with_fa4(x)
        t_eager = timed(layer, x)
        t_fa4 = timed(with_fa4, x)
        torch._dynamo.reset()
        plain = torch.compile(layer, backend="aot_eager")
        t_plain = timed(plain, x)
        # The attention alone: SDPA against fa4's op on the same tensors.
        q = torch.randn(batch, heads, seq, head_dim, device=dev, dtype=dt)
        k = torch.randn(batch, kv_heads, seq, head_dim, device=dev, dtype=dt)
        v = torch.randn_like(k)
        sdpa = lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=kv_heads != heads)
        op = lambda: torch.ops.fa4.attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal,
            -1, -1, 0.0, None, True)
        t_sdpa = timed(sdpa)
        t_op = timed(op)
        # The same calls replayed from CUDA graphs: the kernels without the
        # Python side of each call.
        graphs = {}
        for name, fn in (("sdpa", sdpa), ("fa4", op)):
            fn()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            graphs[name] = timed(graph.replay)
        o_ref = sdpa()
        o_fa4 = op()[0].transpose(1, 2)
    return {
        "config": dict(batch=batch, seq=seq, heads=heads, kv_heads=kv_heads,
                       head_dim=head_dim, causal=causal),
        # Call sites relative to the repository.
        "replaced": [[site.replace(ROOT + os.sep, ""), done, why]
                     for site, done, why in report],
        "layer_max_abs_diff_vs_compiled_sdpa": (got.float() - want.float()).abs().max().item(),
        "layer_max_abs_diff_vs_eager": (got.float() - eager.float()).abs().max().item(),
        "compiled_sdpa_vs_eager": (want.float() - eager.float()).abs().max().item(),
        "attention_max_abs_diff": (o_fa4.float() - o_ref.float()).abs().max().item(),
        "layer_ms": {"eager": t_eager, "compiled_sdpa": t_plain, "compiled_fa4": t_fa4},
        "attention_ms": {"sdpa": t_sdpa, "fa4": t_op},
        "attention_graph_ms": graphs,
        "attention_graph_speedup": graphs["sdpa"] / graphs["fa4"],
        "layer_speedup": t_plain / t_fa4,
        "attention_speedup": t_sdpa / t_op,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=150)
    args = ap.parse_args()
    results = []
    context = multiprocessing.get_context("spawn")
    for config in CONFIGS:
        queue = context.Queue()
        child = context.Process(target=run, args=(config, args.kernels, queue))
        child.start()
        child.join(args.timeout)
        if child.is_alive():
            child.kill()
            results.append({"config": config, "error": "timed out"})
        else:
            results.append(queue.get() if not queue.empty() else
                           {"config": config, "error": f"exit {child.exitcode}"})
        print(json.dumps(results[-1]), flush=True)
    import torch
    with open(args.out, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S"),
                   "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
