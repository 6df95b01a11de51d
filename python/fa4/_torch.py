"""fa4.attention as a torch custom op (``torch.ops.fa4.attention``).

The op takes the variant as plain arguments and returns (O, LSE), the LSE
empty when it is not asked for; its fake implementation gives the shapes, so
``torch.compile`` traces through it without running a kernel. Both
implementations validate their arguments with the same function,
``_validate``, so a call the real op refuses is refused while tracing too.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import List, Optional, Sequence, Tuple

import torch

from . import (LaunchError, _BACKWARD_CHIPS, _BACKWARD_HEAD_DIMS, _capi,
               _fa4, _flag, _integer, _real, _variant,
               _split_counter_words, _window_pair, compile, compile_backward,
               split_workspace_words)
from ._fp8 import prepare_fp8_value

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
# FP8 inputs (fa4::attention_fp8); O is bf16, FlashAttention-3's.
_FP8 = getattr(torch, "float8_e4m3fn", None)
_FP8_DTYPES = {_FP8: "e4m3"} if _FP8 is not None else {}


def is_fp8(t):
    """Whether `t` is a tensor of FP8 (e4m3) inputs."""
    return isinstance(t, torch.Tensor) and _FP8 is not None and t.dtype == _FP8


def _check_tensors(q, k, v, paged=False, dtypes=_DTYPES):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.is_nested:
            raise ValueError(f"{name} is a nested tensor; fa4 takes dense "
                             "(strided) tensors")
        if t.layout != torch.strided:
            raise ValueError(f"{name}: layout {t.layout}; fa4 takes dense "
                             "(strided) tensors")
        if t.dim() != 4:
            raise ValueError(f"{name} must be (batch, seq, heads, head_dim), "
                             f"got shape {tuple(t.shape)}")
    if q.dtype not in dtypes:
        if dtypes is not _DTYPES:
            taken = "fa4 takes float8_e4m3fn q, k and v for FP8 attention"
        elif q.dtype in _FP8_DTYPES:
            # FP8 reached an entry that does not take it (a 16-bit op
            # called directly): say where FP8 goes instead.
            taken = ("this entry takes float16 or bfloat16: FP8 q, k and v "
                     "go through fa4.attention, fa4.attention_varlen or "
                     "fa4.attention_with_kvcache (docs/FP8.md)")
        else:
            taken = ("fa4 takes float16 or bfloat16 (or float8_e4m3fn q, k "
                     "and v for FP8 attention)")
        raise ValueError(f"q: dtype {q.dtype}; {taken}")
    if q.device.type not in ("cpu", "cuda", "meta"):
        raise ValueError(f"q: on {q.device}; fa4 runs CUDA tensors on the GPU "
                         "and CPU tensors in the emulator")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name}: dtype {t.dtype}, q is {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, q is on {q.device}")
    # V may have a head dim of its own (DeepSeek-V3's (192, 128)); O has
    # V's.
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ "
                         "(but for the head dim, which may)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if isinstance(t.shape[3], int) and t.shape[3] < 1:
            raise ValueError(f"{name}: head dim {t.shape[3]}; it must be "
                             "positive")
    if (not paged and q.shape[0] != k.shape[0]) or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree "
                         "on batch or head_dim")


@functools.lru_cache(maxsize=256)
def _check_variant(*variant):
    """The verifier's answer on a variant (fa4.CompileError when it refuses),
    without compiling it."""
    _fa4.check_variant(*variant)


def _needs_grad(q, k, v, grad_mode=None):
    grad_mode = torch.is_grad_enabled() if grad_mode is None else grad_mode
    return grad_mode and any(t.requires_grad for t in (q, k, v))


def _check_grad(q, k, v, grad_mode=None, what="this fa4 call"):
    if _needs_grad(q, k, v, grad_mode):
        raise NotImplementedError(
            f"{what} has no backward yet, and q, k or v requires grad: "
            "call it under torch.no_grad() (or torch.inference_mode()) or on "
            "detached tensors")


def _check_table(name, table, q, shape_text, rank):
    """A table the kernel reads (seqused_k, block_table): a dense int32
    tensor of `rank` dimensions, the first q's batch, on q's device. Its
    values are the kernel's to bound (reading them here would wait for the
    GPU)."""
    if table is None:
        return
    if not isinstance(table, torch.Tensor):
        raise TypeError(f"{name} must be None or a torch.Tensor, got "
                        f"{type(table).__name__}")
    if table.is_nested or table.layout != torch.strided:
        raise ValueError(f"{name} must be a dense (strided) tensor")
    if table.dtype != torch.int32:
        raise ValueError(f"{name}: dtype {table.dtype}; it must be torch.int32")
    if table.dim() != rank or table.shape[0] != q.shape[0] or \
            (rank == 2 and table.shape[1] < 1):
        raise ValueError(f"{name} must be {shape_text}, got shape "
                         f"{tuple(table.shape)}")
    if table.device != q.device:
        raise ValueError(f"{name}: on {table.device}, q is on {q.device}")


def _check_seqused_k(q, seqused_k):
    """A seqused_k table: (batch,) int32 on q's device."""
    _check_table("seqused_k", seqused_k, q, f"(batch,) = ({q.shape[0]},)", 1)


def _check_block_table(q, k, block_table):
    """A block table, (batch, max_blocks) int32 on q's device, and K and V
    a paged cache whose page size is a power of two of at least 16."""
    if block_table is None:
        return
    _check_table("block_table", block_table, q,
                 f"(batch, max_blocks) = ({q.shape[0]}, >= 1)", 2)
    if k.shape[0] == 0:
        raise ValueError(f"k_cache {tuple(k.shape)}: a paged cache needs at "
                         "least one block")
    page = k.shape[1]
    if page < 16 or page & (page - 1):
        raise ValueError(f"k_cache {tuple(k.shape)}: a paged cache's page size "
                         f"(dimension 1) must be a power of two of at least "
                         f"16, got {page}")


# What _validate accepted, by what it judged (a call without tables, on
# plain tensors and scalars of the exact types it takes): a training step
# validates each variant twice, and the checks are host time the GPU may
# wait for. Bounded; cleared when full.
_validated = {}
_VALIDATED_MAX = 256


def _validate(q, k, v, causal, window_left, window_right, softcap, scale,
              return_lse, seqused_k=None, block_table=None, num_splits=1):
    """Everything the op checks before it compiles or runs: the tensors, the
    scalars, and the variant (through the verifier). Returns the compile()
    arguments of the variant. Shared by the real op and its fake, and
    raising only ValueError, TypeError or fa4.CompileError."""
    key = None
    if (seqused_k is None and block_table is None and
            type(q) is torch.Tensor and type(k) is torch.Tensor and
            type(v) is torch.Tensor and type(causal) is bool and
            type(return_lse) is bool and type(num_splits) is int and
            type(window_left) is int and type(window_right) is int and
            type(softcap) is float and (scale is None or type(scale) is float)
            and not (q.is_nested or k.is_nested or v.is_nested)):
        # (A nested tensor has no sizes to key on: _validate_new refuses it.)
        key = (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device,
               k.device, v.device, q.layout, k.layout, v.layout, causal, window_left, window_right,
               softcap, scale, return_lse, num_splits)
        variant = _validated.get(key)
        if variant is not None:
            return dict(variant)
    variant = _validate_new(q, k, v, causal, window_left, window_right,
                            softcap, scale, return_lse, seqused_k, block_table,
                            num_splits)
    if key is not None:
        if len(_validated) >= _VALIDATED_MAX:
            _validated.clear()
        _validated[key] = dict(variant)
    return variant


def _checked_variant(q, k, v, dtype, causal, window_left, window_right,
                     softcap, scale, return_lse):
    """The flags and scalars checked, the variant's compile() arguments
    made and held to the verifier's rules (_check_variant); with the mask
    and window. Shared by the 16-bit and the FP8 validations."""
    for name, flag in (("causal", causal), ("return_lse", return_lse)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {flag!r}")
    mask, left, right = _variant("causal" if causal else "none",
                                 (window_left, window_right))
    softcap = _real("softcap", softcap)
    scale = None if scale is None else _real("scale", scale)
    variant = dict(head_dim=int(q.shape[3]), q_heads=int(q.shape[2]),
                   kv_heads=int(k.shape[2]), mask=mask,
                   window=None if mask != "window" else (left, right),
                   dtype=dtype, lse=return_lse, softcap=softcap or None,
                   scale=scale)
    # (Named only when it differs: the variants of one head dim keep their
    # compile() arguments and their backward.)
    if v.shape[3] != q.shape[3]:
        variant["v_head_dim"] = int(v.shape[3])
    _check_variant(variant["head_dim"], variant["q_heads"], variant["kv_heads"],
                   mask, left, right, dtype, return_lse, scale, softcap,
                   int(v.shape[3]))
    return variant


def _validate_new(q, k, v, causal, window_left, window_right, softcap, scale,
                  return_lse, seqused_k, block_table, num_splits):
    """_validate's checks, done."""
    _check_tensors(q, k, v, paged=block_table is not None)
    _check_seqused_k(q, seqused_k)
    _check_block_table(q, k, block_table)
    if (isinstance(num_splits, bool) or not isinstance(num_splits, int) or
            not 0 <= num_splits <= 128):
        raise ValueError(f"num_splits must be an int in [0, 128], got "
                         f"{num_splits!r}")
    variant = _checked_variant(q, k, v, _DTYPES[q.dtype], causal, window_left,
                               window_right, softcap, scale, return_lse)
    # The runtime's size limits where the sizes are known (not symbolic),
    # an empty problem's other sizes included (its O is allocated too).
    sizes = (q.shape[0], q.shape[1],
             k.shape[1] if block_table is None
             else block_table.shape[1] * k.shape[1])
    if block_table is not None:
        variant["page_size"] = int(k.shape[1])
    if all(isinstance(size, int) for size in sizes):
        _fa4.check_shapes(variant["head_dim"], variant["q_heads"],
                          variant["kv_heads"], *(max(size, 1) for size in sizes),
                          v_head_dim=int(v.shape[3]))
    return variant


# Whether a tensor map can describe a view, by (sizes, strides, dtype): its
# start's alignment aside.
_tma_layouts = {}


def _tma_ready(name, t):
    """`t` itself when a tensor map can describe it (head_dim contiguous,
    the other strides multiples of 16 bytes, a 16-byte aligned start), so
    that e.g. a (batch, heads, seq, head_dim) tensor seen through
    ``transpose(1, 2)`` is read in place; else a contiguous copy (a fresh
    allocation, aligned, even when `t` is contiguous already)."""
    sizes, strides = t.shape, t.stride()
    key = (sizes, strides, t.dtype)
    ok = _tma_layouts.get(key)
    if ok is None:
        ok = sizes[-1] == 1 or strides[-1] == 1
        for size, stride in zip(sizes[:-1], strides[:-1]):
            ok = ok and (size == 1 or
                         (stride > 0 and stride * t.element_size() % 16 == 0))
        if len(_tma_layouts) >= _VALIDATED_MAX:
            _tma_layouts.clear()
        _tma_layouts[key] = ok
    if ok and t.data_ptr() % 16 == 0:
        return t
    # A broadcast input within the size limits can still be larger than
    # memory once its elements are written out.
    return _allocate(f"{name}: its strides {tuple(strides)} need a contiguous "
                     "copy for TMA", t.numel() * t.element_size(),
                     lambda: t.clone(memory_format=torch.contiguous_format))


def _allocate(what, nbytes, make):
    """`make()`, or a LaunchError saying `what` needed `nbytes` bytes that
    could not be allocated (torch's own error is a bare RuntimeError)."""
    try:
        return make()
    except (RuntimeError, MemoryError) as e:
        raise LaunchError(f"{what}, {nbytes} bytes, which could not be "
                          f"allocated ({e})") from None


def _available_host_bytes():
    """The kernel's estimate of memory available for new allocations
    (/proc/meminfo's MemAvailable), or None where there is none."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _check_host_memory(q, k, v, return_lse):
    """A CPU launch writes every input out densely (a broadcast input in
    full: its copy for TMA, then the emulator's) and O and the LSE twice:
    refused up front, with a LaunchError, when that is more than the machine
    has available, rather than left to the kernel's out-of-memory killer
    (allocations succeed under overcommit and fail only when touched)."""
    batch, seq_q, q_heads, _ = q.shape
    needed = 2 * sum(t.numel() * t.element_size() for t in (q, k, v, q))
    if return_lse:
        needed += 2 * batch * q_heads * seq_q * 4
    available = _available_host_bytes()
    if available is not None and needed > available:
        raise LaunchError(f"a CPU launch of this problem needs about {needed} "
                          f"bytes of host memory for its copies, more than the "
                          f"{available} available")


def _check_backward_host_memory(q, k):
    """_check_host_memory for a CPU backward: its 11 tensors (q, o, dout,
    dq like q; k, v, dk, dv like k; the f32 LSE, delta and dQ accumulator)
    each held twice or three times over (the caller's, the emulator's copy,
    the written ones read back)."""
    q_bytes = q.numel() * q.element_size()
    k_bytes = k.numel() * k.element_size()
    rows = q.shape[0] * q.shape[1] * q.shape[2] * 4
    needed = (3 * (4 * q_bytes + 4 * k_bytes) + 3 * 2 * rows +
              3 * q.numel() * 4)
    available = _available_host_bytes()
    if available is not None and needed > available:
        raise LaunchError(f"a CPU backward of this problem needs about "
                          f"{needed} bytes of host memory for its copies, "
                          f"more than the {available} available")


# The targets fa4 has a schedule for, by compute capability (the chip table).
_TARGETS = {tuple(chip["compute_capability"]): chip["name"] for chip in _fa4.chips()}


def _target(device):
    """The target and the persistent grid's size for tensors on `device`:
    the GPU's own (by its compute capability, with its SM count), or the
    default chip for CPU tensors, which run in fa4-emu (which runs every
    chip's kernels: `fa4.compile(target=...)` on CPU tensors)."""
    if device.type != "cuda":
        return _fa4.chips()[0]["name"], 0
    index = device.index if device.index is not None else torch.cuda.current_device()
    known = _device_targets.get(index)
    if known is None:
        known = _device_targets.setdefault(index, _device_target(device))
    return known


# The target and SM count of each CUDA device by its index (a device does
# not change while the process runs).
_device_targets = {}


def _device_target(device):
    """_target of a CUDA device, read from torch's device properties."""
    capability = tuple(torch.cuda.get_device_capability(device))
    target = _TARGETS.get(capability)
    if target is None:
        name = torch.cuda.get_device_name(device)
        known = ", ".join(
            f"{chip['name']} ({chip['family']}, compute capability "
            f"{chip['compute_capability'][0]}.{chip['compute_capability'][1]})"
            for chip in _fa4.chips())
        raise LaunchError(
            f"{name} is sm_{capability[0]}{capability[1]}; fa4 compiles for "
            f"{known}")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return target, int(sms)


def _out_shape(q, v):
    """O's shape: q's, with v's head dim."""
    return (*q.shape[:3], v.shape[3])


def _empty_results(q, v, return_lse, o_dtype=None):
    """O and the LSE of a problem with no query or no key: rows that see no
    key are O = 0 and LSE = -inf (fa4's convention); nothing to compile.
    O is in `o_dtype` (None: q's)."""
    batch, seq_q, q_heads, _ = q.shape
    shape = _out_shape(q, v)
    dtype = o_dtype or q.dtype
    o = _allocate("o", batch * seq_q * q_heads * shape[3] * dtype.itemsize,
                  lambda: q.new_zeros(shape, dtype=dtype))
    lse = (_allocate("lse", batch * q_heads * seq_q * 4,
                     lambda: torch.full((batch, q_heads, seq_q), float("-inf"),
                                        dtype=torch.float32, device=q.device))
           if return_lse
           else torch.empty((0,), dtype=torch.float32, device=q.device))
    return o, lse


def _choose_splits(tasks, blocks, sm_count):
    """Split-KV's parts for `tasks` tasks of `blocks` KV blocks each on
    `sm_count` SMs: none when the tasks fill the GPU (or in the emulator,
    sm_count 0); else the fewest parts whose waves of tasks come within 85 %
    of the best wave efficiency, over the part counts that each give their
    parts fewer blocks than one part less would (a count that only adds
    empty parts is no choice), 1 to min(blocks, 128): FlashAttention's
    heuristic's rule."""
    if sm_count <= 0 or blocks < 2 or tasks >= 0.8 * sm_count:
        return 1
    def efficiency(splits):
        waves = tasks * splits / sm_count
        return waves / math.ceil(waves)
    candidates = [s for s in range(1, min(blocks, 128) + 1)
                  if s == 1 or -(-blocks // s) != -(-blocks // (s - 1))]
    best = max(efficiency(s) for s in candidates)
    return next(s for s in candidates if efficiency(s) >= 0.85 * best)


# Blackwell's chips, whose tasks are two 128-row Q tiles up to head dim
# 192 and one past it (Hopper's: one).
_BLACKWELL = {chip["name"] for chip in _fa4.chips()
              if chip["family"] == "Blackwell"}


def _task_rows(target, head_dim, v_head_dim):
    """Rows of a task, as fa4-tile's default cuts them at these head dims
    (the C++ rule is ScheduleConfig::qTilesFor; a guess here only steers
    the split count, and the manifest's rows_per_task is what launches)."""
    two_tiles = target in _BLACKWELL and max(head_dim, v_head_dim) <= 192
    return 256 if two_tiles else 128


# Split-KV workspaces, per (device, stream): the kernel leaves its counters
# zero, so one zeroed workspace serves every launch that stream orders.
_workspaces = {}
_workspaces_lock = threading.Lock()


def _split_workspace(device, words, counters):
    """An int32 workspace of at least `words` words whose first `counters`
    words (the launch's arrival counters) are zero for a launch on the
    current stream: the stream's own (grown as needed), or, while a CUDA
    graph is being captured, one of the graph's.

    A launch leaves its own counters zero but the parts' data right after
    them, so the zero prefix of the stream's workspace is the last launch's
    counters: a launch with more counters (more tiles or rows) zeroes the
    rest of its own first, in stream order."""
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if capturing:
        return torch.zeros(words, dtype=torch.int32, device=device)
    stream = (torch.cuda.current_stream(device).cuda_stream
              if device.type == "cuda" else 0)
    key = (str(device), stream)
    with _workspaces_lock:
        entry = _workspaces.get(key)
        if entry is None or entry[0].numel() < words:
            workspace = _allocate("the split-KV workspace", words * 4,
                                  lambda: torch.zeros(words, dtype=torch.int32,
                                                      device=device))
            entry = [workspace, words]
            _workspaces[key] = entry
        workspace, zero = entry
        if counters > zero:
            workspace[zero:counters].zero_()
        entry[1] = counters
    return workspace


def _launch(kernel, q, k, v, return_lse, extras, o_shape=None, o_dtype=None):
    """O and the LSE (empty without `return_lse`) of `kernel` on q, k, v
    (batch, seq, heads, head_dim) and `extras`, allocated here: on q's GPU
    in its current stream, or in the emulator for CPU tensors. O is
    `o_shape` (None: q's with v's head dim) in `o_dtype` (None: q's)."""
    batch, seq_q, q_heads, _ = q.shape
    shape = o_shape or _out_shape(q, v)
    dtype = o_dtype or q.dtype
    o = _allocate("o", batch * seq_q * q_heads * shape[3] * dtype.itemsize,
                  lambda: q.new_empty(shape, dtype=dtype))
    lse = (_allocate("lse", batch * q_heads * seq_q * 4,
                     lambda: q.new_empty((batch, q_heads, seq_q),
                                         dtype=torch.float32)) if return_lse
           else q.new_empty((0,), dtype=torch.float32))
    if q.device.type == "cuda":
        # Straight to the C API's kernel (the tensors are torch's, checked).
        with _capi._on_device(q.device):
            kernel._capi_kernel()(q, k, v, o, lse if return_lse else None,
                                  extras)
    else:
        kernel(q, k, v, o, lse if return_lse else None, extras=extras)
    return o, lse


def _resolved_splits(variant, q, k, block_table, num_splits, target,
                     sm_count):
    """num_splits, or for 0 fa4's choice from the tasks (of the chip's rows
    of packed queries), the KV blocks of each and the SM count."""
    if num_splits != 0:
        return num_splits
    batch, seq_q = q.shape[0], q.shape[1]
    ratio = variant["q_heads"] // variant["kv_heads"]
    packing = min(ratio & -ratio, 16)
    rows = _task_rows(target, q.shape[3],
                      variant.get("v_head_dim") or q.shape[3])
    tasks = (batch * (variant["q_heads"] // packing) *
             -(-seq_q * packing // rows))
    keys = (k.shape[1] if block_table is None
            else block_table.shape[1] * k.shape[1])
    return _choose_splits(tasks, -(-keys // 128), sm_count)


def _cache_extras(kernel, q, seqused_k, block_table, num_splits):
    """A kernel's first extras, in the manifest's order: the seqused_k
    table, the block table, split-KV's workspace."""
    extras = [table.detach().contiguous() for table in (seqused_k, block_table)
              if table is not None]
    if num_splits > 1:
        extras.append(_split_workspace(
            q.device, split_workspace_words(kernel, q.shape[0], q.shape[1]),
            _split_counter_words(kernel, q.shape[0], q.shape[1])))
    return extras


@torch.library.custom_op("fa4::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  causal: bool, window_left: int, window_right: int,
                  softcap: float, scale: Optional[float],
                  return_lse: bool, seqused_k: Optional[torch.Tensor] = None,
                  block_table: Optional[torch.Tensor] = None,
                  num_splits: int = 1, deterministic: bool = False
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
    variant = _validate(q, k, v, causal, window_left, window_right, softcap,
                        scale, return_lse, seqused_k, block_table, num_splits)
    _flag("deterministic", deterministic)
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q: on {q.device}; fa4 runs CUDA tensors on the GPU "
                         "and CPU tensors in the emulator")
    batch, seq_q, q_heads, _ = q.shape
    if batch == 0 or seq_q == 0 or k.shape[1] == 0:
        return _empty_results(q, v, return_lse)
    target, sm_count = _target(q.device)
    num_splits = _resolved_splits(variant, q, k, block_table, num_splits,
                                  target, sm_count)
    kernel = compile(target=target, sm_count=sm_count,
                     seqused_k=seqused_k is not None, num_splits=num_splits,
                     **variant)
    extras = _cache_extras(kernel, q, seqused_k, block_table, num_splits)
    if q.device.type == "cpu":
        _check_host_memory(q, k, v, return_lse)
    # (_validate checked the sizes against the runtime's limits before any
    # copy: a broadcast input copied whole can be far larger than its
    # storage.)
    q, k, v = (_tma_ready(name, t.detach()) for name, t in
               (("q", q), ("k", k), ("v", v)))
    return _launch(kernel, q, k, v, return_lse, extras)


@_attention_op.register_fake
def _(q, k, v, causal, window_left, window_right, softcap, scale, return_lse,
      seqused_k=None, block_table=None, num_splits=1, deterministic=False):
    _flag("deterministic", deterministic)
    _validate(q, k, v, causal, window_left, window_right, softcap, scale,
              return_lse, seqused_k, block_table, num_splits)
    batch, seq_q, q_heads, _ = q.shape
    o = q.new_empty(_out_shape(q, v))
    lse = q.new_empty((batch, q_heads, seq_q) if return_lse else (0,),
                      dtype=torch.float32)
    return o, lse


# --- The backward --------------------------------------------------------


@torch.library.custom_op("fa4::attention_backward", mutates_args=())
def _attention_backward_op(dout: torch.Tensor, q: torch.Tensor,
                           k: torch.Tensor, v: torch.Tensor,
                           out: torch.Tensor, lse: torch.Tensor, causal: bool,
                           window_left: int, window_right: int,
                           softcap: float, scale: Optional[float],
                           deterministic: bool = False
                           ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of fa4.attention for the gradient dout of its O, from the
    forward's O and LSE (fa4.attention_backward): fa4's backward kernels on
    the GPU of CUDA tensors (its own chip's), and in fa4-emu for CPU tensors
    (the first chip with backward kernels: sm_100a). `deterministic`:
    dQ accumulated in a fixed order, the same bits on every run."""
    _refuse_value_head_dim(q, v)
    variant = _validate(q, k, v, causal, window_left, window_right, softcap,
                        scale, True)
    _check_backward_tensors(dout, q, k, out, lse)
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q: on {q.device}; fa4 runs CUDA tensors on the GPU "
                         "and CPU tensors in the emulator")
    batch, seq_q, q_heads, _ = q.shape
    seq_k = k.shape[1]
    if not (batch and seq_q and seq_k):
        # No query or no key: every gradient is zero (rows that see no key
        # have O = 0 whatever K and V are).
        return tuple(_allocate(name, t.numel() * t.element_size(),
                               lambda t=t: torch.zeros_like(
                                   t, memory_format=torch.contiguous_format))
                     for name, t in (("dq", q), ("dk", k), ("dv", v)))
    kernel = _backward_kernel(variant, q.device, deterministic)
    if q.device.type == "cpu":
        _check_backward_host_memory(q, k)
    q, k, v, out, dout = (_tma_ready(name, t.detach()) for name, t in
                          (("q", q), ("k", k), ("v", v), ("out", out),
                           ("dout", dout)))
    lse = lse.detach().contiguous()
    made = []
    for name, like, dtype in (("dq", q, q.dtype), ("dk", k, q.dtype),
                              ("dv", v, q.dtype),
                              ("delta", lse, torch.float32),
                              ("dq_accum", q, torch.float32)):
        nbytes = like.numel() * dtype.itemsize
        made.append(_allocate(name, nbytes, lambda like=like, dtype=dtype:
                              like.new_empty(like.shape, dtype=dtype)))
    dq, dk, dv, delta, dq_accum = made
    if q.device.type == "cuda":
        with _capi._on_device(q.device):
            kernel._capi_kernel()(q, k, v, out, dout, lse, dq, dk, dv, delta,
                                  dq_accum)
    else:
        kernel(q, k, v, out, dout, lse, dq, dk, dv, delta, dq_accum)
    return dq, dk, dv


# The chips whose schedule takes the backward to a binary, in the chip
# table's order; CPU tensors run the first one's kernels in fa4-emu.
_BACKWARD_TARGETS = _BACKWARD_CHIPS


def _backward_kernel(variant, device, deterministic):
    """The backward kernels of `variant` for tensors on `device`: the GPU's
    own chip (NotImplementedError where it has no backward schedule), or
    for CPU tensors the first chip with one, in fa4-emu."""
    if device.type == "cuda":
        target, sm_count = _target(device)
        if target not in _BACKWARD_TARGETS:
            raise NotImplementedError(
                f"fa4.attention's backward has no kernel for {target} yet "
                f"(the backward is scheduled for "
                f"{', '.join(_BACKWARD_TARGETS) or 'no chip'}): compute the "
                "gradients on CPU copies, or use torch's SDPA for training")
    elif _BACKWARD_TARGETS:
        target, sm_count = _BACKWARD_TARGETS[0], 0
    else:
        raise NotImplementedError("no chip schedules fa4's backward")
    return _compile_backward(variant, target, sm_count, deterministic)


def _compile_backward(variant, target, sm_count, deterministic=False):
    """compile_backward of the variant _validate describes."""
    if "v_head_dim" in variant:
        raise NotImplementedError(
            f"fa4.attention's backward with V's head dim "
            f"({variant['v_head_dim']}) differing from Q's "
            f"({variant['head_dim']}) is not built yet")
    if variant["head_dim"] not in _BACKWARD_HEAD_DIMS:
        raise NotImplementedError(
            f"fa4.attention's backward at head dim {variant['head_dim']} is "
            f"not built yet (it takes 32, 64, 96 or 128)")
    return compile_backward(head_dim=variant["head_dim"],
                            q_heads=variant["q_heads"],
                            kv_heads=variant["kv_heads"], mask=variant["mask"],
                            window=variant["window"], dtype=variant["dtype"],
                            softcap=variant["softcap"], scale=variant["scale"],
                            target=target, sm_count=sm_count,
                            deterministic=deterministic)


@_attention_backward_op.register_fake
def _(dout, q, k, v, out, lse, causal, window_left, window_right, softcap,
      scale, deterministic=False):
    _refuse_value_head_dim(q, v)
    _validate(q, k, v, causal, window_left, window_right, softcap, scale, True)
    _check_backward_tensors(dout, q, k, out, lse)
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format))


def _no_double_backward(ctx, *grads):
    raise NotImplementedError(
        "fa4.attention's backward is not itself differentiable: no second "
        "derivative (double backward, create_graph=True through it) is built")


_attention_backward_op.register_autograd(
    _no_double_backward, setup_context=lambda ctx, inputs, output: None)


def _refuse_value_head_dim(q, v):
    """The backward takes one head dim for q, k and v (not yet (192, 128)),
    32, 64, 96 or 128 (not yet 192 or 256)."""
    if isinstance(v, torch.Tensor) and isinstance(q, torch.Tensor) and \
            v.dim() == 4 and q.dim() == 4 and v.shape[3] != q.shape[3]:
        raise NotImplementedError(
            f"fa4.attention's backward with V's head dim ({v.shape[3]}) "
            f"differing from Q's ({q.shape[3]}) is not built yet")
    if isinstance(q, torch.Tensor) and q.dim() == 4 and \
            q.shape[3] not in _BACKWARD_HEAD_DIMS:
        raise NotImplementedError(
            f"fa4.attention's backward at head dim {q.shape[3]} is not built "
            f"yet (it takes 32, 64, 96 or 128)")


def _check_backward_tensors(dout, q, k, out, lse):
    """dO and O like q, the LSE (batch, q_heads, seq_q) float32."""
    for name, t in (("dout", dout), ("out", out)):
        if not isinstance(t, torch.Tensor) or t.shape != q.shape or \
                t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} must be a tensor like q ({tuple(q.shape)}, "
                             f"{q.dtype}, on {q.device})")
    want = (q.shape[0], q.shape[2], q.shape[1])
    if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != want or \
            lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"lse must be a float32 tensor {want} on {q.device}: "
                         "the forward's, asked for with return_lse=True")


def _save_for_backward(ctx, inputs, output):
    # Called only when autograd records the call (in grad mode, with an
    # input that requires grad), itself under no_grad.
    (q, k, v, causal, window_left, window_right, softcap, scale, return_lse,
     seqused_k, block_table, num_splits, deterministic) = (
         list(inputs) + [None, None, 1, False])[:13]
    o, lse = output
    # The backward's arguments beside the tensors: the variant, and whether
    # dQ is accumulated in a fixed order.
    ctx.variant = (causal, window_left, window_right, softcap, scale,
                   deterministic)
    # What the backward cannot do, said when it is asked for.
    ctx.refusal = None
    if seqused_k is not None or block_table is not None:
        ctx.refusal = ("fa4.attention's backward does not take seqused_k or "
                       "a paged K/V cache (block_table) yet")
    elif v.shape[3] != q.shape[3]:
        ctx.refusal = (f"fa4.attention's backward with V's head dim "
                       f"({v.shape[3]}) differing from Q's ({q.shape[3]}) is "
                       "not built yet")
    elif not return_lse:
        ctx.refusal = ("the backward needs the forward's LSE: call "
                       "torch.ops.fa4.attention with return_lse=True (or "
                       "fa4.attention, which asks for it when q, k or v "
                       "requires grad)")
    ctx.save_for_backward(q, k, v, o, lse)
    # The LSE is an output without a gradient (as FlashAttention's): it does
    # not require grad, so a loss through it alone is refused by autograd
    # itself, and beside O it counts as a constant.
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, dlse):
    if ctx.refusal:
        raise NotImplementedError(ctx.refusal)
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = _attention_backward_op(dout.contiguous(), q, k, v, o, lse,
                                        *ctx.variant)
    return (dq, dk, dv) + (None,) * 10


_attention_op.register_autograd(_backward, setup_context=_save_for_backward)


def attention(q, k, v, causal: bool, window: Sequence[int], softcap: float,
              scale: Optional[float], return_lse: bool, seqused_k=None,
              block_table=None, num_splits=1, deterministic=False):
    _check_tensors(q, k, v, paged=block_table is not None)
    _check_seqused_k(q, seqused_k)
    _check_block_table(q, k, block_table)
    left, right = _window_pair(window)
    return_lse = _flag("return_lse", return_lse)
    # The backward reads the forward's LSE: asked for whenever autograd will
    # record the call.
    o, lse = _attention_op(q, k, v, _flag("causal", causal), left, right,
                           _real("softcap", softcap),
                           None if scale is None else _real("scale", scale),
                           return_lse or _needs_grad(q, k, v), seqused_k,
                           block_table, num_splits,
                           _flag("deterministic", deterministic))
    return (o, lse) if return_lse else o


# --- FP8 (e4m3) inputs ----------------------------------------------------

# fa4c --dtype e4m3 writes O in bf16 (FlashAttention-3's FP8 output).
_FP8_OUT = torch.bfloat16


def _check_descale(name, table, q, k, values=True, batch=None):
    """A descale table: None (1), or a (batch, kv_heads) float32 tensor on
    q's device; with `values`, a CPU table's values too (a fake tensor,
    torch.compile's, has none to read)."""
    if table is None:
        return
    if not isinstance(table, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got "
                        f"{type(table).__name__}")
    # (A varlen batch's tables have a row per sequence.)
    shape = (q.shape[0] if batch is None else batch, k.shape[2])
    if table.dtype != torch.float32 or tuple(table.shape) != shape:
        raise ValueError(f"{name}: dtype {table.dtype}, shape "
                         f"{tuple(table.shape)}; a descale table is float32 "
                         f"(batch, kv_heads) = {shape}")
    if table.device != q.device:
        raise ValueError(f"{name}: on {table.device}, q is on {q.device}")
    # A descale is a positive, finite factor: zero or negative ones would
    # meet the masked scores' -inf (-inf · 0 is NaN). Checked where the
    # values are at hand (CPU tensors, the emulator's); on a GPU reading
    # them would wait for the device on every call, so there it is the
    # caller's contract (docs/FP8.md).
    if values and table.device.type == "cpu" and not bool(
            (torch.isfinite(table) & (table > 0)).all()):
        raise ValueError(f"{name}: holds a value that is not positive and "
                         "finite; descales are positive, finite factors")


def _check_descale_products(q, q_descale, k_descale, scale):
    """The kernel's exponent scales each score by scale · log2(e) ·
    q_descale · k_descale in f32: a product that leaves f32's normal range
    (each factor finite) would make every row NaN. Checked for CPU tables,
    as _check_descale's values are."""
    tables = [t for t in (q_descale, k_descale) if t is not None]
    if not tables or any(t.device.type != "cpu" for t in tables):
        return
    product = torch.full_like(tables[0], 1.0, dtype=torch.float64)
    for table in tables:
        product = product * table.double()
    factor = (scale if scale is not None else q.shape[3] ** -0.5) * math.log2(math.e)
    product = product * factor
    tiny, huge = torch.finfo(torch.float32).tiny, torch.finfo(torch.float32).max
    if not bool(((product >= tiny) & (product <= huge)).all()):
        raise ValueError(
            "q_descale · k_descale · scale · log2(e) leaves float32's normal "
            f"range ({tiny:.3g} to {huge:.3g}) for some (batch, K/V head): "
            "the kernel scales the scores by that product in float32")


# The kernel subtracts each row's max as m·c rounded up, in f32 (c = scale
# · log2(e) · q_descale · k_descale): past 2^23 that rounding reaches a
# whole unit of the exponent, which FP8's shift of 2^8 no longer absorbs far
# beyond it (every probability of the row rounds to e4m3's zero).
_FP8_SCORE_LIMIT = float(2 ** 23)


def _check_scaled_scores(q, k, q_descale, k_descale, scale, block_table=None,
                         seqused_k=None, softcap=0.0):
    """CPU inputs whose scaled scores s·c reach past _FP8_SCORE_LIMIT are
    refused by name (their rows would come out 0 with an LSE of -inf). A
    bound (head_dim · max|q| · max|k| · c) settles the usual case; past it
    the scores themselves are computed, a K/V head at a time, over each
    sequence's keys (its pages, its seqused_k). A softcap holds the scores
    the exponent sees within ±cap: nothing to check."""
    if softcap or q.device.type != "cpu" or any(
            t is not None and t.device.type != "cpu"
            for t in (q_descale, k_descale, seqused_k)):
        return
    if q.numel() == 0 or k.numel() == 0:
        return
    batch, _, q_heads, dim = q.shape
    kv_heads = k.shape[2]
    factor = torch.full((batch, kv_heads), (scale if scale is not None
                                             else dim ** -0.5)
                        * math.log2(math.e), dtype=torch.float64)
    for table in (q_descale, k_descale):
        if table is not None:
            factor = factor * table.double()
    qf, kf = q.detach().float(), k.detach().float()
    bound = dim * qf.abs().max().item() * kf.abs().max().item() * \
        factor.max().item()
    if bound <= _FP8_SCORE_LIMIT:
        return
    group = q_heads // kv_heads
    for b in range(batch):
        # A paged cache's sequence: the pages its table names.
        if block_table is None:
            cache = kf[b]
        else:
            # Pages outside the cache read zeros.
            pages = block_table[b].long().clamp(-1, kf.shape[0])
            cache = torch.cat([kf[p] if 0 <= p < kf.shape[0]
                               else kf.new_zeros(kf.shape[1:])
                               for p in pages.tolist()])
        if seqused_k is not None:
            cache = cache[:max(0, int(seqused_k[b]))]
        if cache.shape[0] == 0:
            continue
        for h in range(kv_heads):
            queries = qf[b, :, h * group:(h + 1) * group, :].reshape(-1, dim)
            keys = cache[:, h, :].T
            top = max((queries[i:i + 1024] @ keys).abs().max().item()
                      for i in range(0, queries.shape[0], 1024))
            top *= factor[b, h].item()
            if top > _FP8_SCORE_LIMIT:
                raise ValueError(
                    f"the scaled scores (q·k · scale · log2(e) · q_descale · "
                    f"k_descale) reach {top:.3g} at batch {b}, K/V head {h}, "
                    f"past 2^23 = {_FP8_SCORE_LIMIT:.3g}: there f32 cannot "
                    "hold the FP8 kernel's row max to a unit of the "
                    "exponent, and the row's probabilities would round to "
                    "zero (O = 0, LSE = -inf); check the descales")


def _validate_fp8(q, k, v, q_descale, k_descale, v_descale, causal,
                  window_left, window_right, softcap, scale, return_lse,
                  seqused_k, block_table=None, num_splits=1, values=True,
                  sequences=None):
    """_validate for FP8 inputs: the tensors, the tables (with `values`, a
    CPU descale table's values), the scalars and the variant (through the
    verifier). Returns the compile() arguments of the variant."""
    _check_tensors(q, k, v, paged=block_table is not None,
                   dtypes=_FP8_DTYPES)
    _check_seqused_k(q, seqused_k)
    _check_block_table(q, k, block_table)
    if (isinstance(num_splits, bool) or not isinstance(num_splits, int) or
            not 0 <= num_splits <= 128):
        raise ValueError(f"num_splits must be an int in [0, 128], got "
                         f"{num_splits!r}")
    for name, table in (("q_descale", q_descale), ("k_descale", k_descale),
                        ("v_descale", v_descale)):
        _check_descale(name, table, q, k, values, sequences)
    variant = _checked_variant(q, k, v, "e4m3", causal, window_left,
                               window_right, softcap, scale, return_lse)
    if values:
        _check_descale_products(q, q_descale, k_descale, variant["scale"])
        # A varlen batch (one packed row of sequences) is checked against
        # its largest factor.
        largest = [t.amax(dim=0, keepdim=True)
                   if t is not None and sequences is not None else t
                   for t in (q_descale, k_descale)]
        _check_scaled_scores(q, k, *largest, variant["scale"], block_table,
                             seqused_k, variant["softcap"])
    sizes = (q.shape[0], q.shape[1],
             k.shape[1] if block_table is None
             else block_table.shape[1] * k.shape[1])
    if block_table is not None:
        variant["page_size"] = int(k.shape[1])
    if all(isinstance(size, int) for size in sizes):
        _fa4.check_shapes(variant["head_dim"], variant["q_heads"],
                          variant["kv_heads"], *(max(size, 1) for size in sizes),
                          v_head_dim=int(v.shape[3]))
    return variant


@torch.library.custom_op("fa4::attention_fp8", mutates_args=())
def _attention_fp8_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      q_descale: Optional[torch.Tensor],
                      k_descale: Optional[torch.Tensor],
                      v_descale: Optional[torch.Tensor], causal: bool,
                      window_left: int, window_right: int, softcap: float,
                      scale: Optional[float], return_lse: bool,
                      seqused_k: Optional[torch.Tensor] = None,
                      block_table: Optional[torch.Tensor] = None,
                      num_splits: int = 1
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    variant = _validate_fp8(q, k, v, q_descale, k_descale, v_descale, causal,
                            window_left, window_right, softcap, scale,
                            return_lse, seqused_k, block_table, num_splits)
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q: on {q.device}; fa4 runs CUDA tensors on the GPU "
                         "and CPU tensors in the emulator")
    batch, seq_q, _, _ = q.shape
    if batch == 0 or seq_q == 0 or k.shape[1] == 0:
        return _empty_results(q, v, return_lse, _FP8_OUT)
    target, sm_count = _target(q.device)
    num_splits = _resolved_splits(variant, q, k, block_table, num_splits,
                                  target, sm_count)
    kernel = compile(target=target, sm_count=sm_count,
                     seqused_k=seqused_k is not None, num_splits=num_splits,
                     **variant)
    # The kernel's extras: the cache's tables and split-KV's workspace,
    # then the three descale tables (a table left out is ones: the factor
    # 1).
    extras = _cache_extras(kernel, q, seqused_k, block_table, num_splits)
    extras += _descale_extras((q_descale, k_descale, v_descale), batch,
                              k.shape[2], q.device)
    if q.device.type == "cpu":
        _check_host_memory(q, k, v, return_lse)
    o_shape = _out_shape(q, v)
    q, k = (_tma_ready(name, t.detach()) for name, t in (("q", q), ("k", k)))
    # Hopper's kernels read V transposed (the manifest's "vt" map),
    # Blackwell's V as it is.
    value = (prepare_fp8_value(v.detach()) if _reads_vt(kernel)
             else _tma_ready("v", v.detach()))
    return _launch(kernel, q, k, value, return_lse, extras, o_shape=o_shape,
                   o_dtype=_FP8_OUT)


def _descale_extras(tables, batch, kv_heads, device):
    """FP8's three descale tables as a kernel's extras, a table left out
    being ones (the factor 1)."""
    return [torch.ones((batch, kv_heads), dtype=torch.float32, device=device)
            if table is None else table.detach().contiguous()
            for table in tables]


def _reads_vt(kernel):
    """Whether `kernel` reads V in the vt layout prepare_fp8_value makes
    (sm_90a's FP8 kernels) rather than as it is."""
    return any(m.get("tensor") == "v" and m.get("layout") == "vt"
               for m in kernel.manifest.get("tensor_maps", ()))


def _fp8_backward(ctx, grad_o, grad_lse):
    raise RuntimeError("fa4.attention: FP8 (e4m3) attention is not "
                       "differentiable (its backward is not built; docs/FP8.md)")


_attention_fp8_op.register_autograd(_fp8_backward)


@_attention_fp8_op.register_fake
def _(q, k, v, q_descale, k_descale, v_descale, causal, window_left,
      window_right, softcap, scale, return_lse, seqused_k=None,
      block_table=None, num_splits=1):
    _validate_fp8(q, k, v, q_descale, k_descale, v_descale, causal,
                  window_left, window_right, softcap, scale, return_lse,
                  seqused_k, block_table, num_splits, values=False)
    batch, seq_q, q_heads, _ = q.shape
    o = q.new_empty(_out_shape(q, v), dtype=_FP8_OUT)
    lse = q.new_empty((batch, q_heads, seq_q) if return_lse else (0,),
                      dtype=torch.float32)
    return o, lse


def attention_fp8(q, k, v, q_descale, k_descale, v_descale, causal: bool,
                  window: Sequence[int], softcap: float,
                  scale: Optional[float], return_lse: bool, seqused_k=None,
                  block_table=None, num_splits: int = 1):
    left, right = _window_pair(window)
    return_lse = _flag("return_lse", return_lse)
    o, lse = _attention_fp8_op(q, k, v, q_descale, k_descale, v_descale,
                               _flag("causal", causal), left, right,
                               _real("softcap", softcap),
                               None if scale is None else _real("scale", scale),
                               return_lse, seqused_k, block_table, num_splits)
    return (o, lse) if return_lse else o


# --- Variable-length batches (FlashAttention's varlen layout) -------------


def _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, seqused_k, read_tables=False, dtypes=_DTYPES):
    """The packed tensors (total, heads, head_dim), the cu_seqlens tables
    ((batch + 1,) int32 on q's device, the same length) and the max
    lengths. Tables on the CPU are read here (monotonic, inside the packed
    tensors, no sequence longer than max_seqlen_q) by the real op
    (`read_tables`: not while tracing, where they have no values); on a GPU
    reading them would wait for it, and the kernel clamps every entry
    instead."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(f"{name} must be packed (total, heads, head_dim), "
                             f"got shape {tuple(t.shape)}")
    _check_tensors(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                   dtypes=dtypes)
    for name, table in (("cu_seqlens_q", cu_seqlens_q),
                        ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(table, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got "
                            f"{type(table).__name__}")
        if table.is_nested or table.layout != torch.strided:
            raise ValueError(f"{name} must be a dense (strided) tensor")
        if table.dtype != torch.int32:
            raise ValueError(f"{name}: dtype {table.dtype}; it must be "
                             "torch.int32")
        if table.dim() != 1 or table.shape[0] < 1:
            raise ValueError(f"{name} must be (batch + 1,), got shape "
                             f"{tuple(table.shape)}")
        if table.device != q.device:
            raise ValueError(f"{name}: on {table.device}, q is on {q.device}")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(f"cu_seqlens_q {tuple(cu_seqlens_q.shape)} and "
                         f"cu_seqlens_k {tuple(cu_seqlens_k.shape)} must both "
                         "be (batch + 1,)")
    batch = cu_seqlens_q.shape[0] - 1
    if seqused_k is not None:
        # (A stand-in with the sequences as its batch, on q's device.)
        _check_table("seqused_k", seqused_k, q.new_empty((batch, 0)),
                     f"(batch,) = ({batch},)", 1)
    for name, value in (("max_seqlen_q", max_seqlen_q),
                        ("max_seqlen_k", max_seqlen_k)):
        # While tracing a changing max is a symbolic int: its value is the
        # real op's to check.
        if isinstance(value, torch.SymInt):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 0 <= value < (1 << 31):
            raise ValueError(f"{name} must be an int in [0, 2^31), got "
                             f"{value!r}")
    if read_tables and q.device.type == "cpu":
        for name, table, total, longest in (
                ("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q),
                ("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k)):
            entries = table.tolist()
            if entries[0] < 0 or any(b < a for a, b in zip(entries, entries[1:])):
                raise ValueError(f"{name} must be non-decreasing from 0 or "
                                 f"more, got {entries}")
            if entries[-1] > total:
                raise ValueError(f"{name} ends at {entries[-1]}, past the "
                                 f"{total} rows of the packed tensor")
            lengths = [b - a for a, b in zip(entries, entries[1:])]
            if lengths and max(lengths) > longest:
                raise ValueError(f"{name} has a sequence of {max(lengths)} "
                                 f"rows, more than max_seqlen_"
                                 f"{name[-1]} = {longest}")


def _validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, causal, window_left, window_right, softcap,
                     scale, return_lse, seqused_k, read_tables=False):
    """_validate for the varlen op (the real one, which reads CPU tables,
    and its fake): the variant's compile() arguments."""
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, seqused_k, read_tables)
    variant = _validate(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                        causal, window_left, window_right, softcap, scale,
                        return_lse)
    return variant


@torch.library.custom_op("fa4::attention_varlen", mutates_args=())
def _attention_varlen_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                         max_seqlen_k: int, causal: bool, window_left: int,
                         window_right: int, softcap: float,
                         scale: Optional[float], return_lse: bool,
                         seqused_k: Optional[torch.Tensor] = None
                         ) -> Tuple[torch.Tensor, torch.Tensor]:
    variant = _validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                               max_seqlen_q, max_seqlen_k, causal,
                               window_left, window_right, softcap, scale,
                               return_lse, seqused_k, read_tables=True)
    return _run_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                       return_lse, variant)


def _run_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, return_lse,
                variant, descales=None):
    """The varlen ops' compile and launch (`variant` validated). FP8's:
    `descales` the three tables (None each for ones), O bf16."""
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q: on {q.device}; fa4 runs CUDA tensors on the GPU "
                         "and CPU tensors in the emulator")
    o_dtype = _FP8_OUT if descales is not None else None
    batch = cu_seqlens_q.shape[0] - 1
    if batch == 0 or q.shape[0] == 0 or k.shape[0] == 0:
        # No row sees a key: O = 0, LSE = -inf.
        o, lse = _empty_results(q.unsqueeze(0), v.unsqueeze(0), return_lse,
                                o_dtype)
        return o[0], (lse[0] if return_lse else lse)
    target, sm_count = _target(q.device)
    kernel = compile(target=target, sm_count=sm_count,
                     seqused_k=seqused_k is not None, varlen=True, **variant)
    extras = [table.detach().contiguous()
              for table in (seqused_k, cu_seqlens_q, cu_seqlens_k)
              if table is not None]
    if descales is not None:
        extras += _descale_extras(descales, batch, k.shape[1], q.device)
    q4, k4, v4 = (_tma_ready(name, t.detach().unsqueeze(0)) for name, t in
                  (("q", q), ("k", k), ("v", v)))
    if q.device.type == "cpu":
        _check_host_memory(q4, k4, v4, return_lse)
    o, lse = _launch(kernel, q4, k4, v4, return_lse, extras,
                     o_shape=_out_shape(q4, v4), o_dtype=o_dtype)
    return o[0], (lse[0] if return_lse else lse)


@_attention_varlen_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
      window_left, window_right, softcap, scale, return_lse, seqused_k=None):
    _validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, causal, window_left, window_right, softcap,
                     scale, return_lse, seqused_k)
    total_q, q_heads, _ = q.shape
    o = q.new_empty((total_q, q_heads, v.shape[2]))
    lse = q.new_empty((q_heads, total_q) if return_lse else (0,),
                      dtype=torch.float32)
    return o, lse


def _no_varlen_backward(ctx, inputs, output):
    # Called only when autograd records the call, itself under no_grad.
    _check_grad(*inputs[:3], grad_mode=True, what="fa4.attention_varlen")


# The varlen backward is not built: a call autograd would record is refused
# (rather than returning outputs whose backward fails later).
_attention_varlen_op.register_autograd(lambda ctx, *grads: None,
                                       setup_context=_no_varlen_backward)


def _validate_varlen_fp8(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                         max_seqlen_k, q_descale, k_descale, v_descale,
                         causal, window_left, window_right, softcap, scale,
                         return_lse, seqused_k, read_tables=False):
    """_validate_varlen for FP8 inputs: the descale tables have a row per
    sequence."""
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, seqused_k, read_tables, dtypes=_FP8_DTYPES)
    return _validate_fp8(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                         q_descale, k_descale, v_descale, causal, window_left,
                         window_right, softcap, scale, return_lse, None,
                         values=read_tables,
                         sequences=cu_seqlens_q.shape[0] - 1)


@torch.library.custom_op("fa4::attention_varlen_fp8", mutates_args=())
def _attention_varlen_fp8_op(q: torch.Tensor, k: torch.Tensor,
                             v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                             cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                             max_seqlen_k: int,
                             q_descale: Optional[torch.Tensor],
                             k_descale: Optional[torch.Tensor],
                             v_descale: Optional[torch.Tensor], causal: bool,
                             window_left: int, window_right: int,
                             softcap: float, scale: Optional[float],
                             return_lse: bool,
                             seqused_k: Optional[torch.Tensor] = None
                             ) -> Tuple[torch.Tensor, torch.Tensor]:
    variant = _validate_varlen_fp8(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                   max_seqlen_q, max_seqlen_k, q_descale,
                                   k_descale, v_descale, causal, window_left,
                                   window_right, softcap, scale, return_lse,
                                   seqused_k, read_tables=True)
    # The varlen tables, then the three descale tables (a row a sequence).
    return _run_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                       return_lse, variant, (q_descale, k_descale, v_descale))


@_attention_varlen_fp8_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      q_descale, k_descale, v_descale, causal, window_left, window_right,
      softcap, scale, return_lse, seqused_k=None):
    _validate_varlen_fp8(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                         max_seqlen_k, q_descale, k_descale, v_descale, causal,
                         window_left, window_right, softcap, scale,
                         return_lse, seqused_k)
    total_q, q_heads, _ = q.shape
    o = q.new_empty((total_q, q_heads, v.shape[2]), dtype=_FP8_OUT)
    lse = q.new_empty((q_heads, total_q) if return_lse else (0,),
                      dtype=torch.float32)
    return o, lse


_attention_varlen_fp8_op.register_autograd(_fp8_backward)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, causal, window, softcap, scale, return_lse,
                     seqused_k=None, q_descale=None, k_descale=None,
                     v_descale=None):
    def length(name, value):
        # A symbolic int while tracing (a max that changes between calls).
        if isinstance(value, torch.SymInt):
            return value
        return _integer(name, value, 0, 1 << 31)
    max_seqlen_q = length("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = length("max_seqlen_k", max_seqlen_k)
    if is_fp8(q) or any(t is not None
                        for t in (q_descale, k_descale, v_descale)):
        left, right = _window_pair(window)
        return_lse = _flag("return_lse", return_lse)
        o, lse = _attention_varlen_fp8_op(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            q_descale, k_descale, v_descale, _flag("causal", causal), left,
            right, _real("softcap", softcap),
            None if scale is None else _real("scale", scale), return_lse,
            seqused_k)
        return (o, lse) if return_lse else o
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, seqused_k)
    _check_grad(q, k, v, what="fa4.attention_varlen")
    left, right = _window_pair(window)
    o, lse = _attention_varlen_op(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
        max_seqlen_k, _flag("causal", causal), left, right,
        _real("softcap", softcap), None if scale is None else _real("scale", scale),
        _flag("return_lse", return_lse), seqused_k)
    return (o, lse) if return_lse else o


# --- Attention from IR, differentiable -----------------------------------
#
# A kernel compiled from entry IR (score_mod / mask_mod regions and their
# extras) has its backward derived by the compiler (fa4.backward_ir): the
# forward runs the IR made to write its LSE, the backward the derived
# fa4.attention_backward, which differentiates the regions.


_CHIP_OF_IR = None


def _ir_target(ir, device):
    """The target and SM count for `ir` on `device`: the GPU's own, or for
    CPU tensors the chip the IR's module names (its fa4.target), else the
    default one, in the emulator."""
    global _CHIP_OF_IR
    if device.type == "cuda":
        return _target(device)
    if _CHIP_OF_IR is None:
        import re
        _CHIP_OF_IR = re.compile(r"fa4\.target\s*=\s*#fa4\.target<(\w+)>")
    named = _CHIP_OF_IR.search(ir)
    return (named.group(1), 0) if named else _target(device)


@functools.lru_cache(maxsize=64)
def _ir_with_lse(ir):
    """The forward entry `ir` made to write its LSE (fa4.backward_ir's
    with_lse)."""
    from . import backward_ir
    return backward_ir(ir, with_lse=True)


def _check_ir_call(q, k, v, extras, ir):
    if not isinstance(ir, str):
        raise TypeError(f"ir must be a str of MLIR, got {type(ir).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-d tensor (batch, seq, heads, "
                             f"head_dim), got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device}, q on {q.device}")
    for i, e in enumerate(extras):
        if not isinstance(e, torch.Tensor) or e.device != q.device:
            raise ValueError(f"extras[{i}] must be a tensor on q's device "
                             f"({q.device})")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q: on {q.device}; fa4 runs CUDA tensors on the GPU "
                         "and CPU tensors in the emulator")


def _declared_layouts(kernel):
    """The strides the kernel's entry IR declares for q, k, v and o, per
    axis of the (batch, seq, heads, head_dim) view (None where dynamic):
    the manifest's tensor maps' layout_strides."""
    return {m["tensor"]: m["layout_strides"]
            for m in kernel.manifest.get("tensor_maps", [])
            if m.get("tensor") in ("q", "k", "v", "o")
            and len(m.get("layout_strides") or ()) == 4}


def _fits_layout(x, declared):
    """Whether x's strides are those `declared` (None: any) where its size
    is above 1."""
    return declared is None or all(
        want is None or x.shape[i] <= 1 or x.stride(i) == want
        for i, want in enumerate(declared))


def _in_layout(name, declared, t=None, shape=None, like=None):
    """`t` in the layout `declared` asks for (as it is when its strides
    fit, else a copy), or a new tensor of `shape` like `like` in it: the
    dimensions in the declared order (dynamic strides outermost, in order;
    then the declared strides, largest first), dense."""
    if t is not None and _fits_layout(t, declared):
        return t
    dims = t.dim() if t is not None else len(shape)
    known = [] if declared is None else \
        [i for i, want in enumerate(declared) if want is not None]
    order = [i for i in range(dims) if i not in known] + \
        sorted(known, key=lambda i: -declared[i])
    inverse = [order.index(i) for i in range(dims)]
    if t is not None:
        laid = t.permute(order).contiguous().permute(inverse)
    else:
        laid = like.new_empty([shape[i] for i in order]).permute(inverse)
    # (Where no dense layout of these sizes has the declared strides, the
    # sizes are not the ones the IR fixes: the launch names which.)
    return laid


@torch.library.custom_op("fa4::attention_ir", mutates_args=())
def _attention_ir_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     extras: List[torch.Tensor], ir: str,
                     deterministic: bool = False
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
    """O and the LSE of the attention entry IR `ir` describes, on q, k, v
    (in the layout its types declare: inputs in another are copied into
    it) and the extras its regions read: the IR made to write its LSE,
    compiled for q's GPU (or the default chip in the emulator for CPU
    tensors). `deterministic` is the backward's (a fixed dQ order)."""
    from . import compile_ir
    _check_ir_call(q, k, v, extras, ir)
    target, sm_count = _ir_target(ir, q.device)
    kernel = compile_ir(_ir_with_lse(ir), target, sm_count=sm_count)
    declared = _declared_layouts(kernel)
    q, k, v = (_in_layout(name, declared.get(name), t.detach())
               for name, t in (("q", q), ("k", k), ("v", v)))
    extras = [e.detach().contiguous() for e in extras]
    batch, seq_q, q_heads, _ = q.shape
    o = _in_layout("o", declared.get("o"),
                   shape=(batch, seq_q, q_heads, v.shape[3]), like=q)
    lse = q.new_empty((batch, q_heads, seq_q), dtype=torch.float32)
    if not (batch and seq_q and k.shape[1]):
        # No query or no key: rows that see no key (O = 0, LSE = -inf).
        return o.zero_(), lse.fill_(float("-inf"))
    if q.device.type == "cuda":
        with _capi._on_device(q.device):
            kernel._capi_kernel()(q, k, v, o, lse, extras)
    else:
        kernel(q, k, v, o, lse, extras=extras)
    # (Dense, as the fake implementation says.)
    return o.contiguous(), lse


@_attention_ir_op.register_fake
def _(q, k, v, extras, ir, deterministic=False):
    _check_ir_call(q, k, v, extras, ir)
    batch, seq_q, q_heads, _ = q.shape
    return (q.new_empty((batch, seq_q, q_heads, v.shape[3])),
            q.new_empty((batch, q_heads, seq_q), dtype=torch.float32))


@torch.library.custom_op("fa4::attention_ir_backward", mutates_args=())
def _attention_ir_backward_op(dout: torch.Tensor, q: torch.Tensor,
                              k: torch.Tensor, v: torch.Tensor,
                              out: torch.Tensor, lse: torch.Tensor,
                              extras: List[torch.Tensor], ir: str,
                              deterministic: bool = False
                              ) -> Tuple[torch.Tensor, torch.Tensor,
                                         torch.Tensor]:
    """dQ, dK, dV of fa4::attention_ir: the backward the compiler derives
    from `ir` (fa4.compile_backward_ir), on the GPU's own chip for CUDA
    tensors, in fa4-emu (the first chip with backward kernels) for CPU
    ones."""
    from . import compile_backward_ir
    _check_ir_call(q, k, v, extras, ir)
    if q.device.type == "cuda":
        target, sm_count = _target(q.device)
        if target not in _BACKWARD_TARGETS:
            raise NotImplementedError(
                f"the backward has no kernel for {target} yet (it is "
                f"scheduled for {', '.join(_BACKWARD_TARGETS) or 'no chip'})")
    elif _ir_target(ir, q.device)[0] in _BACKWARD_TARGETS:
        target, sm_count = _ir_target(ir, q.device)
    elif _BACKWARD_TARGETS:
        target, sm_count = _BACKWARD_TARGETS[0], 0
    else:
        raise NotImplementedError("no chip schedules fa4's backward")
    kernel = compile_backward_ir(_ir_with_lse(ir), target, sm_count=sm_count,
                                 deterministic=deterministic)
    if not (q.shape[0] and q.shape[1] and k.shape[1]):
        return tuple(torch.zeros_like(t, memory_format=torch.contiguous_format)
                     for t in (q, k, v))
    # The derived backward takes the forward's tensor types: the layouts
    # the forward's IR declares (the forward kernel's manifest says them).
    from . import compile_ir
    forward_target, forward_sms = _ir_target(ir, q.device)
    declared = _declared_layouts(compile_ir(_ir_with_lse(ir), forward_target,
                                            sm_count=forward_sms))
    q, k, v, out, dout = (_in_layout(name, declared.get(layout), t.detach())
                          for name, layout, t in (
                              ("q", "q", q), ("k", "k", k), ("v", "v", v),
                              ("out", "o", out), ("dout", "o", dout)))
    lse = lse.detach().contiguous()
    extras = [e.detach().contiguous() for e in extras]
    dq, dk, dv = (_in_layout("d" + name, declared.get(name), shape=t.shape,
                             like=t)
                  for name, t in (("q", q), ("k", k), ("v", v)))
    delta = torch.empty_like(lse)
    dq_accum = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    if q.device.type == "cuda":
        with _capi._on_device(q.device):
            kernel._capi_kernel()(q, k, v, out, dout, lse, dq, dk, dv, delta,
                                  dq_accum, extras=extras)
    else:
        kernel(q, k, v, out, dout, lse, dq, dk, dv, delta, dq_accum,
               extras=extras)
    # (Dense, as the fake implementation says.)
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


@_attention_ir_backward_op.register_fake
def _(dout, q, k, v, out, lse, extras, ir, deterministic=False):
    _check_ir_call(q, k, v, extras, ir)
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format))


_attention_ir_backward_op.register_autograd(
    _no_double_backward, setup_context=lambda ctx, inputs, output: None)


def _save_ir_for_backward(ctx, inputs, output):
    q, k, v, extras, ir, deterministic = (list(inputs) + [False])[:6]
    o, lse = output
    ctx.ir = ir
    ctx.deterministic = deterministic
    ctx.extras_count = len(extras)
    ctx.save_for_backward(q, k, v, o, lse, *extras)
    ctx.mark_non_differentiable(lse)


def _ir_backward(ctx, dout, dlse):
    q, k, v, o, lse, *extras = ctx.saved_tensors
    dq, dk, dv = _attention_ir_backward_op(dout, q, k, v, o, lse, extras,
                                           ctx.ir, ctx.deterministic)
    return dq, dk, dv, [None] * ctx.extras_count, None, None


_attention_ir_op.register_autograd(_ir_backward,
                                   setup_context=_save_ir_for_backward)


def attention_ir(q, k, v, ir, extras=(), return_lse=False,
                 deterministic=False):
    """fa4.attention_ir: see its docstring in fa4/__init__.py."""
    if isinstance(extras, (str, bytes, torch.Tensor)) or \
            not hasattr(extras, "__iter__"):
        raise TypeError(f"extras must be a sequence of tensors, got "
                        f"{type(extras).__name__}")
    extras = list(extras)
    for i, e in enumerate(extras):
        if isinstance(e, torch.Tensor) and e.requires_grad and \
                torch.is_grad_enabled():
            raise NotImplementedError(
                f"extras[{i}] requires grad: the derived backward computes "
                f"dQ, dK and dV only, not the gradient of what the regions "
                f"read (detach it, or compute that gradient elsewhere)")
    o, lse = _attention_ir_op(q, k, v, extras, ir,
                              _flag("deterministic", deterministic))
    return (o, lse) if return_lse else o
