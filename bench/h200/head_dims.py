#!/usr/bin/env python3
"""Head dims on the H200: fa4's (192, 128) kernels (DeepSeek-V3's prefill
attention), head dim 256 (Gemma's) and head dim 32 against cuDNN and the other SDPA
backends that take them, TFLOP/s, and each output against a float32
reference; and K/V blocks other than the default (fa4c --block-n) beside
the default's kernel.

  scripts/hopper-kernels.sh is not needed: compile the kernels with
  python3 bench/h200/head_dims.py compile OUTDIR      (here, with fa4c;
      FA4_FLAGS="--grid=per-task" adds fa4c flags to every kernel)
  python3 bench/h200/head_dims.py run OUTDIR --out results.json  (on the GPU)

Each configuration runs in a child process with a timeout: a kernel that
hangs or faults is a failed case, not a lost session. FLOPs: 2 · batch ·
q_heads · seq_q · seq_k · (head_dim + v_head_dim), halved if causal.
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# (head dim, V head dim, q heads, kv heads, dtype, causal, block_n):
# DeepSeek-V3's shape at 16 heads a GPU, one narrower V at head dim 128,
# head dim 256 (80-key blocks by default; 64 and 96 beside), and hd128 with
# 128- and 176-key blocks (FlashAttention-3's non-causal hd128 tile), and
# head dim 32 beside hd64, each also with wider blocks. A block_n of 0 is
# the head dims' default.
KERNELS = [
    (192, 128, 16, 16, "bf16", False, 0),
    (192, 128, 16, 16, "bf16", True, 0),
    (128, 64, 16, 16, "bf16", False, 0),
    (256, 256, 16, 16, "bf16", False, 0),
    (256, 256, 16, 16, "bf16", True, 0),
    (256, 256, 16, 16, "bf16", False, 64),
    (256, 256, 16, 16, "bf16", False, 96),
    (256, 256, 16, 16, "bf16", True, 64),
    (256, 256, 16, 16, "bf16", False, 48),
    (128, 128, 16, 16, "bf16", False, 0),
    (128, 128, 16, 16, "bf16", False, 176),
    (128, 128, 16, 16, "bf16", True, 176),
    (32, 32, 16, 16, "bf16", False, 0),
    (32, 32, 16, 16, "bf16", True, 0),
    (32, 32, 16, 16, "bf16", False, 192),
    (32, 32, 16, 16, "bf16", True, 192),
    (32, 32, 16, 16, "bf16", False, 256),
    (64, 64, 16, 16, "bf16", False, 0),
    (64, 64, 16, 16, "bf16", True, 0),
    (64, 64, 16, 16, "bf16", False, 192),
]
# (batch, seq) per kernel: the bench shapes of bench.py.
SHAPES = [(16, 1024), (4, 4096), (1, 16384)]
TIMEOUT_S = 120


def name_of(d, dv, qh, kvh, dtype, causal, block_n=0):
    return (f"d{d}-v{dv}-{qh}x{kvh}-{dtype}-{'causal' if causal else 'none'}"
            + (f"-n{block_n}" if block_n else ""))


def compile_all(out):
    fa4c = os.path.join(os.environ.get("FA4_BUILD_DIR", os.path.join(ROOT, "build")),
                        "bin", "fa4c")
    os.makedirs(out, exist_ok=True)
    for d, dv, qh, kvh, dtype, causal, block_n in KERNELS:
        name = name_of(d, dv, qh, kvh, dtype, causal, block_n)
        flags = [fa4c, "--target=sm_90a", "--sm-count=132", f"--head-dim={d}",
                 f"--v-head-dim={dv}", f"--q-heads={qh}", f"--kv-heads={kvh}",
                 f"--dtype={dtype}", f"--block-n={block_n}", "--emit=cubin",
                 "-o", os.path.join(out, name + ".cubin")]
        if causal:
            flags.append("--mask=causal")
        # FA4_FLAGS: fa4c flags for every kernel (e.g. --grid=per-task), as
        # scripts/hopper-kernels.sh takes them.
        # A per-task grid takes no --sm-count (fa4c refuses the two).
        extra = os.environ.get("FA4_FLAGS", "").split()
        if "--grid=per-task" in extra:
            flags.remove("--sm-count=132")
        flags += extra
        subprocess.run(flags, check=True)
        print("compiled", name)


def run_one(kernels, spec):
    """One configuration in this (child) process: a JSON line on stdout."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sys.path.insert(0, HERE)
    from bench import host_time, timer
    from common import load_capi

    d, dv, qh, kvh, dtype, causal, block_n, batch, seq = spec
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, seq, qh, d, generator=g, device="cuda").to(torch_dtype)
    k = torch.randn(batch, seq, kvh, d, generator=g, device="cuda").to(torch_dtype)
    v = torch.randn(batch, seq, kvh, dv, generator=g, device="cuda").to(torch_dtype)
    # The first query head of the first batch in float32.
    scores = (q[0, :, 0].float() @ k[0, :, 0].float().T) / math.sqrt(d)
    if causal:
        seen = torch.ones(seq, seq, dtype=torch.bool, device="cuda").tril()
        scores.masked_fill_(~seen, -math.inf)
    want = torch.softmax(scores, dim=-1) @ v[0, :, 0].float()
    del scores
    flops = 2 * batch * qh * seq * seq * (d + dv) / (2 if causal else 1)
    try:
        import triton  # noqa: F401  (do_bench, when present)
    except Exception:
        triton = None
    measure = timer(triton)
    result = {"head_dim": d, "v_head_dim": dv, "q_heads": qh, "kv_heads": kvh,
              "dtype": dtype, "causal": causal, "block_n": block_n,
              "batch": batch, "seq": seq,
              "flops": flops, "implementations": {}}
    capi = load_capi()
    out = torch.full((batch, seq, qh, dv), math.nan, dtype=torch_dtype,
                     device="cuda")
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    backends = {"cuDNN": SDPBackend.CUDNN_ATTENTION,
                "FA2": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    # A non-default block's kernel is fa4's alone: the others ran beside the
    # default's.
    for impl in ("fa4",) + (() if block_n else tuple(backends)):
        record = {}
        try:
            if impl == "fa4":
                kernel = capi.load_kernel(
                    os.path.join(kernels, name_of(d, dv, qh, kvh, dtype, causal,
                                                  block_n) + ".cubin.json"),
                    library=os.path.join(kernels, "libfa4rt.so"))
                timed = kernel.bind(q, k, v, out)
                timed()
                got = out
            else:
                def timed(backend=backends[impl]):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(qt, kt, vt,
                                                              is_causal=causal)
                got = timed().transpose(1, 2)
            torch.cuda.synchronize()
            record["max_abs_error"] = (got[0, :, 0].float() - want).abs().max().item()
            median, low, high = measure(timed)
            record.update(ms=median, ms_p20=low, ms_p80=high,
                          tflops=flops / (median * 1e-3) / 1e12,
                          host_us=host_time(timed))
        except Exception as e:  # reported beside the others
            record["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        result["implementations"][impl] = record
    print(json.dumps(result), flush=True)


def run_all(kernels, out_path, only=None):
    import re
    import torch
    results = []
    started = time.time()
    for d, dv, qh, kvh, dtype, causal, block_n in KERNELS:
        if only and not re.search(only, name_of(d, dv, qh, kvh, dtype, causal,
                                                block_n)):
            continue
        for batch, seq in SHAPES:
            spec = [d, dv, qh, kvh, dtype, causal, block_n, batch, seq]
            try:
                child = subprocess.run(
                    [sys.executable, __file__, "one", kernels, json.dumps(spec)],
                    capture_output=True, text=True, timeout=TIMEOUT_S)
                lines = [line for line in child.stdout.splitlines()
                         if line.startswith("{")]
                result = (json.loads(lines[-1]) if lines else
                          {"spec": spec, "error": (child.stderr or "no output")[-500:]})
            except subprocess.TimeoutExpired:
                result = {"spec": spec, "error": f"timed out after {TIMEOUT_S} s"}
            results.append(result)
            impls = result.get("implementations", {})
            cells = "  ".join(
                f"{n} {r['tflops']:.0f} ({r['max_abs_error']:.1e})" if "tflops" in r
                else f"{n} err" for n, r in impls.items())
            print(f"({d}, {dv}){f' n{block_n}' if block_n else ''} "
                  f"{qh}/{kvh}h {dtype} {batch}x{seq} "
                  f"{'causal' if causal else 'full'}: {cells or result.get('error')}",
                  flush=True)
    errors = sorted({(n, r["error"]) for res in results
                     for n, r in res.get("implementations", {}).items() if "error" in r})
    for name, error in errors:
        print(f"  {name}: {error}")
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"),
                       "torch": torch.__version__,
                       "cudnn": torch.backends.cudnn.version(),
                       "flops": "2 * batch * q_heads * seq^2 * (head_dim + "
                                "v_head_dim), halved if causal",
                       "results": results}, f, indent=1)
    print(f"head_dims: {time.time() - started:.0f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("compile", "run", "one"))
    parser.add_argument("kernels")
    parser.add_argument("spec", nargs="?")
    parser.add_argument("--out")
    parser.add_argument("--only", help="run the kernels whose name matches "
                        "this regular expression")
    args = parser.parse_args()
    if args.mode == "compile":
        compile_all(args.kernels)
    elif args.mode == "run":
        run_all(args.kernels, args.out, args.only)
    else:
        run_one(args.kernels, json.loads(args.spec))


if __name__ == "__main__":
    main()
