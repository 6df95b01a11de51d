#!/usr/bin/env python3
"""FP8 (e4m3) attention on the H200: fa4's sm_90a FP8 kernels checked
against a float64 reference and timed beside fa4's own bf16 kernels.

  python3 bench/h200/fp8.py compile OUTDIR          (here, with fa4c)
  python3 bench/h200/fp8.py run OUTDIR --out results.json   (on the GPU)
  python3 bench/h200/fp8.py run OUTDIR --only check   (the matrix alone)
  python3 bench/h200/fp8.py run OUTDIR --head-dims 64  (one head dim's cases)
  python3 bench/h200/fp8.py compile OUTDIR --block-n 224  (FP8 blocks of 224)
  FA4_FLAGS="--grid=per-task" python3 bench/h200/fp8.py compile OUTDIR  (fa4c flags
      for every kernel)
  python3 bench/h200/fp8.py ab a=DIR_A b=DIR_B [--rounds 3] --out F.json
      (builds' FP8 kernels timed alternately, the speed shapes)

The inputs: Q, K and V drawn in float32 (standard normal), quantized per
(batch, K/V head) as FlashAttention-3's interface takes them: the descale
is the slice's largest magnitude over 448 (e4m3's largest finite), the
e4m3 tensor the slice divided by it. The kernel's V is the transposed,
key-permuted copy the runtime describes (docs/FP8.md; python/fa4/_fp8.py),
made on the GPU before the launch.

Correctness: O and the LSE against the float64 attention of the descaled
e4m3 inputs (what the kernel is asked to compute), by FlashAttention's rule
with FP8's yardstick: O's largest error at most twice that of
FlashAttention-3's unshifted FP8 attention (the unnormalized P rounded to
e4m3, the division at the end, in float32) plus 2e-2 (O's bf16 rounding,
8e-3 at |O| near 4, which the float32 yardstick does not have), and the
LSE's largest error at most twice the yardstick's plus 2e-3: the H200's
FP8 wgmma keeps fewer bits in its sums than float32 (docs/Emulator.md,
"FP8 accumulation"), which moves the scores and so the LSE by up to about
1e-3 nats at these shapes (run 44; the same kernel in fa4-emu, whose sums
are exact, is within 1e-6). A row that sees no key must be O = 0,
LSE = -inf.

Speed: TFLOP/s (2 · batch · q_heads · seq² · (head_dim + v_head_dim),
halved if causal)
of the FP8 kernel with V already in its layout, of the same with the layout
made in the timed region, and of fa4's bf16 kernel of the same variant.

Each case runs in a child process with a timeout: a kernel that hangs or
faults is a failed case, not a lost session.
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

# The correctness matrix: (head dim, q heads, kv heads, mask, softcap, lse),
# head dims 128, 96, 64 and 256 and (192, 128) (the FP8 schedule's; a head dim
# written (d, dv) gives V its own), every mask, GQA 1, 3, 4 and 8.
CHECK_KERNELS = [
    (128, 16, 16, "none", 0.0, True),
    (128, 16, 16, "causal", 0.0, True),
    (128, 12, 4, "causal", 0.0, True),
    (128, 32, 4, "none", 0.0, False),
    (128, 8, 2, "window", 0.0, True),
    (128, 16, 16, "none", 30.0, True),
    (128, 6, 2, "causal", 20.0, False),
    (64, 16, 16, "none", 0.0, True),
    (64, 12, 4, "causal", 0.0, True),
    (64, 8, 2, "window", 0.0, True),
    (64, 6, 2, "causal", 20.0, False),
    (96, 16, 16, "none", 0.0, True),
    (96, 12, 4, "causal", 0.0, True),
    (96, 8, 2, "window", 0.0, True),
    (96, 6, 2, "causal", 20.0, False),
    ((192, 128), 16, 16, "none", 0.0, True),
    ((192, 128), 12, 4, "causal", 0.0, True),
    ((192, 128), 8, 2, "window", 0.0, True),
    ((192, 128), 6, 2, "causal", 20.0, False),
    (256, 16, 16, "none", 0.0, True),
    (256, 12, 4, "causal", 0.0, True),
    (256, 8, 2, "window", 0.0, True),
    (256, 6, 2, "causal", 20.0, False),
]
# (batch, seq_q, seq_k): a single query, odd lengths both ways, batch > 1,
# seq_q > seq_k under a causal mask (rows that see no key), and grids whose
# CTAs run several tasks.
CHECK_SHAPES = [(1, 1, 1), (1, 1, 333), (2, 77, 200), (1, 333, 129),
                (3, 1000, 1000), (2, 2048, 4096)]
WINDOW = (256, 0)
# Speed: (head dim, q heads, kv heads, mask): 16 heads, the shapes of
# bench.py, both masks.
SPEED_KERNELS = [(128, 16, 16, "none"), (128, 16, 16, "causal"),
                 (96, 16, 16, "none"), (96, 16, 16, "causal"),
                 (64, 16, 16, "none"), (64, 16, 16, "causal"),
                 ((192, 128), 16, 16, "none"), ((192, 128), 16, 16, "causal"),
                 (256, 16, 16, "none"), (256, 16, 16, "causal")]
SPEED_SHAPES = [(16, 1024), (4, 4096), (2, 8192), (1, 16384)]
TIMEOUT_S = 180  # the emulator's cases take up to a minute


def dims(hd):
    """(Q and K's head dim, V's) of a list entry's head dim."""
    return tuple(hd) if isinstance(hd, (tuple, list)) else (hd, hd)


def name_of(dtype, hd, qh, kvh, mask, softcap=0.0, lse=False):
    d, dv = dims(hd)
    name = f"d{d}" + (f"v{dv}" if dv != d else "") + f"-{dtype}-{qh}x{kvh}-{mask}"
    if softcap:
        name += f"-cap{softcap:g}"
    return name + ("-lse" if lse else "")


def compile_all(out, head_dims=None, block_n=0):
    fa4c = os.path.join(os.environ.get("FA4_BUILD_DIR", os.path.join(ROOT, "build")),
                        "bin", "fa4c")
    os.makedirs(out, exist_ok=True)
    wanted = [("e4m3",) + k for k in CHECK_KERNELS]
    wanted += [(dtype, hd, qh, kvh, mask, 0.0, False)
               for dtype in ("e4m3", "bf16") for hd, qh, kvh, mask in SPEED_KERNELS]
    for dtype, hd, qh, kvh, mask, softcap, lse in wanted:
        if head_dims and dims(hd)[0] not in head_dims:
            continue
        name = name_of(dtype, hd, qh, kvh, mask, softcap, lse)
        flags = [fa4c, "--target=sm_90a", "--sm-count=132",
                 f"--head-dim={dims(hd)[0]}", f"--v-head-dim={dims(hd)[1]}",
                 f"--q-heads={qh}", f"--kv-heads={kvh}", f"--dtype={dtype}",
                 f"--mask={mask}", "--emit=cubin",
                 "-o", os.path.join(out, name + ".cubin")]
        if mask == "window":
            flags += [f"--window-left={WINDOW[0]}", f"--window-right={WINDOW[1]}"]
        if softcap:
            flags.append(f"--softcap={softcap}")
        if lse:
            flags.append("--lse")
        # The FP8 kernels' block (0: fa4's default); the bf16 ones keep
        # theirs.
        if block_n and dtype == "e4m3":
            flags.append(f"--block-n={block_n}")
        # FA4_FLAGS: fa4c flags for every kernel (e.g. --grid=per-task), as
        # scripts/hopper-kernels.sh takes them.
        # A per-task grid takes no --sm-count (fa4c refuses the two).
        extra = os.environ.get("FA4_FLAGS", "").split()
        if "--grid=per-task" in extra:
            flags.remove("--sm-count=132")
        flags += extra
        subprocess.run(flags, check=True)
        print("compiled", name, flush=True)


def quantize(x, heads_per_kv):
    """x [batch, seq, heads, dim] float32 -> (e4m3 tensor, [batch, kv_heads]
    f32 descales), one scale per batch and K/V head's group."""
    import torch
    b, s, h, d = x.shape
    grouped = x.view(b, s, h // heads_per_kv, heads_per_kv, d)
    amax = grouped.abs().amax(dim=(1, 3, 4)).clamp_min(1e-12)
    descale = (amax / 448.0).float().contiguous()
    scaled = grouped / descale[:, None, :, None, None]
    return (scaled.view(b, s, h, d).to(torch.float8_e4m3fn), descale)


def masked_scores(q, k, scale, mask, softcap, seq_q, seq_k, heads_per_kv):
    """Scaled (and capped) scores [batch, q_heads, seq_q, seq_k] with the
    mask's hidden keys at -inf (bottom-right aligned), in q's dtype."""
    import torch
    kk = k.repeat_interleave(heads_per_kv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(seq_q, device=q.device)[:, None] + (seq_k - seq_q)
    j = torch.arange(seq_k, device=q.device)[None, :]
    if mask == "causal":
        s = s.masked_fill(j > i, -math.inf)
    elif mask == "window":
        s = s.masked_fill((j < i - WINDOW[0]) | (j > i + WINDOW[1]), -math.inf)
    return s


def run_check(kernels, spec):
    import torch
    sys.path.insert(0, HERE)
    from common import load_capi, load_package_file
    fp8_value_layout = load_package_file("_fp8").prepare_fp8_value

    hd, qh, kvh, mask, softcap, lse_wanted, batch, seq_q, seq_k, device = spec
    d, dv = dims(hd)
    ratio = qh // kvh
    g = torch.Generator(device=device).manual_seed(seq_q * 7919 + seq_k)
    q = torch.randn(batch, seq_q, qh, d, generator=g, device=device)
    k = torch.randn(batch, seq_k, kvh, d, generator=g, device=device)
    v = torch.randn(batch, seq_k, kvh, dv, generator=g, device=device)
    q8, qd = quantize(q, ratio)
    k8, kd = quantize(k, 1)
    v8, vd = quantize(v, 1)
    scale = 1.0 / math.sqrt(d)
    # float64 attention of the descaled inputs.
    qf = q8.double() * qd.double().repeat_interleave(ratio, 1)[:, None, :, None]
    kf = k8.double() * kd.double()[:, None, :, None]
    vf = v8.double() * vd.double()[:, None, :, None]
    s = masked_scores(qf, kf, scale, mask, softcap, seq_q, seq_k, ratio)
    lse_ref = torch.logsumexp(s, dim=-1)  # [b, h, q]
    p = torch.exp(s - lse_ref[..., None]).nan_to_num(0.0)
    o_ref = torch.einsum("bhqk,bkhd->bqhd", p,
                         vf.repeat_interleave(ratio, dim=2))
    # FlashAttention-3's unshifted FP8 attention, float32: the yardstick.
    s32 = masked_scores(q8.float() * qd.repeat_interleave(ratio, 1)[:, None, :, None],
                        k8.float() * kd[:, None, :, None], scale, mask, softcap,
                        seq_q, seq_k, ratio)
    m = s32.amax(dim=-1, keepdim=True)
    e = torch.exp(s32 - m).nan_to_num(0.0)
    lse_low = (m.squeeze(-1) + torch.log(e.sum(dim=-1))).double()
    rounded = e.to(torch.float8_e4m3fn).float()
    o_low = torch.einsum("bhqk,bkhd->bqhd", rounded,
                         v8.float().repeat_interleave(ratio, dim=2))
    o_low = o_low * vd.repeat_interleave(ratio, 1)[:, None, :, None] / \
        e.sum(dim=-1).transpose(1, 2)[..., None]
    o_low = o_low.nan_to_num(0.0)
    empty = torch.isinf(lse_ref) & (lse_ref < 0)  # rows that see no key
    capi = load_capi()
    kernel = capi.load_kernel(
        os.path.join(kernels, name_of("e4m3", hd, qh, kvh, mask, softcap,
                                      lse_wanted) + ".cubin.json"),
        library=os.path.join(kernels, "libfa4rt.so"))
    out = torch.full((batch, seq_q, qh, dv), math.nan, dtype=torch.bfloat16,
                     device=device)
    lse = (torch.full((batch, qh, seq_q), math.nan, device=device)
           if lse_wanted else None)
    kernel(q8, k8, fp8_value_layout(v8), out, lse, extras=(qd, kd, vd))
    if device == "cuda":
        torch.cuda.synchronize()
    err = (out.double() - o_ref).abs()
    err_low = (o_low.double() - o_ref).abs()
    result = {"max_abs_err": err.max().item(),
              "rms_err": err.pow(2).mean().sqrt().item(),
              "ref_lowp_max_abs_err": err_low.max().item(),
              "ref_lowp_rms_err": err_low.pow(2).mean().sqrt().item()}
    empty_rows = empty.transpose(1, 2)  # [b, q, h]
    result["empty_rows"] = int(empty_rows.sum().item())
    result["empty_rows_ok"] = bool((out[empty_rows] == 0).all().item())
    ok = (result["max_abs_err"] <= 2 * result["ref_lowp_max_abs_err"] + 2e-2
          and result["empty_rows_ok"])
    if lse is not None:
        finite = ~empty
        lse_err = (lse.double() - lse_ref)[finite].abs()
        lse_err_low = (lse_low - lse_ref)[finite].abs()
        result["lse_max_abs_err"] = lse_err.max().item() if lse_err.numel() else 0.0
        result["ref_lowp_lse_max_abs_err"] = (lse_err_low.max().item()
                                              if lse_err_low.numel() else 0.0)
        lse_empty_ok = bool(torch.isneginf(lse[empty]).all().item())
        ok = (ok and lse_empty_ok and result["lse_max_abs_err"]
              <= 2 * result["ref_lowp_lse_max_abs_err"] + 2e-3)
    result["ok"] = bool(ok)
    return result


def speed_setup(hd, qh, kvh, mask, batch, seq):
    """The speed cases' inputs (drawn from seed 0, quantized per K/V head,
    V also in its layout), their FLOPs, the timer and the C API."""
    import torch
    sys.path.insert(0, HERE)
    from bench import timer
    from common import load_capi, load_package_file
    fp8_value_layout = load_package_file("_fp8").prepare_fp8_value
    d, dv = dims(hd)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, seq, qh, d, generator=g, device="cuda")
    k = torch.randn(batch, seq, kvh, d, generator=g, device="cuda")
    v = torch.randn(batch, seq, kvh, dv, generator=g, device="cuda")
    flops = 2 * batch * qh * seq * seq * (d + dv) / (2 if mask == "causal" else 1)
    try:
        import triton  # noqa: F401  (do_bench, when present)
    except Exception:
        triton = None
    q8, qd = quantize(q, qh // kvh)
    k8, kd = quantize(k, 1)
    v8, vd = quantize(v, 1)
    return dict(q=q, k=k, v=v, q8=q8, k8=k8, v8=v8, descales=(qd, kd, vd),
                vt=fp8_value_layout(v8), layout=fp8_value_layout, flops=flops,
                measure=timer(triton), capi=load_capi(), dv=dv)


def run_speed(kernels, spec):
    import torch
    hd, qh, kvh, mask, batch, seq = spec
    x = speed_setup(hd, qh, kvh, mask, batch, seq)
    q, k, v, q8, k8, v8, vt = (x[n] for n in ("q", "k", "v", "q8", "k8", "v8", "vt"))
    qd, kd, vd = x["descales"]
    fp8_value_layout, flops, measure, capi = x["layout"], x["flops"], x["measure"], x["capi"]
    library = os.path.join(kernels, "libfa4rt.so")
    result = {"flops": flops, "implementations": {}}
    out = torch.empty(batch, seq, qh, x["dv"], dtype=torch.bfloat16, device="cuda")
    fp8 = capi.load_kernel(os.path.join(kernels, name_of("e4m3", hd, qh, kvh, mask)
                                        + ".cubin.json"), library=library)
    bf16 = capi.load_kernel(os.path.join(kernels, name_of("bf16", hd, qh, kvh, mask)
                                         + ".cubin.json"), library=library)
    qb, kb, vb = (t.to(torch.bfloat16) for t in (q, k, v))
    bound = fp8.bind(q8, k8, vt, out, None, extras=(qd, kd, vd))

    def with_layout():
        fp8(q8, k8, fp8_value_layout(v8), out, None, extras=(qd, kd, vd))
    cases = {"fa4-fp8": bound, "fa4-fp8+layout": with_layout,
             "fa4-bf16": bf16.bind(qb, kb, vb, torch.empty_like(out))}
    for impl, timed in cases.items():
        record = {}
        try:
            timed()
            torch.cuda.synchronize()
            median, low, high = measure(timed)
            record.update(ms=median, ms_p20=low, ms_p80=high,
                          tflops=flops / (median * 1e-3) / 1e12)
        except Exception as e:  # reported beside the others
            record["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        result["implementations"][impl] = record
    return result


def run_ab(builds, spec):
    """Times the FP8 kernel of every build alternately on the same inputs
    (V in its layout), `rounds` rounds, the builds' order turned every
    round; each build's O against the first build's (the largest
    difference: a build that computes something else shows here, the check
    matrix judges each build against float64)."""
    import torch
    hd, qh, kvh, mask, batch, seq, rounds = spec
    x = speed_setup(hd, qh, kvh, mask, batch, seq)
    q8, k8, vt, flops, measure = x["q8"], x["k8"], x["vt"], x["flops"], x["measure"]
    qd, kd, vd = x["descales"]
    dv = x["dv"]
    timed, outs = {}, {}
    for label, directory in builds:
        kernel = x["capi"].load_kernel(
            os.path.join(directory, name_of("e4m3", hd, qh, kvh, mask) + ".cubin.json"),
            library=os.path.join(directory, "libfa4rt.so"))
        out = torch.full((batch, seq, qh, dv), math.nan, dtype=torch.bfloat16,
                         device="cuda")
        timed[label] = kernel.bind(q8, k8, vt, out, None, extras=(qd, kd, vd))
        timed[label]()
        outs[label] = out
    torch.cuda.synchronize()
    first = builds[0][0]
    diffs = {label: float((o.float() - outs[first].float()).abs().max())
             for label, o in outs.items()}
    labels = list(timed)
    times = {label: [] for label in labels}
    for r in range(rounds):
        for label in (labels if r % 2 == 0 else labels[::-1]):
            times[label].append(measure(timed[label])[0])
    return {"flops": flops, "diff_to_first": diffs, "ms": times,
            "ok": all(math.isfinite(d) and d <= 0.1 for d in diffs.values()),
            "tflops": {label: flops / (sorted(t)[len(t) // 2] * 1e-3) / 1e12
                       for label, t in times.items()}}


def ab_all(builds, out_path, rounds, head_dims=None):
    import torch
    results, failed = [], 0
    for hd, qh, kvh, mask in SPEED_KERNELS:
        if head_dims and dims(hd)[0] not in head_dims:
            continue
        for batch, seq in SPEED_SHAPES:
            spec = [hd, qh, kvh, mask, batch, seq, rounds]
            result = child("ab", json.dumps(builds), spec)
            result["spec"] = spec
            results.append(result)
            failed += not result.get("ok")
            rates = result.get("tflops", {})
            base = rates.get(builds[0][0])
            cells = "  ".join(f"{label} {rate:.0f}" + (f" ({rate / base:.3f})" if base else "")
                              for label, rate in rates.items())
            print(f"ab hd{dims(hd)} {qh}/{kvh}h {mask} {batch}x{seq}: "
                  f"{cells or result.get('error')}"
                  + ("" if result.get("ok") else f"  diffs {result.get('diff_to_first')}"),
                  flush=True)
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"),
                       "torch": torch.__version__,
                       "device": torch.cuda.get_device_name(),
                       "builds": dict(builds), "rounds": rounds,
                       "results": results}, f, indent=1)
    return failed == 0


def child(kind, kernels, spec):
    """Runs one case in a child process; its JSON, or the failure."""
    try:
        done = subprocess.run(
            [sys.executable, __file__, "one", kernels, json.dumps([kind, spec])],
            capture_output=True, text=True, timeout=TIMEOUT_S)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if lines:
            return json.loads(lines[-1])
        return {"ok": False, "error": (done.stderr or "no output")[-600:]}
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {TIMEOUT_S} s"}


def run_all(kernels, out_path, only, device, head_dims=None):
    import torch
    started = time.time()
    checks, speeds = [], []
    # In the emulator (--device cpu): the small shapes, no timings.
    shapes = [s for s in CHECK_SHAPES if device == "cuda" or s[1] * s[2] <= 333 * 333]
    if device != "cuda":
        only = "check"
    if only in (None, "check"):
        for hd, qh, kvh, mask, softcap, lse in CHECK_KERNELS:
            if head_dims and dims(hd)[0] not in head_dims:
                continue
            for batch, seq_q, seq_k in shapes:
                spec = [hd, qh, kvh, mask, softcap, lse, batch, seq_q, seq_k,
                        device]
                result = child("check", kernels, spec)
                result["spec"] = spec
                checks.append(result)
                print(f"check {name_of('e4m3', hd, qh, kvh, mask, softcap, lse)} "
                      f"{batch}x{seq_q}x{seq_k}: "
                      + ("ok" if result.get("ok") else "FAIL")
                      + f" {json.dumps({k: v for k, v in result.items() if k != 'spec'})}",
                      flush=True)
    if only in (None, "speed"):
        for hd, qh, kvh, mask in SPEED_KERNELS:
            if head_dims and dims(hd)[0] not in head_dims:
                continue
            for batch, seq in SPEED_SHAPES:
                spec = [hd, qh, kvh, mask, batch, seq]
                result = child("speed", kernels, spec)
                result["spec"] = spec
                speeds.append(result)
                cells = "  ".join(
                    f"{n} {r['tflops']:.0f}" if "tflops" in r else f"{n} err"
                    for n, r in result.get("implementations", {}).items())
                print(f"speed hd{dims(hd)} {qh}/{kvh}h {mask} {batch}x{seq}: "
                      f"{cells or result.get('error')}", flush=True)
    passed = sum(1 for c in checks if c.get("ok"))
    print(f"fp8: {passed}/{len(checks)} checks pass, {time.time() - started:.0f} s")
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"),
                       "torch": torch.__version__,
                       "device": (torch.cuda.get_device_name()
                                  if device == "cuda" else "fa4-emu"),
                       "flops": "2 * batch * q_heads * seq^2 * (head_dim + v_head_dim), "
                                "halved if causal",
                       "checks": checks, "speed": speeds}, f, indent=1)
    return passed == len(checks)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("compile", "run", "ab", "one"))
    parser.add_argument("kernels", help="the kernel directory; for ab, "
                        "LABEL=DIR (two or more, the first the baseline)")
    parser.add_argument("spec", nargs="*")
    parser.add_argument("--rounds", type=int, default=3,
                        help="ab: rounds of timings (the median is reported)")
    parser.add_argument("--out")
    parser.add_argument("--only", choices=("check", "speed"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: the check's small shapes in fa4-emu")
    parser.add_argument("--head-dims", type=lambda s: [int(x) for x in s.split(",")],
                        help="only these (Q and K's) head dims (comma-separated; "
                             "default: every one of the lists)")
    parser.add_argument("--block-n", type=int, default=0,
                        help="compile: the FP8 kernels' K/V block (default: "
                             "fa4's)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.mode == "compile":
        compile_all(args.kernels, args.head_dims, args.block_n)
    elif args.mode == "ab":
        sys.path.insert(0, HERE)
        from common import parse_builds
        builds = parse_builds(parser, [args.kernels] + args.spec)
        sys.exit(0 if ab_all(builds, args.out, args.rounds, args.head_dims) else 1)
    elif args.mode == "run":
        sys.exit(0 if run_all(args.kernels, args.out, args.only, args.device,
                              args.head_dims) else 1)
    else:
        kind, spec = json.loads(args.spec[0])
        if kind == "ab":
            result = run_ab(json.loads(args.kernels), spec)
        else:
            result = (run_check if kind == "check" else run_speed)(args.kernels, spec)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
