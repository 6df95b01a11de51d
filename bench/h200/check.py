#!/usr/bin/env python3
"""fa4's kernels against torch's attention on the H200: a correctness matrix.

For every check kernel of the index (scripts/hopper-kernels.sh writes it and
the kernels: bench/h200/variants.py's matrix) this loads the kernel through
libfa4rt.so (python/fa4/_capi.py), launches it on several problem sizes —
a single token, odd lengths, seq_q != seq_k both ways, batch > 1, up to 2 x
4096 x 4096 — and compares O and the LSE with a float32 reference:

  O    torch.nn.functional.scaled_dot_product_attention (its math backend)
       on q, k, v upcast to float32 (GQA by repeating k and v per group),
       with the variant's mask as a boolean attn_mask (causal and windows
       aligned to the bottom-right corner, as FlashAttention >= 2.1) and the
       manifest's scale;
  LSE  logsumexp over the same masked, scaled float32 scores (natural log),
       computed separately from O.

A query row whose mask leaves it no key (seq_q > seq_k under a causal mask
or a window) has no softmax; SDPA gives NaN there. fa4 defines such a row
as O = 0 and LSE = -inf, and the reference is set to exactly that: the row's
O must be 0 and its LSE -inf, bit for bit. O and the LSE start as NaN, so
an element the kernel never writes fails.

The variant (head dim, heads, mask and window, scale, softcap, dtype, LSE)
is read from each kernel's manifest (`attention`); the index's own record
of what was compiled must agree with it. A case passes when the largest
absolute error of O and of the finite LSE entries is at most 1e-2 (fp16) or
2e-2 (bf16). Exit status 1 when any case fails.

  python3 bench/h200/check.py dist-h200 --out check.json
  python3 bench/h200/check.py KDIR --only 'hd128-bf16' --shapes 2x129x257
  python3 bench/h200/check.py KDIR --device cpu --shapes 1x1x1   # fa4-emu, sm_100a

With --device cpu the tensors are CPU tensors and the launches run in
fa4-emu (sm_100a kernels; slow: small shapes only), which is how this file
is tested without a GPU. compute-sanitizer can wrap the process as it is
(pick small shapes): the reference runs no fused attention kernel of its
own, so what it reports is fa4's or the matmuls'.
"""

import argparse
import datetime
import json
import math
import os
import re
import sys
import time

import torch

from common import device_info, load_capi
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = ((1, 1, 1), (2, 129, 257), (1, 1000, 333), (3, 257, 641),
          (1, 2048, 2048), (2, 4096, 4096))
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def visible(seq_q, seq_k, attention, device):
    """Which keys each query sees (a [seq_q, seq_k] bool tensor), or None
    when every key is visible. Query i's diagonal is key i + seq_k - seq_q."""
    mask, left, right = (attention["mask"], attention["window_left"],
                         attention["window_right"])
    if mask == "none":
        return None
    i = torch.arange(seq_q, device=device).unsqueeze(1)
    j = torch.arange(seq_k, device=device).unsqueeze(0)
    diagonal = i + (seq_k - seq_q)
    if mask == "causal":
        return j <= diagonal
    if mask != "window":
        raise ValueError(f"unknown mask {mask!r}")
    seen = torch.ones(seq_q, seq_k, dtype=torch.bool, device=device)
    if left >= 0:
        seen &= j >= diagonal - left
    if right >= 0:
        seen &= j <= diagonal + right
    return seen


def reference(q, k, v, attention):
    """O [batch, seq_q, q_heads, head_dim] and LSE [batch, q_heads, seq_q]
    in float32 (see the module's doc), one batch at a time."""
    batch, seq_q, q_heads, _ = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    group = q_heads // kv_heads
    scale, softcap = attention["scale"], attention["softcap"]
    mask = visible(seq_q, seq_k, attention, q.device)
    o = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, q_heads, seq_q, dtype=torch.float32, device=q.device)
    for b in range(batch):
        qb = q[b].float().transpose(0, 1)  # heads, seq, head_dim
        kb = k[b].float().transpose(0, 1).repeat_interleave(group, dim=0)
        vb = v[b].float().transpose(0, 1).repeat_interleave(group, dim=0)
        scores = torch.matmul(qb, kb.transpose(1, 2)) * scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        if mask is not None:
            scores.masked_fill_(~mask, -math.inf)
        lse[b] = torch.logsumexp(scores, dim=-1)
        if softcap:  # SDPA has no softcap
            ob = torch.softmax(scores, dim=-1) @ vb
        else:
            # The math backend: plain matmuls and a softmax, no fused
            # attention kernel of torch's own (whose races compute-sanitizer
            # would report beside fa4's).
            with sdpa_kernel(SDPBackend.MATH):
                ob = torch.nn.functional.scaled_dot_product_attention(
                    qb.unsqueeze(0), kb.unsqueeze(0), vb.unsqueeze(0),
                    attn_mask=mask, scale=scale).squeeze(0)
        del scores
        o[b] = ob.transpose(0, 1)
    if mask is not None:
        o[:, ~mask.any(dim=1)] = 0.0  # rows that see no key
    return o, lse


def compare(o, lse, want_o, want_lse):
    """(max |dO|, max |dLSE| over finite entries, why it fails or None)."""
    if not bool(torch.isfinite(o).all()):
        bad = int((~torch.isfinite(o)).sum())
        return math.nan, math.nan, f"{bad} elements of O are not finite (unwritten?)"
    error_o = (o.float() - want_o).abs().max().item()
    if lse is None:
        return error_o, None, None
    finite = torch.isfinite(want_lse)
    if bool(torch.isnan(lse).any()):
        return error_o, math.nan, f"{int(torch.isnan(lse).sum())} LSE entries are NaN"
    if not torch.equal(torch.isfinite(lse), finite) or not bool(
            (lse[~finite] == -math.inf).all()):
        return error_o, math.nan, "LSE is not -inf exactly on the rows that see no key"
    error_lse = ((lse[finite] - want_lse[finite]).abs().max().item()
                 if bool(finite.any()) else 0.0)
    return error_o, error_lse, None


def variant_of(manifest):
    """The manifest's `attention`, with what the index records."""
    a = dict(manifest["attention"])
    a["target"] = manifest.get("target")
    return a


def index_disagreement(entry, attention, target):
    for key in ("head_dim", "q_heads", "kv_heads", "dtype", "mask", "lse",
                "window_left", "window_right"):
        if entry.get(key) != attention.get(key):
            return (f"the manifest says {key} = {attention.get(key)!r}, the "
                    f"index {entry.get(key)!r}")
    if target and attention["target"] != target:
        return f"the manifest's target is {attention['target']}, the index's {target}"
    return None


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(
                f"a shape is BATCHxSEQ_QxSEQ_K (e.g. 2x129x257), got {item!r}")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def main():
    parser = argparse.ArgumentParser(
        description="fa4's kernels against torch's SDPA in float32 (O and LSE)")
    parser.add_argument("kernels", help="directory of the kernels and index.json")
    parser.add_argument("--index", help="the index (default: KERNELS/index.json)")
    parser.add_argument("--lib", help="libfa4rt.so (default: KERNELS/libfa4rt.so, "
                                      "else $FA4RT_LIBRARY)")
    parser.add_argument("--out", help="write the results here as JSON")
    parser.add_argument("--only", help="only kernels whose name matches this regex")
    parser.add_argument("--shapes", type=parse_shapes, default=list(SHAPES),
                        help="BATCHxSEQ_QxSEQ_K,... (default: "
                             + ",".join("x".join(map(str, s)) for s in SHAPES) + ")")
    parser.add_argument("--device", default="cuda",
                        help="cuda (default) or cpu (fa4-emu, sm_100a kernels)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    capi = load_capi()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.init()
    # The reference in true float32: no TF32 in its matmuls.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    index_path = args.index or os.path.join(args.kernels, "index.json")
    with open(index_path) as f:
        index = json.load(f)
    library = args.lib
    if library is None and os.path.exists(os.path.join(args.kernels, "libfa4rt.so")):
        library = os.path.join(args.kernels, "libfa4rt.so")
    entries = [e for e in index["kernels"] if e["use"] == "check"
               and (not args.only or re.search(args.only, e["name"]))]
    info = device_info(device)
    print(f"fa4 check: {len(entries)} kernels x {len(args.shapes)} shapes on "
          f"{info.get('gpu', device.type)}; index {index.get('target')} "
          f"compiled {index.get('compiled')} at {index.get('commit')}")
    header = f"{'kernel':<38} {'batch x seq_q x seq_k':>21} {'max|dO|':>9} {'max|dLSE|':>9}  status"
    print(header)
    print("-" * len(header))

    results = []
    started = time.time()
    lost_context = False
    for number, entry in enumerate(entries):
        name = entry["name"]
        try:
            kernel = capi.load_kernel(os.path.join(args.kernels, entry["manifest"]),
                                      library=library)
            attention = variant_of(kernel.manifest)
            disagreement = index_disagreement(entry, attention, index.get("target"))
        except (capi.LoadError, KeyError, ValueError) as e:
            kernel, attention, disagreement = None, None, f"cannot load: {e}"
        if disagreement:
            results.append(dict(kernel=name, variant=attention, status="FAIL",
                                error=disagreement))
            print(f"{name:<38} {'':>21} {'':>9} {'':>9}  FAIL {disagreement}")
            continue
        dtype = TORCH_DTYPES[attention["dtype"]]
        tolerance = TOLERANCE[attention["dtype"]]
        for shape_number, (batch, seq_q, seq_k) in enumerate(args.shapes):
            generator = torch.Generator(device=device).manual_seed(
                args.seed * 1000003 + number * 101 + shape_number)
            hd, hq, hkv = attention["head_dim"], attention["q_heads"], attention["kv_heads"]

            def randn(*shape):
                return torch.randn(*shape, generator=generator, device=device).to(dtype)

            q, k, v = randn(batch, seq_q, hq, hd), randn(batch, seq_k, hkv, hd), \
                randn(batch, seq_k, hkv, hd)
            o = torch.full_like(q, math.nan)
            lse = (torch.full((batch, hq, seq_q), math.nan, device=device)
                   if attention["lse"] else None)
            result = dict(kernel=name, variant=attention, batch=batch, seq_q=seq_q,
                          seq_k=seq_k, tolerance=tolerance)
            error_o = error_lse = None
            try:
                kernel(q, k, v, o, lse)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            except capi.LaunchError as e:
                why = f"launch: {e}"
            except RuntimeError as e:  # the kernel faulted: the context is gone
                why = f"CUDA: {e}"
                lost_context = True
            else:
                want_o, want_lse = reference(q, k, v, attention)
                error_o, error_lse, why = compare(o, lse, want_o, want_lse)
                if why is None and (error_o > tolerance or
                                    (error_lse is not None and error_lse > tolerance)):
                    why = f"error above {tolerance}"
            result.update(max_abs_o=error_o, max_abs_lse=error_lse,
                          status="ok" if why is None else "FAIL", error=why)
            results.append(result)

            def number_text(x):
                return "-" if x is None else f"{x:.2e}"

            print(f"{name:<38} {f'{batch} x {seq_q} x {seq_k}':>21} "
                  f"{number_text(error_o):>9} {number_text(error_lse):>9}  "
                  f"{result['status']}{'' if why is None else ' ' + why}", flush=True)
            if lost_context:
                break
        kernel.close()
        if lost_context:
            print("fa4 check: stopped, the CUDA context is lost after a failed launch")
            break

    failed = sum(r["status"] != "ok" for r in results)
    passed = len(results) - failed
    print(f"fa4 check: {passed} passed, {failed} failed in {time.time() - started:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"),
                "device": info,
                "index": {k: index.get(k) for k in ("target", "sm_count", "compiled",
                                                    "commit")},
                "reference": "torch SDPA (O) and logsumexp (LSE) in float32, "
                             "bottom-right aligned masks; rows that see no key: "
                             "O = 0, LSE = -inf",
                "stopped_early": lost_context,
                "passed": passed, "failed": failed, "results": results,
            }, f, indent=1)
    return 1 if failed or lost_context else 0


if __name__ == "__main__":
    sys.exit(main())
