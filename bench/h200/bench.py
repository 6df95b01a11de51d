#!/usr/bin/env python3
"""fa4 against cuDNN, FlashAttention-2 and Triton on the H200: forward only.

In one process, for each configuration of bench/h200/variants.py (bf16 hd128
and hd64, 16 heads, 16k tokens as batch x seq at seq 1k/4k/16k; the seed's
fp16 hd128 32/8 heads at seq 1024; causal and not) this times

  fa4     the precompiled kernel the configuration names, through
          libfa4rt.so (python/fa4/_capi.py; the launch's arguments described
          once, Kernel.bind);
  cuDNN   torch's SDPA restricted to SDPBackend.CUDNN_ATTENTION;
  FA2     torch's SDPA restricted to SDPBackend.FLASH_ATTENTION;
  Triton  bench/h200/triton_attention.py, autotuned among its CONFIGS;
  FA4     FlashAttention-4's own Hopper path (PyPI flash-attn-4, CuTe DSL,
          flash_attn/cute/flash_fwd_sm90.py) through its
          interface._flash_attn_fwd into a preallocated O, when the package
          imports (load_flash_attn_4 says how it is found; its kernels are
          compiled at their first call, before the timing);

on the same q, k, v ([batch, seq, heads, head_dim] storage; SDPA sees its
[batch, heads, seq, head_dim] transpose, no copy), each with
triton.testing.do_bench (median of the repetitions, L2 flushed between
them; CUDA events without Triton). TFLOP/s count 4 * batch * q_heads *
seq_q * seq_k * head_dim FLOPs, half of that for causal. Each is timed a
second time replayed from a CUDA graph (do_bench_cudagraph: no host time,
no L2 flush; a second table), and its host time per call measured over 50
calls queued back to back (host_us; the first table shows fa4's): a kernel
shorter than its host time is host-bound in an eager loop. Each rate is
also given as a fraction of the H200's dense bf16/fp16 tensor-core peak
(PEAK_TFLOPS, 989 TFLOP/s). Before timing, every implementation's output is compared
with a float32 reference on the first batch's first two heads; a mismatch
is marked "!" beside the time. GQA goes through SDPA's enable_gqa; a
backend that refuses it is timed on k and v repeated per group (said in
the results).

  python3 bench/h200/bench.py dist-h200 --out bench.json

A configuration an implementation cannot run is reported with its error,
and the rest go on.
"""

import argparse
import contextlib
import datetime
import functools
import json
import math
import os
import re
import sys
import time

import torch

from common import device_info, load_capi
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import variants  # noqa: E402

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}
IMPLEMENTATIONS = ("fa4", "cuDNN", "FA2", "Triton", "FA4")
# The H200's dense bf16/fp16 tensor-core peak (NVIDIA's datasheet, SXM).
PEAK_TFLOPS = 989.0


def load_flash_attn_4():
    """(FlashAttention-4's interface module, its version), or (None, why).
    The CuTe DSL's Python packages live in nvidia_cutlass_dsl/dsl_packages,
    which its wheels do not put on the path: added here."""
    # This directory's profile.py would stand in for the standard library's
    # (cProfile imports it) while the package loads.
    hidden = [p for p in sys.path if os.path.abspath(p or ".") == HERE]
    sys.path[:] = [p for p in sys.path if p not in hidden]
    try:
        try:
            import cutlass  # noqa: F401
        except ImportError:
            import nvidia_cutlass_dsl  # a namespace package
            for base in nvidia_cutlass_dsl.__path__:
                packages = os.path.join(base, "dsl_packages")
                if os.path.isdir(packages):
                    sys.path.insert(0, packages)
                    break
        from flash_attn.cute import interface
        from importlib.metadata import version
        try:
            found = version("flash-attn-4")
        except Exception:  # installed without its metadata
            found = None
        return interface, found
    except Exception as e:
        return None, f"{type(e).__name__}: {e}".splitlines()[0][:300]
    finally:
        sys.path[:0] = hidden


def load_triton():
    """(triton, the Triton attention module), or (None, why)."""
    try:
        import triton
        import triton_attention
        return triton, triton_attention
    except Exception as e:  # ImportError, or a Triton without this GPU's backend
        return None, f"{type(e).__name__}: {e}"


def flops(c):
    count = 4 * c["batch"] * c["q_heads"] * c["seq"] * c["seq"] * c["head_dim"]
    return count / 2 if c["causal"] else count


def make_inputs(c):
    """q, k, v of configuration `c` ([batch, seq, heads, head_dim], normal,
    seed 0), on the GPU."""
    dtype = TORCH_DTYPES[c["dtype"]]
    generator = torch.Generator(device="cuda").manual_seed(0)

    def randn(heads):
        return torch.randn(c["batch"], c["seq"], heads, c["head_dim"],
                           generator=generator, device="cuda").to(dtype)
    return randn(c["q_heads"]), randn(c["kv_heads"]), randn(c["kv_heads"])


def reference_slice(q, k, v, causal, heads=2):
    """O of the first batch's first `heads` query heads in float32 (one head
    at a time: at seq 16k a head's scores take 1 GiB)."""
    group = q.shape[2] // k.shape[2]
    seq = q.shape[1]
    out = []
    for h in range(min(heads, q.shape[2])):
        qh = q[0, :, h].float()
        kh, vh = k[0, :, h // group].float(), v[0, :, h // group].float()
        scores = (qh @ kh.T) / math.sqrt(q.shape[-1])
        if causal:
            seen = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
            scores.masked_fill_(~seen, -math.inf)
        out.append(torch.softmax(scores, dim=-1) @ vh)
        del scores
    return torch.stack(out, dim=1)  # seq, heads, head_dim


def timer(triton):
    """(fn -> (median, p20, p80) ms): Triton's do_bench, else CUDA events
    around each of 100 calls after 25 of warm-up, L2 flushed before each."""
    if triton is not None:
        from triton.testing import do_bench

        def measure(fn):
            return tuple(do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8]))
        return measure

    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")

    def measure(fn):
        for _ in range(25):
            fn()
        times = []
        for _ in range(100):
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        return times[50], times[20], times[80]
    return measure


def graph_timer(triton):
    """(fn -> (median, p20, p80) ms) of `fn` replayed from a CUDA graph
    (triton.testing.do_bench_cudagraph): no host time at all, no L2 flush;
    None without Triton."""
    if triton is None:
        return None
    from triton.testing import do_bench_cudagraph

    def measure(fn):
        return tuple(do_bench_cudagraph(fn, rep=20, quantiles=[0.5, 0.2, 0.8]))
    return measure


def host_time(fn, calls=50):
    """Microseconds of host time per call, launches queued back to back:
    what a caller pays before the GPU sees the work (the timed medians hide
    it behind do_bench's cache flush; a kernel shorter than this is
    host-bound in a real loop)."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - started
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def sdpa(backend, q, k, v, causal, out):
    """(check, timed, note) for SDPA on `backend`. `timed` calls SDPA on the
    [batch, heads, seq, head_dim] views of q, k, v and must run inside
    sdpa_kernel(backend) (entered once around the timing: per call it would
    be host time); `check` enters it and copies the result into `out`. GQA
    goes through enable_gqa, else (if the backend refuses it) k and v are
    repeated per group, once, here."""
    from torch.nn.attention import sdpa_kernel
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    extra, note = {}, None
    if q.shape[2] != k.shape[2]:
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                               enable_gqa=True)
            extra, note = {"enable_gqa": True}, "enable_gqa"
        except RuntimeError:
            group = q.shape[2] // k.shape[2]
            kt, vt = (t.repeat_interleave(group, dim=1) for t in (kt, vt))
            note = "k and v repeated per group (enable_gqa refused)"

    def timed():
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, **extra)

    def check():
        with sdpa_kernel(backend):
            out.copy_(timed().transpose(1, 2))
    return check, timed, note


def versions(triton, flash_attn_4=None):
    info = device_info(torch.device("cuda", 0))
    info.update(cudnn=torch.backends.cudnn.version(),
                triton=getattr(triton, "__version__", None),
                flash_attn_4=flash_attn_4)
    return info


def describe(c):
    return (f"{c['dtype']} hd{c['head_dim']} {c['q_heads']}/{c['kv_heads']}h "
            f"{c['batch']}x{c['seq']} {'causal' if c['causal'] else 'full'}")


def main():
    parser = argparse.ArgumentParser(
        description="fa4 vs cuDNN, FA2 and Triton: attention forward TFLOP/s")
    parser.add_argument("kernels", help="directory of the precompiled kernels")
    parser.add_argument("--lib", help="libfa4rt.so (default: KERNELS/libfa4rt.so, "
                                      "else $FA4RT_LIBRARY)")
    parser.add_argument("--out", help="write the results here as JSON")
    parser.add_argument("--only", help="only configurations whose description "
                                       "(as printed) matches this regex")
    parser.add_argument("--no-graph", action="store_true",
                        help="skip the CUDA-graph timings")
    parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS),
                        help="comma-separated subset of " + ", ".join(IMPLEMENTATIONS)
                        + " to time (default: all)")
    args = parser.parse_args()
    chosen = {n.strip() for n in args.implementations.split(",") if n.strip()}
    implementations = [n for n in IMPLEMENTATIONS if n in chosen]
    if chosen - set(IMPLEMENTATIONS) or not implementations:
        parser.error(f"--implementations takes a comma-separated subset of "
                     f"{', '.join(IMPLEMENTATIONS)}; got {args.implementations!r}")

    capi = load_capi()
    triton, triton_attention = load_triton()
    triton_missing = triton_attention if triton is None else None
    flash_attn_4, flash_attn_4_version = (load_flash_attn_4() if "FA4" in implementations
                                          else (None, "not asked for"))
    flash_attn_4_missing = flash_attn_4_version if flash_attn_4 is None else None
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.backends.cuda.matmul.allow_tf32 = False
    library = args.lib
    if library is None and os.path.exists(os.path.join(args.kernels, "libfa4rt.so")):
        library = os.path.join(args.kernels, "libfa4rt.so")
    index = {}
    if os.path.exists(os.path.join(args.kernels, "index.json")):
        with open(os.path.join(args.kernels, "index.json")) as f:
            index = json.load(f)
    measure = timer(triton)
    measure_graph = None if args.no_graph else graph_timer(triton)
    info = versions(triton, flash_attn_4_version if flash_attn_4 else None)
    print(f"fa4 bench on {info['gpu']} (driver {info['driver']}, torch {info['torch']}, "
          f"cuDNN {info['cudnn']}, Triton {info['triton']}, flash-attn-4 "
          f"{info['flash_attn_4'] or 'absent: ' + str(flash_attn_4_missing)}); kernels "
          f"{index.get('target')} at {index.get('commit')}")
    header = (f"{'configuration':<36}" + "".join(f"{name:>9}" for name in implementations)
              + f"{'fa4/cuDNN':>11}{'fa4/FA4':>9}{'fa4 peak':>10}{'fa4 host':>10}"
              + "   (TFLOP/s; fa4's fraction of the peak and host us per launch)")
    print(header)
    print("-" * len(header))

    results = []
    lost_context = False
    for c in variants.bench_configs():
        if args.only and not re.search(args.only, describe(c)):
            continue
        q, k, v = make_inputs(c)
        want = reference_slice(q, k, v, c["causal"])
        entry = dict(c, flops=flops(c), implementations={})
        for name in implementations:
            out = torch.full_like(q, math.nan)
            record = {}
            first_call = time.time()
            try:
                timing = contextlib.nullcontext
                if name == "fa4":
                    kernel = capi.load_kernel(
                        os.path.join(args.kernels, c["kernel"] + ".cubin.json"),
                        library=library)
                    check = timed = kernel.bind(q, k, v, out)
                elif name in ("cuDNN", "FA2"):
                    backend = (SDPBackend.CUDNN_ATTENTION if name == "cuDNN"
                               else SDPBackend.FLASH_ATTENTION)
                    check, timed, note = sdpa(backend, q, k, v, c["causal"], out)
                    timing = functools.partial(sdpa_kernel, backend)
                    if note:
                        record["note"] = note
                elif name == "FA4":
                    if flash_attn_4 is None:
                        raise RuntimeError(f"flash-attn-4 unavailable: {flash_attn_4_missing}")

                    def check():
                        flash_attn_4._flash_attn_fwd(q, k, v, causal=c["causal"], out=out)
                    timed = check
                else:
                    if triton is None:
                        raise RuntimeError(f"Triton unavailable: {triton_missing}")

                    def check():
                        triton_attention.attention(q, k, v, c["causal"], out=out)
                check()
                torch.cuda.synchronize()
                error = (out[0, :, :want.shape[1]].float() - want).abs().max().item()
                record["max_abs_error"] = error
                if name == "FA4":  # its compile time is the first call's
                    record["first_call_s"] = round(time.time() - first_call, 1)
                if not error <= TOLERANCE[c["dtype"]]:
                    record["mismatch"] = True
                if name == "Triton":
                    # Timed with the configuration the autotuner chose, not
                    # through the autotuner (host time per call).
                    best = triton_attention._attention_tuned.best_config
                    record["config"] = str(best)
                    timed = functools.partial(triton_attention.attention, q, k, v,
                                              c["causal"], out=out, config=best)
                with timing():
                    median, low, high = measure(timed)
                    tflops = entry["flops"] / (median * 1e-3) / 1e12
                    record.update(ms=median, ms_p20=low, ms_p80=high, tflops=tflops,
                                  fraction_of_peak=tflops / PEAK_TFLOPS,
                                  host_us=host_time(timed))
                    if measure_graph is not None:
                        try:
                            median, low, high = measure_graph(timed)
                            record.update(ms_graph=median, ms_graph_p20=low,
                                          ms_graph_p80=high,
                                          tflops_graph=entry["flops"] / (median * 1e-3) / 1e12)
                        except Exception as e:  # a launch that cannot be captured
                            record["graph_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            except Exception as e:  # reported beside the others' times
                record["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                try:
                    torch.cuda.synchronize()
                except RuntimeError:  # a kernel faulted: the context is gone
                    lost_context = True
            entry["implementations"][name] = record
            if lost_context:
                break
        impls = entry["implementations"]
        if "tflops" in impls.get("fa4", {}) and "tflops" in impls.get("cuDNN", {}):
            entry["fa4_over_cudnn"] = impls["fa4"]["tflops"] / impls["cuDNN"]["tflops"]
        if "tflops" in impls.get("fa4", {}) and "tflops" in impls.get("FA4", {}):
            entry["fa4_over_FA4"] = impls["fa4"]["tflops"] / impls["FA4"]["tflops"]
        results.append(entry)

        def cell(record):
            if "tflops" not in record:
                return f"{'err':>9}"
            return f"{record['tflops']:>8.0f}{'!' if record.get('mismatch') else ' '}"

        ratio = entry.get("fa4_over_cudnn")
        peer = entry.get("fa4_over_FA4")
        print(f"{describe(c):<36}" + "".join(cell(impls.get(n, {})) for n in implementations)
              + (f"{ratio:>11.2f}" if ratio else f"{'-':>11}")
              + (f"{peer:>9.2f}" if peer else f"{'-':>9}")
              + (f"{impls['fa4']['fraction_of_peak']:>10.0%}"
                 if "fraction_of_peak" in impls.get("fa4", {}) else f"{'-':>10}")
              + (f"{impls['fa4']['host_us']:>10.0f}" if "host_us" in impls.get("fa4", {})
                 else f"{'-':>10}"), flush=True)
        del q, k, v, want
        if lost_context:
            print("fa4 bench: stopped, the CUDA context is lost after a failed launch")
            break

    if measure_graph is not None and results:
        print("\nreplayed from CUDA graphs (TFLOP/s):")
        print(f"{'configuration':<36}" + "".join(f"{n:>9}" for n in implementations))
        for r in results:
            print(f"{describe(r):<36}" + "".join(
                f"{r['implementations'].get(n, {}).get('tflops_graph', math.nan):>9.0f}"
                for n in implementations))
    errors = sorted({(n, record["error"]) for r in results
                     for n, record in r["implementations"].items() if "error" in record})
    for name, error in errors:
        print(f"  {name}: {error}")
    if any(record.get("mismatch") for r in results
           for record in r["implementations"].values()):
        print("  !: the output differs from the float32 reference beyond "
              f"{TOLERANCE} (max_abs_error in the JSON)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"),
                "versions": info,
                "kernels": {k: index.get(k) for k in ("target", "sm_count", "compiled",
                                                      "commit")},
                "timing": ("ms: triton.testing.do_bench, median of the repetitions; "
                           "ms_graph: triton.testing.do_bench_cudagraph, median"
                           if triton is not None else "ms: CUDA events, median of 100"),
                "flops": "4 * batch * q_heads * seq_q * seq_k * head_dim, halved if causal",
                "stopped_early": lost_context,
                "results": results,
            }, f, indent=1)
    return 1 if lost_context else 0


if __name__ == "__main__":
    started = time.time()
    status = main()
    print(f"fa4 bench: {time.time() - started:.0f} s")
    sys.exit(status)
