#!/usr/bin/env python3
"""fa4's kernels against torch's attention on the H200: a correctness matrix.

For every check kernel of the index (scripts/hopper-kernels.sh writes it and
the kernels: bench/h200/variants.py's matrix, with the schedule each was
compiled under) this loads the kernel through libfa4rt.so
(python/fa4/_capi.py), launches it on several problem sizes — a single
token, odd lengths, seq_q != seq_k both ways, batch > 1, and grids where a
persistent CTA (one per SM) runs several tasks (SHAPES), up to 2 x 4096 x
4096 — and compares O and the LSE with a float32 reference:

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
2e-2 (bf16). The inputs of a case depend on the variant and the shape only
(not on the schedule, nor on which kernels run), so the kernels of one
variant — its schedules, with and without the LSE — get the same q, k, v,
and their reference is computed once (kept while memory allows).

The launches run in a worker process (multiprocessing, spawn), one case at
a time: a launch that has not finished --timeout seconds after it started
(default 10 s on a GPU, where a case takes milliseconds) is a hang; the
worker is killed with it, the case fails as "timed out", the kernel's
remaining shapes are skipped (--hangs-per-kernel), and the run goes on with
the next kernel in a fresh worker (after the first restart a spare worker
is kept started, so a restart costs no torch import). A worker that dies
(a crash) or loses its CUDA context (a fault) is replaced the same way.
--timeout 0 runs everything in this process, with no time limit, and stops
at the first lost context (for compute-sanitizer, whose slowdown would
look like hangs). --deadline stops starting cases after that many seconds
(the rest are reported as skipped), so that a run with many hangs still
ends, and its JSON is written; --out is also rewritten after every kernel.
Exit status 1 when any case fails or is skipped.

  python3 bench/h200/check.py dist-h200 --out check.json
  python3 bench/h200/check.py KDIR --only 'hd128-bf16' --shapes 2x129x257
  python3 bench/h200/check.py KDIR --only 'win1000_200.*-pingpong' --hangs-per-kernel 0
  python3 bench/h200/check.py KDIR --device cpu --shapes 1x1x1   # fa4-emu
  compute-sanitizer --tool racecheck python3 bench/h200/check.py KDIR \\
      --timeout 0 --only 'hd64-fp16-none-q8kv8-lse$' --shapes 2x129x257

With --device cpu the tensors are CPU tensors and the launches run in
fa4-emu (Blackwell or Hopper kernels; slow: small shapes only, default
timeout 600 s; a kernel directory compiled with a small FA4_SM_COUNT gives
CTAs several tasks at small shapes),
which is how this file is tested without a GPU. compute-sanitizer can wrap
the process (with --timeout 0 and small shapes): the reference runs no
fused attention kernel of its own, so what it reports is fa4's or the
matmuls'.
"""

import argparse
import collections
import datetime
import hashlib
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import time

import torch

from common import device_info, load_capi
from torch.nn.attention import SDPBackend, sdpa_kernel

# (batch, seq_q, seq_k). A launch has batch * (q_heads / g) * ceil(seq_q *
# g / 128) tasks (128 query rows of one head group each; g, the GQA packing,
# is the ratio q_heads / kv_heads where it is 1, 2, 4, 8 or 16), on a
# persistent grid of min(132, tasks) CTAs on the H200. With the check
# kernels' 8 query heads, at GQA ratio 1 / 4 / 8:
#   1x1x1 8/2/1, 2x129x257 32/20/18, 1x1000x333 64/64/63, 3x257x641
#   72/54/51, 1x2048x2048 128: one task per CTA at most;
#   3x700x700 144/132/132, 2x1500x{700,1400,1500} 192/188/188, 4x1000x3000
#   256/256/252, 2x4096x4096 512: CTAs that run several tasks,
# over thousands of keys, seq_k below, near and above seq_q, where the
# windows of several 128-key blocks (variants.LONG_WINDOWS) visit many
# blocks: issue 22's hang needed both.
SHAPES = ((1, 1, 1), (2, 129, 257), (1, 1000, 333), (3, 257, 641),
          (1, 2048, 2048), (3, 700, 700), (2, 1500, 700), (2, 1500, 1400),
          (2, 1500, 1500), (4, 1000, 3000), (2, 4096, 4096))
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# Seconds a launch may take before it counts as a hang, per device (a GPU
# case takes milliseconds; fa4-emu is slow).
DEFAULT_TIMEOUT = {"cuda": 10.0, "cpu": 600.0}
# Seconds a worker may take to start (import torch, create the CUDA
# context), to load a kernel, and to make a case's inputs and reference.
START_LIMIT = 120.0
LOAD_LIMIT = 120.0
PREPARE_LIMIT = 300.0
# Bytes of inputs and references kept for the next kernels of a variant.
CACHE_BYTES = {"cuda": 4 << 30, "cpu": 256 << 20}
# The attention fields the inputs and the reference depend on.
VARIANT_KEY = ("head_dim", "q_heads", "kv_heads", "dtype", "mask",
               "window_left", "window_right", "scale", "softcap", "seqused_k",
               "block_table", "cu_seqlens_q")


def split_workspace_words(attention, batch, seq_q):
    """The int32 words of a split-KV kernel's workspace (the manifest's
    split_workspace_words)."""
    splits = attention["num_splits"]
    hq, hkv = attention["q_heads"], attention["kv_heads"]
    ratio = hq // hkv
    packing = min(ratio & -ratio, 16)
    tiles = batch * (hq // packing) * -(-seq_q * packing // 128)
    rows = min(128, seq_q * packing)
    dv = attention.get("v_head_dim", attention["head_dim"])
    return tiles * rows * (4 * (1 + splits) + splits * dv)


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


def key_counts(batch, seq_k, generator, device):
    """A seqused_k table: in its last batch // 2 sequences the counts 0,
    1, seq_k (and 127, 129 where seq_k passes 129), the others uniform in
    [1, seq_k] (a batch of one or two draws only those)."""
    edges = [0, 1, seq_k] + ([127, 129] if seq_k > 129 else [])
    drawn = torch.randint(1, seq_k + 1, (batch,), generator=generator,
                          device=device)
    edged = min(len(edges), batch // 2)
    counts = [int(drawn[b]) if b < batch - edged
              else min(edges[b - (batch - edged)], seq_k)
              for b in range(batch)]
    return torch.tensor(counts, dtype=torch.int32, device=device)


def sequence_lengths(batch, longest, generator, device):
    """Varlen: `batch` sequence lengths in [0, longest], the last batch // 2
    of them the edges 0, 1, 127, 128, 129 and `longest` (those not past
    it), the others uniform in [1, longest]; at least one row in all."""
    edges = [e for e in (0, 1, 127, 128, 129, longest) if e <= longest]
    edges = list(dict.fromkeys(edges))
    drawn = torch.randint(1, longest + 1, (batch,), generator=generator,
                          device=device).tolist()
    edged = min(len(edges), batch // 2)
    lengths = [drawn[b] if b < batch - edged else edges[b - (batch - edged)]
               for b in range(batch)]
    if sum(lengths) == 0:
        lengths[0] = 1
    return lengths


def varlen_inputs(batch, seq_q, seq_k, attention, randn, generator, device):
    """A varlen case: q, k, v packed [1, total, heads, head_dim], the
    reference O and LSE packed alike (each sequence's from `reference` on
    its own rows), and the extras (seqused_k's table, cu_seqlens_q,
    cu_seqlens_k)."""
    a = attention
    hd, hq, hkv = a["head_dim"], a["q_heads"], a["kv_heads"]
    dv = a.get("v_head_dim", hd)
    lengths_q = sequence_lengths(batch, seq_q, generator, device)
    lengths_k = sequence_lengths(batch, seq_k, generator, device)
    cumulative = lambda lengths: torch.tensor(
        [0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32,
        device=device)
    cu_q, cu_k = cumulative(lengths_q), cumulative(lengths_k)
    q = randn(1, sum(lengths_q), hq, hd)
    # Three K and V rows past the last sequence, no sequence's: NaN and
    # infinities, which must reach no O.
    k = randn(1, sum(lengths_k) + 3, hkv, hd)
    v = randn(1, sum(lengths_k) + 3, hkv, dv)
    k[0, sum(lengths_k):] = math.nan
    v[0, sum(lengths_k):] = math.nan
    v[0, sum(lengths_k) + 1] = math.inf
    used = None
    if a.get("seqused_k") is not None:
        used = torch.tensor([int(torch.randint(0, n + 1, (1,),
                                               generator=generator,
                                               device=device))
                             for n in lengths_k], dtype=torch.int32,
                            device=device)
    want_o = torch.empty(*q.shape[:3], dv, dtype=torch.float32, device=device)
    want_lse = torch.empty(1, hq, q.shape[1], dtype=torch.float32,
                           device=device)
    for b in range(batch):
        q0, q1 = int(cu_q[b]), int(cu_q[b + 1])
        k0, k1 = int(cu_k[b]), int(cu_k[b + 1])
        if used is not None:
            # The rows of the sequence past its count: NaN and infinities.
            count = int(used[b])
            k[0, k0 + count:k1] = math.nan
            v[0, k0 + count:k1] = math.nan
            v[0, k0 + count:k1:3] = math.inf
        if q1 == q0:
            continue
        if k1 == k0:
            want_o[0, q0:q1] = 0.0
            want_lse[0, :, q0:q1] = -math.inf
            continue
        o_b, lse_b = reference(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], a,
                               None if used is None else used[b:b + 1])
        want_o[0, q0:q1] = o_b[0]
        want_lse[0, :, q0:q1] = lse_b[0]
    extras = ([used] if used is not None else []) + [cu_q, cu_k]
    return q, k, v, want_o, want_lse, extras


def reference(q, k, v, attention, used=None):
    """O [batch, seq_q, q_heads, head_dim] and LSE [batch, q_heads, seq_q]
    in float32 (see the module's doc), one batch at a time; with `used`
    (a seqused_k table) batch b sees its first used[b] keys, its masks
    aligned to that count."""
    batch, seq_q, q_heads, _ = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    group = q_heads // kv_heads
    scale, softcap = attention["scale"], attention["softcap"]
    # O has V's head dim.
    o = torch.empty(*q.shape[:3], v.shape[3], dtype=torch.float32,
                    device=q.device)
    lse = torch.empty(batch, q_heads, seq_q, dtype=torch.float32, device=q.device)
    for b in range(batch):
        keys = seq_k if used is None else int(used[b])
        if keys == 0:
            o[b] = 0.0
            lse[b] = -math.inf
            continue
        mask = visible(seq_q, keys, attention, q.device)
        qb = q[b].float().transpose(0, 1)  # heads, seq, head_dim
        kb = k[b, :keys].float().transpose(0, 1).repeat_interleave(group, dim=0)
        vb = v[b, :keys].float().transpose(0, 1).repeat_interleave(group, dim=0)
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
            o[b, ~mask.any(dim=1)] = 0.0  # rows that see no key
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
    dv = attention.get("v_head_dim", attention.get("head_dim"))
    if entry.get("v_head_dim", entry.get("head_dim")) != dv:
        return (f"the manifest says v_head_dim = {dv!r}, the index "
                f"{entry.get('v_head_dim')!r}")
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


def case_seed(seed, attention, shape):
    """The generator's seed of a case: from --seed, the variant and the
    shape only."""
    # (seqused_k only where the kernel has it: the other cases keep the
    # inputs of the runs before it was a key.)
    key = [attention.get(k) for k in VARIANT_KEY
           if k not in ("seqused_k", "block_table") or
           attention.get(k) is not None]
    text = json.dumps([seed, key, list(shape)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


class Runner:
    """Loads the kernels and runs the cases, in the process that holds the
    device: a worker's, or check.py's own with --timeout 0."""

    def __init__(self, config):
        self.capi = load_capi()
        self.device = torch.device(config["device"])
        if self.device.type == "cuda":
            torch.cuda.init()
        # The reference in true float32: no TF32 in its matmuls.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.info = device_info(self.device)
        self.kernels = config["kernels"]
        self.library = config["library"]
        self.target = config["target"]
        self.seed = config["seed"]
        self.cache_bytes = CACHE_BYTES[self.device.type]
        self.cache = collections.OrderedDict()  # (variant, shape) -> tensors
        self.cached = 0
        self.kernel = self.attention = None

    def load(self, entry):
        """(the manifest's attention or None, why the kernel cannot run or
        None)."""
        if self.kernel is not None:
            self.kernel.close()
        self.kernel = self.attention = None
        try:
            kernel = self.capi.load_kernel(
                os.path.join(self.kernels, entry["manifest"]), library=self.library)
            attention = variant_of(kernel.manifest)
            disagreement = index_disagreement(entry, attention, self.target)
        except (self.capi.LoadError, KeyError, ValueError) as e:
            return None, f"cannot load: {e}"
        if disagreement:
            kernel.close()
            return attention, disagreement
        self.kernel, self.attention = kernel, attention
        return attention, None

    def inputs(self, shape):
        """q, k, v, and the reference O and LSE of the loaded kernel's
        variant at `shape`, from the cache or made now."""
        # The page size shapes the paged cache, not the values (the seed
        # leaves it out), so kernels of one variant with different pages
        # share no cache entry.
        key = (tuple(self.attention.get(k) for k in VARIANT_KEY),
               self.attention.get("v_head_dim"),
               self.attention.get("page_size"), shape)
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        batch, seq_q, seq_k = shape
        a = self.attention
        dtype = TORCH_DTYPES[a["dtype"]]
        hd, hq, hkv = a["head_dim"], a["q_heads"], a["kv_heads"]
        dv = a.get("v_head_dim", hd)
        generator = torch.Generator(device=self.device).manual_seed(
            case_seed(self.seed, a, shape))

        def randn(*size):
            return torch.randn(*size, generator=generator, device=self.device).to(dtype)

        if a.get("cu_seqlens_q") is not None:
            q, k, v, want_o, want_lse, extras = varlen_inputs(
                batch, seq_q, seq_k, a, randn, generator, self.device)
            return self.keep(key, (q, k, v, want_o, want_lse) + tuple(extras))
        q, k, v = randn(batch, seq_q, hq, hd), randn(batch, seq_k, hkv, hd), \
            randn(batch, seq_k, hkv, dv)
        used = (key_counts(batch, seq_k, generator, self.device)
                if a.get("seqused_k") is not None else None)
        if used is not None:
            # The rows past each count are memory the kernel must not let
            # reach O (a cache's unfilled rows): NaN and infinities here.
            for b, count in enumerate(used.tolist()):
                k[b, count:] = math.nan
                v[b, count:] = math.nan
                v[b, count::3] = math.inf
        want_o, want_lse = reference(q, k, v, a, used)
        extras = [used] if used is not None else []
        if a.get("block_table") is not None:
            # The kernel reads K and V as a paged cache: the sequences'
            # pages in a random order among two spare blocks.
            page = a["page_size"]
            blocks = seq_k // page
            order = torch.randperm(batch * blocks + 2, generator=generator,
                                   device=self.device)[:batch * blocks]
            table = order.reshape(batch, blocks).to(torch.int32)
            k_cache = torch.zeros(batch * blocks + 2, page, hkv, hd,
                                  dtype=dtype, device=self.device)
            v_cache = torch.zeros(batch * blocks + 2, page, hkv, dv,
                                  dtype=dtype, device=self.device)
            k_cache[order] = k.reshape(batch * blocks, page, hkv, hd)
            v_cache[order] = v.reshape(batch * blocks, page, hkv, dv)
            k, v = k_cache, v_cache
            extras.append(table)
        return self.keep(key, (q, k, v, want_o, want_lse) + tuple(extras))

    def keep(self, key, tensors):
        """`tensors` (a case's inputs and reference), cached under `key`
        while memory allows."""
        size = sum(t.numel() * t.element_size() for t in tensors)
        while self.cache and self.cached + size > self.cache_bytes:
            _, dropped = self.cache.popitem(last=False)
            self.cached -= sum(t.numel() * t.element_size() for t in dropped)
        if size <= self.cache_bytes:
            self.cache[key] = tensors
            self.cached += size
        return tensors

    def run(self, shape, launching):
        """Runs the loaded kernel at `shape`, calling `launching()` just
        before the launch: (max_abs_o, max_abs_lse, why it failed or None,
        whether the CUDA context is lost)."""
        try:
            q, k, v, want_o, want_lse, *used = self.inputs(shape)
        except Exception as e:  # e.g. out of memory: not the kernel's fault
            return None, None, f"check.py: the inputs or the reference: " \
                               f"{type(e).__name__}: {e}", False
        tolerance = TOLERANCE[self.attention["dtype"]]
        batch, seq_q = q.shape[0], q.shape[1]
        o = torch.full((*q.shape[:3], v.shape[3]), math.nan, dtype=q.dtype,
                       device=self.device)
        lse = (torch.full((batch, self.attention["q_heads"], seq_q), math.nan,
                          device=self.device)
               if self.attention["lse"] else None)
        a = self.attention
        if a.get("num_splits", 1) > 1:
            # Split-KV: a zeroed workspace of the manifest's words.
            used = used + [torch.zeros(split_workspace_words(a, batch, seq_q),
                                       dtype=torch.int32, device=self.device)]
        launching()
        try:
            self.kernel(q, k, v, o, lse, extras=used)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except (self.capi.LaunchError, ValueError, TypeError) as e:
            return None, None, f"launch: {e}", False
        except RuntimeError as e:  # the kernel faulted: the context is gone
            return None, None, f"CUDA: {e}", True
        error_o, error_lse, why = compare(o, lse, want_o, want_lse)
        if why is None and (error_o > tolerance or
                            (error_lse is not None and error_lse > tolerance)):
            why = f"error above {tolerance}"
        return error_o, error_lse, why, False


def handle(runner, message, send):
    """Does what `message` asks of `runner`, answering through `send`:
    ("load", index entry) -> ("loaded", attention, why not);
    ("case", shape) -> ("launching",) then ("result", max_abs_o,
    max_abs_lse, why, context lost)."""
    if message[0] == "load":
        send(("loaded",) + runner.load(message[1]))
    elif message[0] == "case":
        send(("result",) + runner.run(tuple(message[1]),
                                      lambda: send(("launching",))))
    else:
        raise ValueError(f"unknown request {message[0]!r}")


def _die_with_parent():
    """Linux: SIGKILL this process when its parent dies (so that a worker
    left in a hung launch does not outlive check.py)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_main(conn, config):
    """A worker process: a Runner serving the parent's requests."""
    _die_with_parent()
    try:
        runner = Runner(config)
    except Exception as e:
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", runner.info))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        handle(runner, message, conn.send)


class TimedOut(Exception):
    pass


class Died(Exception):
    pass


class Fatal(Exception):
    """The run cannot go on (no worker starts, or the context is lost in
    this process)."""


class Worker:
    """A worker process (multiprocessing, spawn: a fresh interpreter, no
    CUDA state of this one's) and the pipe to it."""

    def __init__(self, config):
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=worker_main, args=(child, config),
                                       name="fa4-check-worker", daemon=True)
        self.process.start()
        child.close()
        self.info = None
        self.loaded = None

    def start(self):
        """Waits for the worker to be ready; its device_info."""
        if self.info is None:
            message = self.receive(START_LIMIT, "its start")
            if message[0] != "ready":
                raise Died(f"the worker could not start: {message[1]}")
            self.info = message[1]
        return self.info

    def send(self, message):
        try:
            self.conn.send(message)
        except (OSError, ValueError) as e:
            raise Died(f"the worker is gone ({self.exit_text()}): {e}")

    def receive(self, limit, doing):
        if not self.conn.poll(limit):
            raise TimedOut(f"timed out: {doing} did not end within {limit:g} s")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise Died(f"the worker died ({self.exit_text()}) during {doing}")

    def exit_text(self):
        self.process.join(5)
        code = self.process.exitcode
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    def stop(self, kill):
        """Ends the worker: asks it to, or kills it (a hung launch)."""
        if not kill:
            try:
                self.conn.send(("stop",))
                self.process.join(10)
            except (OSError, ValueError):
                pass
        if self.process.is_alive():
            self.process.kill()
            self.process.join(30)
        self.conn.close()


class Workers:
    """The worker cases run in now, replaced when it hangs, dies or loses
    its context; from the first replacement on, a spare is kept started."""

    def __init__(self, config):
        self.config = config
        self.current = self.spare = None
        self.started = 0
        self.replaced = 0

    def get(self):
        if self.current is None:
            # The spare if there is one, else (or when it failed) a new one.
            for attempt in range(2):
                worker, self.spare = self.spare or Worker(self.config), None
                try:
                    worker.start()
                    break
                except (TimedOut, Died) as e:
                    worker.stop(kill=True)
                    if attempt:
                        raise Fatal(str(e))
            self.current = worker
            if self.started:
                self.spare = Worker(self.config)
            self.started += 1
        return self.current

    def discard(self):
        if self.current is not None:
            self.current.stop(kill=True)
            self.current = None
            self.replaced += 1

    def close(self, kill=False):
        for worker in (self.current, self.spare):
            if worker is not None:
                worker.stop(kill)
        self.current = self.spare = None


class InProcess:
    """--timeout 0: a Runner in this process, behind the Worker's
    interface, with no time limits."""

    def __init__(self, config):
        self.runner = Runner(config)
        self.info = self.runner.info
        self.loaded = None
        self.answers = collections.deque()
        self.lost = False

    def start(self):
        return self.info

    def send(self, message):
        handle(self.runner, message, self.answers.append)

    def receive(self, limit, doing):
        return self.answers.popleft()


class InProcessWorkers:
    def __init__(self, config):
        self.worker = InProcess(config)
        self.replaced = 0

    def get(self):
        if self.worker.lost:
            raise Fatal("the CUDA context is lost after a failed launch "
                        "(without --timeout 0 the run goes on in a new process)")
        return self.worker

    def discard(self):
        self.worker.lost = True

    def close(self, kill=False):
        pass


def shape_text(shape):
    return " x ".join(map(str, shape))


def main():
    parser = argparse.ArgumentParser(
        description="fa4's kernels against torch's SDPA in float32 (O and LSE)")
    parser.add_argument("kernels", help="directory of the kernels and index.json")
    parser.add_argument("--index", help="the index (default: KERNELS/index.json)")
    parser.add_argument("--lib", help="libfa4rt.so (default: KERNELS/libfa4rt.so, "
                                      "else $FA4RT_LIBRARY)")
    parser.add_argument("--out", help="write the results here as JSON (also "
                                      "after every kernel)")
    parser.add_argument("--only", help="only kernels whose name matches this regex")
    parser.add_argument("--shapes", type=parse_shapes, default=list(SHAPES),
                        help="BATCHxSEQ_QxSEQ_K,... (default: "
                             + ",".join("x".join(map(str, s)) for s in SHAPES) + ")")
    parser.add_argument("--device", default="cuda",
                        help="cuda (default) or cpu (fa4-emu: Blackwell or Hopper "
                             "kernels, small shapes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float,
                        help="seconds a launch may take before it is a hang and "
                             "its worker is killed (default: 10 on a GPU, 600 on "
                             "the CPU); 0: run in this process, no limit")
    parser.add_argument("--hangs-per-kernel", type=int, default=1,
                        help="skip a kernel's remaining shapes after this many "
                             "hangs (default 1; 0: never skip)")
    parser.add_argument("--deadline", type=float, default=0,
                        help="start no case after this many seconds; the rest "
                             "are skipped (default 0: none)")
    args = parser.parse_args()

    device = torch.device(args.device)
    timeout = (DEFAULT_TIMEOUT.get(device.type, 600.0) if args.timeout is None
               else args.timeout)
    index_path = args.index or os.path.join(args.kernels, "index.json")
    with open(index_path) as f:
        index = json.load(f)
    library = args.lib
    if library is None and os.path.exists(os.path.join(args.kernels, "libfa4rt.so")):
        library = os.path.abspath(os.path.join(args.kernels, "libfa4rt.so"))
    entries = [e for e in index["kernels"] if e["use"] == "check"
               and (not args.only or re.search(args.only, e["name"]))]
    config = dict(device=args.device, kernels=os.path.abspath(args.kernels),
                  library=library, target=index.get("target"), seed=args.seed)

    started = time.time()
    results = []
    state = dict(stopped=None, info={"device": args.device}, written=started)
    # SIGTERM (a time limit) ends the run as an interrupt does: the workers
    # killed, the JSON written.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def counts():
        passed = sum(r["status"] == "ok" for r in results)
        failed = sum(r["status"] == "FAIL" for r in results)
        return passed, failed, len(results) - passed - failed

    def write_out(final=True):
        """The JSON; while the run goes on (final=False) at most every 10 s,
        unindented, so that a run killed midway leaves its results."""
        if not args.out or (not final and time.time() - state["written"] < 10):
            return
        state["written"] = time.time()
        passed, failed, skipped = counts()
        temporary = args.out + ".partial"
        with open(temporary, "w") as f:
            json.dump({
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"),
                "device": state["info"],
                "index": {k: index.get(k) for k in ("target", "sm_count", "compiled",
                                                    "commit", "fa4_flags")},
                "reference": "torch SDPA (O) and logsumexp (LSE) in float32, "
                             "bottom-right aligned masks; rows that see no key: "
                             "O = 0, LSE = -inf",
                "shapes": [list(s) for s in args.shapes],
                "timeout_s": timeout,
                "seconds": round(time.time() - started, 1),
                "stopped_early": state["stopped"] is not None,
                "stopped_why": state["stopped"],
                "passed": passed, "failed": failed, "skipped": skipped,
                "timed_out": sum(bool(r.get("timed_out")) for r in results),
                "results": results,
            }, f, indent=1 if final else None)
        os.replace(temporary, args.out)

    workers = (InProcessWorkers if timeout <= 0 else Workers)(config)
    interrupted = False
    try:
        try:
            state["info"] = workers.get().start()
        except Fatal as e:
            state["stopped"] = f"cannot start: {e}"
            print(f"fa4 check: {state['stopped']}", flush=True)
        info = state["info"]
        width = max([38] + [len(e["name"]) for e in entries])
        print(f"fa4 check: {len(entries)} kernels x {len(args.shapes)} shapes on "
              f"{info.get('gpu', device.type)}; index {index.get('target')} "
              f"compiled {index.get('compiled')} at {index.get('commit')}; "
              + (f"a launch times out after {timeout:g} s" if timeout > 0
                 else "in this process, no timeout"))
        header = (f"{'kernel':<{width}} {'batch x seq_q x seq_k':>21} "
                  f"{'max|dO|':>9} {'max|dLSE|':>9}  status")
        print(header)
        print("-" * len(header), flush=True)

        def number_text(x):
            return "-" if x is None else f"{x:.2e}"

        def record(entry, attention, shape, status, why, error_o=None,
                   error_lse=None, timed_out=False, show=True):
            result = dict(kernel=entry["name"], schedule=entry.get("schedule", "auto"),
                          variant=attention)
            if shape is not None:
                result.update(batch=shape[0], seq_q=shape[1], seq_k=shape[2])
                if attention:
                    result["tolerance"] = TOLERANCE[attention["dtype"]]
                result.update(max_abs_o=error_o, max_abs_lse=error_lse)
            result.update(status=status, error=why)
            if timed_out:
                result["timed_out"] = True
            results.append(result)
            if show:
                print(f"{entry['name']:<{width}} "
                      f"{'' if shape is None else shape_text(shape):>21} "
                      f"{number_text(error_o):>9} {number_text(error_lse):>9}  "
                      f"{status}{'' if why is None else ' ' + why}", flush=True)

        for entry in entries:
            attention, hung_at = None, []
            # A paged cache's seq_k is whole pages: each shape's rounded up.
            page = entry.get("page_size") or 0
            shapes = [(b, sq, -(-sk // page) * page) if page else (b, sq, sk)
                      for b, sq, sk in args.shapes]
            for shape in shapes:
                if state["stopped"] is None and args.deadline and \
                        time.time() - started > args.deadline:
                    state["stopped"] = f"past the --deadline of {args.deadline:g} s"
                    print(f"fa4 check: {state['stopped']}: the remaining cases are "
                          f"skipped", flush=True)
                if state["stopped"] is not None:
                    record(entry, attention, shape, "SKIP",
                           f"not run: {state['stopped']}", show=False)
                    continue
                if args.hangs_per_kernel and len(hung_at) >= args.hangs_per_kernel:
                    record(entry, attention, shape, "SKIP",
                           "not run: the kernel hung at " +
                           ", ".join(map(shape_text, hung_at)))
                    continue
                try:
                    worker = workers.get()
                except Fatal as e:
                    state["stopped"] = str(e)
                    print(f"fa4 check: stopped: {e}", flush=True)
                    record(entry, attention, shape, "SKIP", f"not run: {e}",
                           show=False)
                    continue
                if worker.loaded != entry["name"]:
                    try:
                        worker.send(("load", entry))
                        _, attention, why = worker.receive(LOAD_LIMIT, "the kernel's load")
                    except (TimedOut, Died) as e:
                        attention, why = None, f"cannot load: {e}"
                        workers.discard()
                    if why is not None:  # the kernel's other shapes too
                        record(entry, attention, None, "FAIL", why)
                        break
                    worker.loaded = entry["name"]
                doing = "the inputs and the reference"
                try:
                    worker.send(("case", shape))
                    answer = worker.receive(PREPARE_LIMIT, doing)
                    if answer[0] == "launching":
                        doing = "the launch"
                        answer = worker.receive(timeout, doing)
                except TimedOut as e:
                    workers.discard()
                    hang = doing == "the launch"
                    if hang:
                        hung_at.append(shape)
                    record(entry, attention, shape, "FAIL",
                           f"{e}{' (a hang)' if hang else ''}; the worker was killed",
                           timed_out=hang)
                    continue
                except Died as e:
                    workers.discard()
                    record(entry, attention, shape, "FAIL", f"{e}")
                    continue
                _, error_o, error_lse, why, lost = answer
                if lost:
                    workers.discard()
                record(entry, attention, shape, "ok" if why is None else "FAIL",
                       why, error_o, error_lse)
            write_out(final=False)
    except KeyboardInterrupt:
        state["stopped"], interrupted = "interrupted", True
    except SystemExit:
        state["stopped"], interrupted = "terminated (SIGTERM)", True
    finally:
        workers.close(kill=interrupted)

    passed, failed, skipped = counts()
    timed_out = sum(bool(r.get("timed_out")) for r in results)
    print(f"fa4 check: {passed} passed, {failed} failed ({timed_out} timed out), "
          f"{skipped} skipped in {time.time() - started:.0f} s"
          + (f"; workers replaced: {workers.replaced}" if workers.replaced else "")
          + (f"; stopped: {state['stopped']}" if state["stopped"] else ""))
    failures = [r for r in results if r["status"] == "FAIL"]
    if failures:
        print("fa4 check: the failures:")
        for r in failures[:60]:
            where = (shape_text((r["batch"], r["seq_q"], r["seq_k"]))
                     if "batch" in r else "(every shape)")
            print(f"  {r['kernel']} {where}: {r['error']}")
        if len(failures) > 60:
            print(f"  ... and {len(failures) - 60} more (in the JSON)")
    write_out()
    return 1 if failed or skipped or state["stopped"] else 0


if __name__ == "__main__":
    sys.exit(main())
