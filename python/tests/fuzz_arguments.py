"""A fuzzer of fa4's Python argument layer.

Random calls of fa4.attention, torch.ops.fa4.attention, fa4.compile,
fa4.compile_ir, fa4.Kernel and fa4._capi.Kernel: shapes, dtypes, strides
(transposed, sliced, misaligned, broadcast, overlapping), windows, flags,
grad modes and arguments of the wrong type. Every call must end in one of

- a result that matches the float64 reference (or the variant asked for),
- a refusal: ValueError, TypeError, fa4.CompileError, fa4.LaunchError
  (which is fa4._capi.LaunchError: every launch goes through the C API;
  NotImplementedError only for inputs requiring grad in grad mode), with a
  message;

anything else is a finding. Batches run in child processes, so that a
crash (a signal, an abort) or a hang (past the timeout) is seen and counted
rather than ending the run:

    python fuzz_arguments.py --batches 50 --cases 200 --seed 1

prints the counts as JSON (cases by outcome, findings with the seed and
index that reproduce each: ``--replay SEED:INDEX``). Kernels are compiled
for a handful of variants only, which the compile cache keeps.

An emulated launch takes about a second; ``--execute-every N`` runs the
kernel in only every N-th case and stops the others where the kernel would
start (``fa4._emulator_executes``, and fa4._capi's ``plan_only``, both the
C API's FA4RT_EMULATOR_PLAN_ONLY): every check and the launch plan still run, the result is checked for its shapes and
dtypes only, and the case counts as "planned". That is what makes runs of
10^6 cases possible.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))

# The variants that compile (and run): few, so that the compile cache holds
# them after a first run. (q_heads, kv_heads), (causal, window), scale,
# return_lse; head_dim 64, fp16 or bf16.
HEADS = [(2, 1)]
MASKS = [(False, (-1, -1)), (True, (-1, -1)), (False, (8, 4))]
SCALES = [None]


class Case:
    """One call: what to call, a description (for the report) and the
    check of its result."""

    def __init__(self, entry, description, call, check, grad=False):
        self.entry, self.description = entry, description
        self.call, self.check, self.grad = call, check, grad


def _tensor(rng, torch, shape, dtype, layout):
    """A tensor of `shape` in one of the layouts a caller may pass."""
    generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
    if layout == "heads_first" and len(shape) == 4:
        b, s, h, d = shape
        base = torch.randn(b, h, s, d, generator=generator).to(dtype)
        return base.transpose(1, 2)
    if layout == "sliced_head_dim" and len(shape) == 4:
        wide = torch.randn(*shape[:-1], shape[-1] * 2, generator=generator).to(dtype)
        return wide[..., ::2]
    if layout == "padded_rows" and len(shape) == 4:
        wide = torch.randn(*shape[:-1], shape[-1] + 4, generator=generator).to(dtype)
        return wide[..., :shape[-1]]
    if layout == "misaligned":
        count = math.prod(shape)
        storage = torch.randn(count + 1, generator=generator).to(dtype)
        return storage[1:].view(shape)
    if layout == "broadcast" and len(shape) >= 2 and shape[1] > 0:
        one = list(shape)
        one[1] = 1
        return torch.randn(one, generator=generator).to(dtype).expand(shape)
    return torch.randn(shape, generator=generator).to(dtype)


LAYOUTS = ["contiguous"] * 6 + ["heads_first", "sliced_head_dim", "padded_rows",
                                "misaligned", "broadcast"]


def _inputs(rng, torch, valid, dtype=None, choices=LAYOUTS):
    """q, k, v and the problem's (batch, seq_q, seq_k, q_heads, kv_heads,
    head_dim, dtype); `valid` keeps to shapes and dtypes fa4 takes (`dtype`
    when given)."""
    q_heads, kv_heads = rng.choice(HEADS)
    batch = rng.choice([1, 1, 2, 0] if not valid else [1, 1, 2])
    seq_q = rng.choice([1, 17, 64, 80] + ([0] if not valid else []))
    seq_k = rng.choice([1, 33, 64, 96] + ([0] if not valid else []))
    head_dim = 64
    dtype = dtype or rng.choice([torch.float16, torch.bfloat16])
    shapes = [(batch, seq_q, q_heads, head_dim), (batch, seq_k, kv_heads, head_dim),
              (batch, seq_k, kv_heads, head_dim)]
    dtypes = [dtype] * 3
    if not valid:
        which = rng.randrange(3)
        twist = rng.choice(["dtype", "rank", "head_dim", "heads", "batch",
                            "huge", "none", "none", "none"])
        if twist == "dtype":
            dtypes[which] = rng.choice([torch.float32, torch.float64, torch.int32,
                                        torch.bool, torch.int8])
        elif twist == "rank":
            shapes[which] = rng.choice([shapes[which][1:], shapes[which] + (1,), ()])
        elif twist == "head_dim":
            d = rng.choice([32, 80, 96, 128, 0])
            shapes = [s[:3] + (d,) for s in shapes]
        elif twist == "heads":
            shapes[0] = shapes[0][:2] + (rng.choice([3, 5, 0, 64]),) + shapes[0][3:]
        elif twist == "batch":
            shapes[which] = (batch + 1,) + shapes[which][1:]
    layouts = [rng.choice(choices) for _ in range(3)]
    if not valid and twist == "huge":
        # Past the runtime's limits (batch · q_heads · seq_q or a sequence
        # of 2^31), broadcast from one row: refused before any copy.
        which = rng.randrange(3)
        huge = 1 << rng.choice([30, 31, 40])
        shapes = [(s[0] or 1,) + s[1:] for s in shapes]
        if which == 0:
            shapes[0] = (shapes[0][0], huge) + shapes[0][2:]
        else:
            shapes[1] = shapes[2] = (shapes[1][0], huge) + shapes[1][2:]
        layouts = ["broadcast" if shape[1] == huge else layout
                   for shape, layout in zip(shapes, layouts)]
    tensors = [_tensor(rng, torch, s, d, layout)
               for s, d, layout in zip(shapes, dtypes, layouts)]
    if not valid and rng.random() < 0.05:
        tensors[rng.randrange(3)] = rng.choice([None, 3, [1.0], "q"])
    if not valid and rng.random() < 0.03:
        tensors = [t.to("meta") if hasattr(t, "to") else t for t in tensors]
    return tensors, (batch, seq_q, seq_k, q_heads, kv_heads, head_dim, dtype)


def _scalar(rng, good, bad):
    return rng.choice(good) if rng.random() < 0.8 else rng.choice(bad)


BAD_INTS = [-2, 1 << 31, 1 << 70, 1.5, "4", None]
BAD_REALS = [-1.0, float("nan"), float("inf"), 1e39, "x", None, 0]


def _close(torch, got, want, dtype):
    tolerance = 1e-2 if dtype == torch.float16 else 3e-2
    return (got.double() - want).abs().max().item() <= tolerance


def _check_attention(torch, reference, q, k, v, causal, window, softcap, scale,
                     return_lse, result, executed=True):
    o, lse = result if return_lse else (result, None)
    if tuple(o.shape) != tuple(q.shape) or o.dtype != q.dtype:
        return f"O has shape {tuple(o.shape)} {o.dtype}"
    if return_lse:
        want = (q.shape[0], q.shape[2], q.shape[1])
        if tuple(lse.shape) != want or lse.dtype != torch.float32:
            return f"the LSE has shape {tuple(lse.shape)} {lse.dtype}"
    if q.numel() == 0 or q.device.type == "meta" or not executed:
        return None
    want_o, want_lse = reference(q, k, v, causal, window, softcap, scale)
    if not _close(torch, o, want_o, q.dtype):
        return "O differs from the reference"
    if return_lse:
        finite = torch.isfinite(want_lse)
        if not torch.equal(torch.isfinite(lse), finite):
            return "LSE finiteness differs from the reference"
        if finite.any() and not _close(torch, lse[finite], want_lse[finite], q.dtype):
            return "LSE differs from the reference"
    return None


def _attention_case(rng, torch, fa4, reference, through_op):
    valid = rng.random() < 0.5
    (q, k, v), _ = _inputs(rng, torch, valid)
    causal, window = rng.choice(MASKS)
    scale = rng.choice(SCALES)
    softcap = 0.0
    return_lse = rng.random() < 0.5
    if not valid:
        causal = _scalar(rng, [causal], [1, "yes", None])
        window = _scalar(rng, [window], [(-2, 3), (1 << 31, 0), (1.5, 2), "ab",
                                         (1, 2, 3), None, (8, -9)])
        softcap = _scalar(rng, [0.0], BAD_REALS)
        scale = _scalar(rng, [scale], BAD_REALS)
    grad = rng.random() < 0.1 and all(isinstance(t, torch.Tensor) and
                                      t.dtype.is_floating_point for t in (q, k, v))
    if grad:
        q = q.detach().requires_grad_()
    grad_mode = rng.random() < 0.5

    def op(*tensors):
        return torch.ops.fa4.attention(*tensors, causal, window[0], window[1],
                                       softcap, scale, return_lse)

    def call():
        with torch.set_grad_enabled(grad_mode):
            if through_op:
                if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or \
                        not isinstance(window, tuple) or len(window) != 2 or \
                        not all(isinstance(w, int) for w in window) or \
                        not isinstance(causal, bool) or \
                        not isinstance(softcap, float) or \
                        not (scale is None or isinstance(scale, float)):
                    # The op's schema is torch's to enforce; fuzz its values.
                    raise ValueError("not the op's schema types")
                # The fake implementation answers as the real op does.
                fake = _outcome(lambda: _fake_call(torch, op, (q, k, v)))
                real = _outcome(lambda: op(q, k, v))
                # (Only memory, which the fake does not allocate, may fail
                # the op alone.)
                out_of_memory = any(said in str(real[1]) for said in
                                    ("could not be allocated",
                                     "bytes of host memory"))
                if (fake[0], type(fake[1])) != (real[0], type(real[1])) and \
                        not (fake[0] == real[0] == "result") and not out_of_memory:
                    raise AssertionError(f"the fake gives {fake}, the op {real}")
                if real[0] == "raised":
                    raise real[1]
                return real[1]
            return fa4.attention(q, k, v, causal=causal, window=window,
                                 softcap=softcap, scale=scale, return_lse=return_lse)

    def check(result, executed=True):
        if through_op:
            result = result if return_lse else result[0]
        return _check_attention(torch, reference, q.detach(), k, v, causal, window,
                                softcap, scale, return_lse, result, executed)

    entry = "torch.ops.fa4.attention" if through_op else "fa4.attention"
    description = (f"{entry} q={_describe(q)} k={_describe(k)} v={_describe(v)} "
                   f"causal={causal!r} window={window!r} softcap={softcap!r} "
                   f"scale={scale!r} return_lse={return_lse} grad_mode={grad_mode}")
    return Case(entry, description, call, check, grad=grad and grad_mode)


def _outcome(call):
    try:
        return ("result", call())
    except Exception as e:  # noqa: BLE001 - compared, then raised again
        return ("raised", e)


def _fake_call(torch, op, tensors):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t
                for t in tensors]
        return op(*fake)


def _describe(t):
    try:
        return (f"{tuple(t.shape)}/{t.stride()}/{str(t.dtype)[6:]}/"
                f"{t.device.type}/{t.data_ptr() % 16}")
    except Exception:
        return repr(t)


def _compile_case(rng, torch, fa4):
    valid = rng.random() < 0.5
    q_heads, kv_heads = rng.choice(HEADS)
    causal, window = rng.choice(MASKS)
    kwargs = dict(head_dim=64, q_heads=q_heads, kv_heads=kv_heads,
                  mask="causal" if causal else "none", window=window,
                  dtype="fp16", lse=rng.random() < 0.5,
                  scale=rng.choice(SCALES))
    if not valid:
        key = rng.choice(["head_dim", "q_heads", "kv_heads", "mask", "window",
                          "dtype", "lse", "scale", "softcap", "target", "cache",
                          "rescale_threshold", "exp2_emulation_fraction",
                          "sm_count"])
        kwargs[key] = rng.choice({
            "head_dim": [80, 0, -5, 1 << 70, 64.0, "64"],
            "q_heads": [3, 0, -2, 1 << 64, None],
            "kv_heads": [0, 3, 1.0],
            "mask": ["window", "diagonal", None, 3],
            "window": [(-2, 1), (1 << 31, 0), (1 << 63, 0), (1.5, 2), "ab",
                       (1, 2, 3), 7, (-1, -1)],
            "dtype": ["fp32", None, 16],
            "lse": ["yes", None],
            "scale": [-1.0, float("nan"), 1e39, "x", 0],
            "softcap": [-1.0, float("inf"), "x"],
            "target": ["sm_80", 5, None, ""],
            "cache": ["no", None],
            "rescale_threshold": [None, "8"],
            "exp2_emulation_fraction": [-0.5, 1.5, "x", float("nan")],
            "sm_count": [-1, 1 << 40, 2.5],
        }[key])

    def call():
        return fa4.compile(**kwargs)

    def check(kernel, executed=True):
        attention = kernel.manifest["attention"]
        if attention["head_dim"] != kwargs["head_dim"]:
            return "the manifest's head_dim differs"
        return None

    return Case("fa4.compile", f"fa4.compile(**{kwargs!r})", call, check)


ENTRY = """
func.func @attention(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                     %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x2x64xf16>, memref<?x?x1x64xf16>, memref<?x?x1x64xf16>
      -> memref<?x?x2x64xf16>
  return
}
"""


def _compile_ir_case(rng, torch, fa4):
    cut = rng.randrange(len(ENTRY))
    text = rng.choice([ENTRY[:cut], ENTRY[:cut] + "array<index: 1>" + ENTRY[cut:],
                       "(" * rng.randrange(1, 20000), b"func.func", None, 3,
                       ENTRY.replace("2x64", "3x64")])
    kwargs = {}
    if rng.random() < 0.3:
        kwargs[rng.choice(["target", "sm_count", "cache"])] = rng.choice(
            [None, -1, "x", 1.5])

    def call():
        return fa4.compile_ir(text, **kwargs)

    return Case("fa4.compile_ir", f"fa4.compile_ir({text!r:.60}, **{kwargs!r})",
                call, lambda kernel, executed=True: None)


def _kernel_case(rng, torch, fa4, reference, capi_kernels, execute):
    """Kernel.__call__ (the extension's) or fa4._capi's Kernel on a compiled
    variant, with random tensors for q, k, v, o and the LSE."""
    q_heads, kv_heads = rng.choice(HEADS)
    causal, window = rng.choice(MASKS)
    lse_flag = rng.random() < 0.5
    kernel = fa4.compile(head_dim=64, q_heads=q_heads, kv_heads=kv_heads,
                         mask="causal" if causal else "none", window=window,
                         lse=lse_flag)
    valid = rng.random() < 0.5
    # A launch reads its tensors in place: mostly layouts a tensor map
    # expresses, so that launches run as well as get refused.
    (q, k, v), problem = _inputs(
        rng, torch, valid, torch.float16 if valid or rng.random() < 0.5 else None,
        LAYOUTS if rng.random() < 0.3 else ["contiguous", "heads_first"])
    batch, seq_q = problem[0], problem[1]
    o_layout = rng.choice(["fresh"] * 4 + ["alias_q", "alias_v", "heads_first",
                                           "padded_rows", "misaligned", "broadcast"])
    if o_layout == "fresh" or not isinstance(q, torch.Tensor):
        o = torch.zeros(batch, seq_q, q_heads, 64, dtype=problem[6])
    elif o_layout == "alias_q":
        o = q
    elif o_layout == "alias_v":
        o = v
    else:
        o = _tensor(rng, torch, (batch, seq_q, q_heads, 64), problem[6], o_layout)
    lse = torch.zeros(batch, q_heads, seq_q) if lse_flag else None
    if rng.random() < 0.1:
        lse = rng.choice([None, torch.zeros(batch, q_heads, seq_q),
                          torch.zeros(batch, q_heads, seq_q + 1),
                          torch.zeros(batch, q_heads, seq_q, dtype=torch.float16)])
    through_capi = rng.random() < 0.4
    extras = [] if rng.random() < 0.9 else rng.choice([[torch.zeros(4)], 3, ["x"]])
    workers = 0 if rng.random() < 0.9 else rng.choice([-1, 1 << 40, "2", 1])
    if through_capi:
        capi = capi_kernels(kernel)

        def call():
            return capi(q, k, v, o, lse, extras, workers=workers,
                        plan_only=not execute)
    else:
        def call():
            return kernel(q, k, v, o, lse, extras=extras, workers=workers)

    def check(_, executed=True):
        if not executed:
            return None  # the outputs are left as they were
        o_wanted, lse_wanted = reference(q, k, v, causal, window)
        if not _close(torch, o, o_wanted, q.dtype):
            return "O differs from the reference"
        if lse is not None:
            finite = torch.isfinite(lse_wanted)
            if not torch.equal(torch.isfinite(lse), finite):
                return "LSE finiteness differs"
            if finite.any() and not _close(torch, lse[finite], lse_wanted[finite], q.dtype):
                return "LSE differs"
        return None

    entry = "fa4._capi.Kernel" if through_capi else "fa4.Kernel"
    description = (f"{entry} {kernel.manifest['attention']} q={_describe(q)} "
                   f"k={_describe(k)} v={_describe(v)} o={_describe(o)} "
                   f"lse={_describe(lse)} extras={extras!r:.40} workers={workers!r}")
    return Case(entry, description, call, check)


def run_batch(seed, cases, first=0, only=None, execute_every=1):
    """Runs cases [first, first + cases) of `seed` in this process; returns
    the counts and the findings. The kernel runs in every `execute_every`-th
    case only (the others stop where it would start)."""
    import torch
    import fa4
    from fa4 import _capi
    sys.path.insert(0, HERE)
    from conftest import reference

    directory = tempfile.mkdtemp(prefix="fa4-fuzz-")
    loaded = {}

    def capi_kernels(kernel):
        # fa4._capi's kernel as a GPU machine loads one: from its files.
        key = id(kernel)
        if key not in loaded:
            m = kernel.manifest
            stem = os.path.join(directory, str(len(loaded)))
            os.makedirs(stem)
            with open(os.path.join(stem, m["cubin"]), "wb") as f:
                f.write(kernel.cubin)
            with open(os.path.join(stem, m["ptx"]), "w") as f:
                f.write(kernel.ptx)
            path = os.path.join(stem, m["cubin"] + ".json")
            with open(path, "w") as f:
                f.write(kernel._native.manifest_json)
            loaded[key] = _capi.load_kernel(path)
        return loaded[key]

    refusals = (ValueError, TypeError, fa4.CompileError, fa4.LaunchError)
    counts = {"cases": 0, "results": 0, "planned": 0, "refusals": 0, "findings": 0}
    by_entry, findings, samples = {}, [], {}
    indices = range(first, first + cases) if only is None else [only]
    for index in indices:
        rng = random.Random(f"{seed}:{index}")
        execute = execute_every <= 1 or index % execute_every == 0
        fa4._emulator_executes = execute
        kind = rng.choice(["attention", "op", "compile", "compile_ir", "kernel",
                           "kernel"])
        try:
            if kind in ("attention", "op"):
                case = _attention_case(rng, torch, fa4, reference, kind == "op")
            elif kind == "compile":
                case = _compile_case(rng, torch, fa4)
            elif kind == "compile_ir":
                case = _compile_ir_case(rng, torch, fa4)
            else:
                case = _kernel_case(rng, torch, fa4, reference, capi_kernels, execute)
        except Exception:
            findings.append({"case": f"{seed}:{index}", "entry": "generator",
                             "error": traceback.format_exc(limit=3)})
            counts["findings"] += 1
            continue
        counts["cases"] += 1
        entry = by_entry.setdefault(case.entry, {"results": 0, "planned": 0,
                                                 "refusals": 0, "findings": 0})
        problem = None
        launches = case.entry not in ("fa4.compile", "fa4.compile_ir")
        try:
            result = case.call()
        except refusals as e:
            outcome = "refusals"
            said = samples.setdefault(case.entry, [])
            if len(said) < 8 and str(e)[:60] not in [m[:60] for m in said]:
                said.append(f"{type(e).__name__}: {e}"[:200])
            if not str(e).strip():
                problem = f"{type(e).__name__} without a message"
        except NotImplementedError as e:
            outcome = "refusals"
            if not case.grad:
                problem = f"NotImplementedError without grad: {e}"
        except BaseException as e:  # noqa: BLE001 - every other exception is a finding
            outcome = "findings"
            problem = f"{type(e).__name__}: {e}"[:500]
        else:
            outcome = "results" if execute or not launches else "planned"
            try:
                problem = case.check(result, executed=execute)
            except BaseException as e:  # noqa: BLE001
                problem = f"the check failed: {type(e).__name__}: {e}"[:500]
        if problem is not None:
            outcome = "findings"
            findings.append({"case": f"{seed}:{index}", "entry": case.entry,
                             "call": case.description[:600], "problem": problem})
        counts[outcome] += 1
        entry[outcome] += 1
    return {"counts": counts, "by_entry": by_entry, "findings": findings,
            "refusals": samples}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--cases", type=int, default=50, help="cases per batch")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds a batch may take before it counts as a hang")
    parser.add_argument("--execute-every", type=int, default=1, metavar="N",
                        help="run the kernel in every N-th case only; the "
                             "others stop where it would start (default 1: all)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="batches run at once")
    parser.add_argument("--child", metavar="SEED:FIRST:COUNT:EVERY",
                        help=argparse.SUPPRESS)
    parser.add_argument("--replay", metavar="SEED:INDEX",
                        help="run one case here and print it")
    options = parser.parse_args()
    if options.child:
        seed, first, count, every = options.child.split(":")
        print(json.dumps(run_batch(seed, int(count), int(first),
                                   execute_every=int(every))))
        return 0
    if options.replay:
        seed, index = options.replay.split(":")
        print(json.dumps(run_batch(seed, 1, only=int(index),
                                   execute_every=options.execute_every), indent=1))
        return 0
    total = {"batches": 0, "cases": 0, "results": 0, "planned": 0,
             "refusals": 0, "findings": 0, "crashes": 0, "hangs": 0}
    by_entry, findings = {}, []

    def run_child(batch):
        first = batch * options.cases
        spec = f"{options.seed}:{first}:{options.cases}"
        command = [sys.executable, os.path.abspath(__file__), "--child",
                   f"{spec}:{options.execute_every}"]
        try:
            run = subprocess.run(command, capture_output=True, text=True,
                                 timeout=options.timeout)
        except subprocess.TimeoutExpired:
            return spec, None, None
        return spec, run.returncode, run

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max(1, options.jobs)) as pool:
        for spec, status, run in pool.map(run_child, range(options.batches)):
            total["batches"] += 1
            if status is None:
                total["hangs"] += 1
                findings.append({"batch": spec,
                                 "problem": f"no answer within {options.timeout} s"})
                continue
            if status != 0:
                total["crashes"] += 1
                findings.append({"batch": spec, "problem": f"exit status {status}",
                                 "stderr": run.stderr[-2000:]})
                continue
            report = json.loads(run.stdout.strip().splitlines()[-1])
            for key, value in report["counts"].items():
                total[key] += value
            for name, counts in report["by_entry"].items():
                mine = by_entry.setdefault(name, {"results": 0, "planned": 0,
                                                  "refusals": 0, "findings": 0})
                for key, value in counts.items():
                    mine[key] += value
            findings += report["findings"]
    print(json.dumps({"total": total, "by_entry": by_entry,
                      "findings": findings}, indent=1))
    return 1 if total["findings"] or total["crashes"] or total["hangs"] else 0


if __name__ == "__main__":
    sys.exit(main())
