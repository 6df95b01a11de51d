"""fa4: FlashAttention-4 kernels for NVIDIA Blackwell, compiled from one op.

Two calls cover most uses:

    import fa4, torch
    o = fa4.attention(q, k, v, causal=True)        # torch tensors

    kernel = fa4.compile(head_dim=128, q_heads=32, kv_heads=8, mask="causal")
    kernel.cubin, kernel.manifest, kernel.ptx, kernel.ir("scheduler")

Variants written as IR (score_mod / mask_mod regions reading extra tensors,
tensor entries, heads-first layouts) compile from their entry IR with
``fa4.compile_ir(text)``; the kernel then takes the extras:
``kernel(q, k, v, o, extras=[slopes])``.

``attention`` takes tensors in the layout of FlashAttention's
``flash_attn_func``: q (batch, seq_q, q_heads, head_dim), k and v (batch,
seq_k, kv_heads, head_dim), fp16 or bf16 — v (and O) may have a head dim of
their own, as DeepSeek-V3's (192, 128). CUDA tensors run on the GPU in the
current stream; CPU tensors run in fa4-emu, the PTX emulator (slow: for tests
and CI). Kernels are compiled on first use and kept in the compile cache
(``$FA4_CACHE_DIR``, default ``~/.cache/fa4``), so a later process finds them
there in milliseconds.

Every failure of fa4 itself raises ``fa4.CompileError`` or ``fa4.LaunchError``
(both ``RuntimeError``) with fa4's message; bad arguments raise ``ValueError``
or ``TypeError`` naming the argument. ``attention`` is differentiable: its
backward (``torch.ops.fa4.attention_backward``) runs fa4's backward kernels
(``fa4.compile_backward``: the GPU's own chip's for CUDA tensors — FA4's
TMEM schedule on a B200/B300, FA3's on an H100/H200 — and the default
chip's, Blackwell's, in fa4-emu for CPU tensors); for variants whose
backward is not built (seqused_k, paged caches, varlen), ``backward()``
raises ``NotImplementedError`` saying so, never a silent zero gradient.
"""

from __future__ import annotations

import collections.abc
import importlib.util
import json
import numbers
import operator
import sys
import threading
from typing import Optional, Sequence

from . import _capi, _fa4
from ._capi import LaunchError
from ._fa4 import CompileError

# fa4._torch (the custom ops), imported at the end of this module when
# torch is installed: the attention functions read this global, so that
# torch.compile traces them with no import or module search inside.
_ops = None

# Whether a launch on CPU tensors runs the kernel in the emulator. Private:
# fa4's argument fuzzer (python/tests/fuzz_arguments.py --execute-every)
# turns it off to check every layer above the emulator at speed; a launch
# then makes every check and the plan, and leaves the outputs as they were.
_emulator_executes = True

__all__ = ["BackwardKernel", "CompileError", "Kernel", "LaunchError",
           "attention", "attention_ir", "attention_varlen",
           "attention_with_kvcache",
           "backward_ir", "compile", "compile_backward", "compile_backward_ir",
           "compile_ir", "split_workspace_words", "stages"]

_DTYPES = {"fp16": "fp16", "float16": "fp16", "half": "fp16",
           "bf16": "bf16", "bfloat16": "bf16",
           "e4m3": "e4m3", "float8_e4m3fn": "e4m3"}


def stages() -> list:
    """The stages ``Kernel.ir`` prints, in pipeline order."""
    return list(_fa4.ir_stages())


class Kernel:
    """A compiled kernel: its cubin, PTX and launch manifest.

    Calling it launches it on tensors as they are, with their strides:
    ``kernel(q, k, v, o, lse=None, extras=())``, O and the LSE written in
    place; see ``attention`` for the layouts. ``extras`` are the tensors a
    kernel compiled from IR with regions reads (``manifest["extras"]``:
    their dtypes and shapes), dense and row-major, on q's device. On the GPU nothing is copied; on the CPU
    the emulator works on copies of the elements in its own memory, laid
    out with the tensors' own strides (so a kernel compiled for a static
    layout runs there too), and writes O's (and the LSE's) back.
    """

    def __init__(self, native, backward_of=None, ir_of=None):
        self._native = native
        self.manifest = json.loads(native.manifest_json)
        self._launcher = None
        self._launcher_lock = threading.Lock()
        # compile_backward's arguments for this kernel's variant (None for a
        # kernel compiled from IR, or one whose backward is not built).
        self._backward_of = backward_of
        # compile_backward_ir's for a kernel compiled from IR: its text,
        # target and sm_count.
        self._ir_of = ir_of

    @property
    def cubin(self) -> bytes:
        """The cubin (for the manifest's target), as ptxas
        assembled it."""
        return self._native.cubin

    @property
    def ptx(self) -> str:
        return self._native.ptx

    @property
    def from_cache(self) -> bool:
        """Whether the compile cache held this compilation."""
        return self._native.from_cache

    def ir(self, stage: str = "scheduler") -> str:
        """The kernel's IR after ``stage`` (see ``fa4.stages()``): "entry",
        the pipeline's stages ("tile" ... "nvvm", "binary"), "llvm", "ptx".
        Compiles again up to that stage."""
        return self._native.ir(_string("stage", stage))

    def _capi_kernel(self):
        """The kernel in libfa4rt (fa4._capi), made once from the
        compilation in memory: every launch goes through the C API, the
        one binding of the runtime."""
        with self._launcher_lock:
            if self._launcher is None:
                native = self._native
                try:
                    self._launcher = _capi.create_kernel(
                        native.manifest_json, native.ptx, native.cubin,
                        library=_runtime_library(),
                        name=f"fa4.Kernel for {self.manifest.get('target')}")
                except _capi.LoadError as error:
                    raise LaunchError(str(error)) from None
            return self._launcher

    def __call__(self, q, k, v, o, lse=None, *, extras: Sequence = (),
                 workers: int = 0, seed: int = 1,
                 stream: Optional[int] = None):
        q, k, v = (_array(name, t) for name, t in (("q", q), ("k", k), ("v", v)))
        o = _array("o", o, written=True)
        lse = None if lse is None else _array("lse", lse, written=True)
        if isinstance(extras, (str, bytes)) or hasattr(extras, "__dlpack__") \
                or not hasattr(extras, "__iter__"):
            raise TypeError(f"extras must be a sequence of tensors, got "
                            f"{type(extras).__name__}")
        extras = [_array(f"extra{i}", e) for i, e in enumerate(extras)]
        workers = _integer("workers", workers, 0, 1 << 32)
        seed = _integer("seed", seed, 0, 1 << 64)
        if stream is not None:
            stream = _integer("stream", stream, 0, 1 << 64)
        device = q.device.type
        if device not in ("cuda", "cpu"):
            raise ValueError(f"q: on a {device} device; fa4 runs CUDA tensors "
                             "on the GPU and CPU tensors in the emulator")
        self._capi_kernel()(q, k, v, o, lse, extras, stream, workers=workers,
                            seed=seed, plan_only=not _emulator_executes)

    def backward(self, deterministic: bool = False) -> "BackwardKernel":
        """The backward of this kernel's variant (``compile_backward`` with
        its variant, target and sm_count; for a kernel compiled from IR,
        ``compile_backward_ir`` of its IR: the same regions and extras):
        dQ, dK and dV from the O and LSE this kernel writes (compile it
        with ``lse=True``, or IR that writes the LSE, to have it). A kernel
        with seqused_k, a paged cache, split-KV, varlen, a V head dim of
        its own or a head dim other than 32, 64, 96 or 128 has none yet:
        NotImplementedError (IR: CompileError naming what)."""
        if self._ir_of is not None:
            ir, target, sm_count = self._ir_of
            return compile_backward_ir(ir, target, sm_count=sm_count,
                                       deterministic=deterministic)
        if self._backward_of is None:
            raise NotImplementedError(
                "this kernel's backward is not built: fa4 compiles the "
                "backward of a variant fa4.compile describes without "
                "seqused_k, page_size, num_splits, varlen or a v_head_dim "
                "of its own, at head dim 32, 64, 96 or 128")
        return compile_backward(**self._backward_of,
                                deterministic=deterministic)

    def __repr__(self):
        m = self.manifest
        variant = m.get("attention", {})
        return (f"fa4.Kernel({m.get('target')}, {variant}, "
                f"{len(self.cubin)} bytes of cubin)")


class BackwardKernel:
    """The backward of a variant, compiled (``compile_backward``,
    ``Kernel.backward``): three kernels in one cubin and PTX — delta and
    the cleared dQ accumulator, the main kernel (dK, dV, dQ's parts), dQ
    from the accumulator — and their manifest (kind "backward";
    docs/Backward.md), for Blackwell (sm_100a, sm_103a: FA4's TMEM
    schedule) or Hopper (sm_90a: FA3's).

    Calling it runs the three kernels in order:
    ``kernel(q, k, v, o, dout, lse, dq, dk, dv, delta, dq_accum)`` — q, k,
    v, o as the forward took and gave them, dout like o, the forward's LSE
    (batch, q_heads, seq_q) float32; dq like q, dk and dv like k, written;
    delta (batch, q_heads, seq_q) and dq_accum (q's sizes) float32 dense
    scratch the kernels fill. CUDA tensors run on the GPU (in `stream`, else
    torch's current stream), CPU tensors in fa4-emu (`workers`, `seed`).
    """

    def __init__(self, native):
        self._native = native
        self.manifest = json.loads(native.manifest_json)
        self._launcher = None
        self._launcher_lock = threading.Lock()

    @property
    def cubin(self) -> bytes:
        return self._native.cubin

    @property
    def ptx(self) -> str:
        return self._native.ptx

    @property
    def from_cache(self) -> bool:
        """Whether the compile cache held this compilation."""
        return self._native.from_cache

    def _capi_kernel(self):
        with self._launcher_lock:
            if self._launcher is None:
                native = self._native
                try:
                    self._launcher = _capi.create_backward(
                        native.manifest_json, native.ptx, native.cubin,
                        library=_runtime_library(),
                        name=f"fa4.BackwardKernel for "
                             f"{self.manifest.get('target')}")
                except _capi.LoadError as error:
                    raise LaunchError(str(error)) from None
            return self._launcher

    def __call__(self, q, k, v, o, dout, lse, dq, dk, dv, delta, dq_accum, *,
                 extras: Sequence = (), workers: int = 0, seed: int = 1,
                 stream: Optional[int] = None):
        tensors = [_array(name, t, written=name in ("dq", "dk", "dv", "delta",
                                                    "dq_accum"))
                   for name, t in zip(_capi.BACKWARD_TENSORS,
                                      (q, k, v, o, dout, lse, dq, dk, dv,
                                       delta, dq_accum))]
        if isinstance(extras, (str, bytes)) or hasattr(extras, "__dlpack__") \
                or not hasattr(extras, "__iter__"):
            raise TypeError(f"extras must be a sequence of tensors, got "
                            f"{type(extras).__name__}")
        extras = [_array(f"extra{i}", e) for i, e in enumerate(extras)]
        workers = _integer("workers", workers, 0, 1 << 32)
        seed = _integer("seed", seed, 0, 1 << 64)
        if stream is not None:
            stream = _integer("stream", stream, 0, 1 << 64)
        device = tensors[0].device.type
        if device not in ("cuda", "cpu"):
            raise ValueError(f"q: on a {device} device; fa4 runs CUDA tensors "
                             "on the GPU and CPU tensors in the emulator")
        self._capi_kernel()(*tensors, extras=extras, stream=stream,
                            workers=workers, seed=seed)

    def __repr__(self):
        m = self.manifest
        return (f"fa4.BackwardKernel({m.get('target')}, "
                f"{m.get('attention', {})}, {len(self.cubin)} bytes of cubin)")


def _runtime_library():
    """The libfa4rt.so built with this package (beside it), so that a
    $FA4RT_LIBRARY meant for fa4._capi's own users does not redirect it;
    None (the C API binding's search) when there is none beside it."""
    import os
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libfa4rt.so")
    return beside if os.path.exists(beside) else None


def _read_only(value) -> bool:
    """Whether an array that is not a torch tensor says it may not be
    written (numpy's flags, the buffer protocol): DLPack drops that."""
    flags = getattr(value, "flags", None)
    if flags is not None and getattr(flags, "writeable", True) is False:
        return True
    try:
        return memoryview(value).readonly
    except (TypeError, ValueError, BufferError):
        return False


def _array(name, value, written=False):
    """`value` as a launch takes it: a torch tensor (any other array with
    DLPack, such as a numpy array, through ``torch.from_dlpack``; a
    read-only one refused for an output, `written`), detached (the launch
    writes O in place, outside autograd)."""
    if not hasattr(value, "__dlpack__"):
        raise TypeError(f"{name} must be a tensor (torch, or any array with "
                        f"__dlpack__), got {type(value).__name__}")
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            raise ImportError("a launch takes torch tensors: install "
                              "torch") from None
    if not isinstance(value, torch.Tensor):
        if written and _read_only(value):
            raise ValueError(f"{name}: the array is read-only; the kernel "
                             f"writes it in place")
        try:
            value = torch.from_dlpack(value)
        except Exception as error:  # noqa: BLE001 - any failure of a foreign __dlpack__
            raise TypeError(f"{name}: not an array torch can take through "
                            f"DLPack: {type(error).__name__}: {error}") from None
    if value.requires_grad:
        value = value.detach()
    return value


def _integer(name, value, low: int = -(1 << 63), high: int = 1 << 63) -> int:
    """`value` as an int in [low, high) (the native layer's int64 by
    default), or a TypeError / ValueError naming `name`."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not isinstance(value, numbers.Integral):
        # An integer scalar of another library (a 0-d integer tensor).
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an int, got {value!r}") from None
    value = int(value)
    if not low <= value < high:
        raise ValueError(f"{name} must be in [{low}, {high}), got {value}")
    return value


def _real(name, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    return float(value)


def _flag(name, value) -> bool:
    # numpy's bool is no int; it is taken as Python's bool is.
    numpy = sys.modules.get("numpy")
    if not isinstance(value, (bool, int)) and not (
            numpy is not None and isinstance(value, numpy.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _window_pair(window):
    """`window` as (left, right) ints: any sequence of two (a tuple, a list,
    a numpy array), None as (-1, -1)."""
    if window is None:
        return -1, -1
    try:
        pair = (not isinstance(window, (str, bytes, collections.abc.Mapping))
                and hasattr(window, "__getitem__") and len(window) == 2)
    except TypeError:  # no length (a 0-d array)
        pair = False
    if not pair:
        raise ValueError(f"window must be (left, right), got {window!r}")
    return (_integer("window[0]", window[0]),
            _integer("window[1]", window[1]))


def _string(name, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        # A lone surrogate has no UTF-8 form: the extension could not take it.
        raise ValueError(f"{name} is not valid Unicode text: {error.reason} "
                         f"at index {error.start}") from None
    return value


def _variant(mask, window):
    """The one normalization of a mask and a window, for ``compile`` and
    ``attention`` alike: (mask, left, right) as the verifier takes them.

    A window is (left, right), each -1 (that side unbounded) or a number of
    keys; (-1, -1), or None, is no window. A window with a bounded side
    makes the mask "window" (mask "none" or "window"); with mask "causal" it
    is FlashAttention's causal sliding window: nothing visible right of the
    diagonal (right becomes 0), and with left unbounded it is the causal
    mask itself."""
    mask = _string("mask", mask)
    if mask not in ("none", "causal", "window"):
        raise ValueError(f"mask must be none, causal or window, got {mask!r}")
    left, right = _window_pair(window)
    for name, bound in (("left", left), ("right", right)):
        if bound < -1:
            raise ValueError(f"window {name} must be -1 (unbounded) or a "
                             f"number of keys, got {bound}")
    if left == -1 and right == -1:
        if mask == "window":
            raise ValueError("mask='window' needs window=(left, right) with a "
                             "bounded side")
        return mask, -1, -1
    if mask == "causal":
        return ("causal", -1, -1) if left == -1 else ("window", left, 0)
    return "window", left, right


_memo = {}
_memo_lock = threading.Lock()


def _memoized(key, make):
    """The kernel compiled under `key` in this process, else `make()`'s
    (compiled outside the lock; two threads racing keep the first)."""
    with _memo_lock:
        kernel = _memo.get(key)
    if kernel is not None:
        return kernel
    kernel = make()
    with _memo_lock:
        return _memo.setdefault(key, kernel)

# The chips fa4 compiles for (the extension's table, fa4/Target/Target.h);
# the first is the default target.
_CHIPS = tuple(_fa4.chips())
_DEFAULT_TARGET = _CHIPS[0]["name"]


def compile(head_dim: int = 128, q_heads: int = 32, kv_heads: int = 8,
            mask: str = "none", dtype: str = "fp16", lse: bool = False,
            window: Optional[Sequence[int]] = None,
            softcap: Optional[float] = None, scale: Optional[float] = None,
            target: Optional[str] = None, *, cache: bool = True,
            rescale_threshold: float = 8.0,
            exp2_emulation_fraction: Optional[float] = None,
            sm_count: int = 0, seqused_k: bool = False,
            page_size: int = 0, num_splits: int = 1,
            varlen: bool = False, backward: bool = False,
            v_head_dim: Optional[int] = None, two_cta: str = "auto") -> Kernel:
    """Compiles one attention variant to a ``Kernel``.

    head_dim: Q and K's (32, 64, 96, 128, 192 or 256); v_head_dim: V and
    O's (32, 64, 96, 128 or 256, at most head_dim), None for head_dim's —
    ``head_dim=192, v_head_dim=128`` is DeepSeek-V3's prefill attention;
    256 is Gemma's (on Blackwell one Q tile a task: docs/HeadDims.md).
    dtype: "fp16",
    "bf16" or "e4m3" (FP8 q, k and v, a bf16 O, three (batch, kv_heads)
    float32 descale tables as the last extras; sm_90a's kernels read V in
    the layout ``fa4._torch.prepare_fp8_value`` makes, the manifest's "vt"
    map, Blackwell's read V as it is: docs/FP8.md). target: the chip
    ("sm_100a", "sm_103a" or "sm_90a"); None for the default.

    mask: "none", "causal" (bottom-right aligned) or "window"; window:
    (left, right) keys visible around the diagonal, -1 unbounded (with
    mask="window", or alone, which implies it; with mask="causal", right is
    0, as in ``attention``); softcap: None or 0 for none;
    scale: None for 1/sqrt(head_dim). ``seqused_k``: the kernel takes a
    (batch,) int32 table of each sequence's keys as an extra (``kernel(q, k, v, o, extras=[seqused_k])``); ``page_size``:
    K and V are a paged cache (num_blocks, page_size, kv_heads, head_dim)
    read through a (batch, max_blocks) int32 block table, an extra after the
    seqused_k table (``extras=[seqused_k, block_table]``, or
    ``[block_table]`` alone). ``num_splits`` (2 to 128): split-KV, each
    task's keys cut into that many parts on CTAs of their own and merged
    exactly by the last to finish; the kernel's last extra is then an int32
    workspace of at least ``split_workspace_words(kernel, batch, seq_q)``
    words whose first 4 · tiles · rows words (the arrival counters) must be
    zero before a launch. A launch leaves its own counters zero, so a
    workspace zeroed once serves every later launch of the same batch and
    seq_q; one with more tiles or rows (a larger batch, a longer seq_q)
    needs its counters zeroed again, and concurrent launches need one each.
    ``varlen``: variable-length batches (FlashAttention's varlen layout): q,
    k, v and o packed (1, total, heads, head_dim), sequence b being rows
    [cu[b], cu[b + 1]) of two (batch + 1,) int32 tables, extras after the
    seqused_k table (``extras=[cu_seqlens_q, cu_seqlens_k]``). ``cache`` uses the
    compile cache; within one process a variant is compiled once either way.
    ``backward``: compile the variant's backward too, now (the compile
    cache then holds both; ``kernel.backward()`` gives it, and compiles it
    on first use otherwise). ``exp2_emulation_fraction``: the share of the
    softmax's exponentials the kernel computes with a polynomial on the FMA
    units beside MUFU, 0 to 1; None for the target's own (on sm_100a 0.125,
    as FA4's one-CTA kernels; 0.1875 in a dense CTA pair without a
    score_mod, as FA4's 2-CTA kernel; 0.3125 for e4m3; 0 on sm_103a, whose
    MUFU is twice as fast; on sm_90a 0.125 for fp16/bf16 at head dims up to
    64, where MUFU bounds a block, else 0).
    ``rescale_threshold``: the online softmax rescales O when a row's max
    moves by more than this many powers of two (0: whenever it moves);
    e4m3 kernels always take 0 (their probabilities fill e4m3's range).
    ``two_cta``: Blackwell's forward as CTA pairs (clusters of two sharing
    ``tcgen05.mma.cta_group::2``; the kernel's ``manifest`` then says
    ``"cluster": 2``): "auto" (pairs for dense fp16/bf16 head dim 128
    without a causal mask or a window, as FlashAttention-4), "on" (refused,
    with the reason, where the pair schedule is not built) or "off";
    docs/TwoCta.md.
    """
    head_dim = _integer("head_dim", head_dim)
    if v_head_dim is None:
        v_head_dim = head_dim
    else:
        v_head_dim = _integer("v_head_dim", v_head_dim)
        if v_head_dim < 1:
            raise ValueError(f"v_head_dim must be positive (None: head_dim's), "
                             f"got {v_head_dim}")
    q_heads = _integer("q_heads", q_heads)
    kv_heads = _integer("kv_heads", kv_heads)
    sm_count = _integer("sm_count", sm_count, 0)
    seqused_k = _flag("seqused_k", seqused_k)
    page_size = _integer("page_size", page_size, 0, 1 << 31)
    num_splits = _integer("num_splits", num_splits, 1, 129)
    varlen = _flag("varlen", varlen)
    key_dtype = _DTYPES.get(str(dtype).replace("torch.", ""))
    if key_dtype is None:
        raise ValueError(f"dtype must be fp16, bf16 or e4m3, got {dtype!r}")
    mask, left, right = _variant(mask, window)
    lse = _flag("lse", lse)
    scale = None if scale is None else _real("scale", scale)
    softcap = 0.0 if softcap is None else _real("softcap", softcap)
    if target is None:
        target = _DEFAULT_TARGET
    target = _string("target", target)
    cache = _flag("cache", cache)
    rescale_threshold = _real("rescale_threshold", rescale_threshold)
    exp2_emulation_fraction = _exp2_fraction(exp2_emulation_fraction)
    backward = _flag("backward", backward)
    two_cta = _string("two_cta", two_cta)
    if two_cta not in ("auto", "on", "off"):
        raise ValueError(f"two_cta must be auto, on or off, got {two_cta!r}")
    key = (head_dim, q_heads, kv_heads, mask, left, right, key_dtype, lse,
           scale, softcap, target, rescale_threshold, exp2_emulation_fraction,
           sm_count, seqused_k, page_size, num_splits, varlen, v_head_dim,
           two_cta)
    backward_of = None
    if not (seqused_k or page_size or num_splits > 1 or varlen or
            v_head_dim != head_dim or head_dim not in _BACKWARD_HEAD_DIMS):
        backward_of = dict(head_dim=head_dim, q_heads=q_heads,
                           kv_heads=kv_heads, mask=mask,
                           window=(left, right), dtype=key_dtype,
                           softcap=softcap, scale=scale, target=target,
                           cache=cache, sm_count=sm_count)
    kernel = _memoized(key, lambda: Kernel(_fa4.compile(
        head_dim, q_heads, kv_heads, mask, left, right, key_dtype, lse, scale,
        softcap, target, cache, rescale_threshold, exp2_emulation_fraction,
        sm_count, seqused_k, page_size, num_splits, varlen, v_head_dim,
        two_cta), backward_of))
    if backward:
        # Compiled now (or found in the memo: fa4's memo holds the
        # backward as it holds the forward), its failure raised now.
        kernel.backward()
    return kernel


# The chips whose schedule takes the backward to a binary (the chip table's
# "backward"), the first compile_backward's default.
_BACKWARD_CHIPS = tuple(chip["name"] for chip in _CHIPS if chip.get("backward"))
# The head dims the backward is built for (one for Q, K and V).
_BACKWARD_HEAD_DIMS = (32, 64, 96, 128)


def compile_backward(head_dim: int = 128, q_heads: int = 32,
                     kv_heads: int = 8, mask: str = "none",
                     dtype: str = "fp16",
                     window: Optional[Sequence[int]] = None,
                     softcap: Optional[float] = None,
                     scale: Optional[float] = None,
                     target: Optional[str] = None, *, cache: bool = True,
                     sm_count: int = 0,
                     deterministic: bool = False) -> BackwardKernel:
    """Compiles the backward of one attention variant to a
    ``BackwardKernel``: dQ, dK and dV from Q, K, V, O, dO and the forward's
    LSE (fa4.attention_backward). The arguments mean what ``compile``'s of
    the same names do (pass them by name: the order differs). ``target``:
    a chip whose schedule takes the backward to kernels (sm_100a, sm_103a,
    sm_90a; None, the default, the first such chip: sm_100a); another
    raises fa4.CompileError naming the ones that do.
    ``deterministic``: dQ accumulated in a fixed order, the same bits on
    every run (each K/V head's tasks on one CTA, in ascending order). Within one process a variant's backward is
    compiled once; ``cache`` keeps it in the compile cache beside the
    forward's kernels."""
    head_dim = _integer("head_dim", head_dim)
    q_heads = _integer("q_heads", q_heads)
    kv_heads = _integer("kv_heads", kv_heads)
    sm_count = _integer("sm_count", sm_count, 0)
    key_dtype = _DTYPES.get(str(dtype).replace("torch.", ""))
    if key_dtype is None:
        raise ValueError(f"dtype must be fp16 or bf16, got {dtype!r}")
    mask, left, right = _variant(mask, window)
    scale = None if scale is None else _real("scale", scale)
    softcap = 0.0 if softcap is None else _real("softcap", softcap)
    target = (_BACKWARD_CHIPS[0] if target is None and _BACKWARD_CHIPS
              else _string("target", target))
    if target not in _BACKWARD_CHIPS and target in {c["name"] for c in _CHIPS}:
        level = next(c for c in _CHIPS if c["name"] == target).get(
            "backward_level")
        where = ("its schedule stops at level C, which fa4-sim runs; its "
                 "tcgen05 lowering is not built yet" if level == "schedule"
                 else "its schedule stops at the tile program")
        raise CompileError(
            f"the backward is not lowered to kernels for {target} ({where}); "
            f"it compiles for {', '.join(_BACKWARD_CHIPS) or 'no chip yet'}")
    cache = _flag("cache", cache)
    deterministic = _flag("deterministic", deterministic)
    key = ("backward", head_dim, q_heads, kv_heads, mask, left, right,
           key_dtype, scale, softcap, target, sm_count, deterministic)
    return _memoized(key, lambda: BackwardKernel(_fa4.compile_backward(
        head_dim, q_heads, kv_heads, mask, left, right, key_dtype, scale,
        softcap, target, cache, sm_count, deterministic)))


def split_workspace_words(kernel: Kernel, batch: int, seq_q: int) -> int:
    """The int32 words a split-KV kernel's workspace needs for `batch`
    sequences of `seq_q` queries (0 for a kernel without split-KV): its
    manifest's ``split_workspace_words``."""
    attention = kernel.manifest["attention"]
    splits = attention.get("num_splits", 1)
    if splits <= 1:
        return 0
    q_heads, kv_heads = attention["q_heads"], attention["kv_heads"]
    batch = _integer("batch", batch, 0)
    seq_q = _integer("seq_q", seq_q, 0)
    # AttentionMath.h's SplitWorkspaceLayout: tiles of min(128, seq_q · g)
    # packed rows.
    rows = min(128, seq_q * _packing(q_heads, kv_heads))
    return (_split_tiles(q_heads, kv_heads, batch, seq_q) * rows *
            (4 * (1 + splits) +
             splits * attention.get("v_head_dim", attention["head_dim"])))


def _packing(q_heads, kv_heads):
    """AttentionMath.h's gqaPacking: the query heads a tile packs."""
    ratio = q_heads // kv_heads
    return min(ratio & -ratio, 16)


def _split_counter_words(kernel: Kernel, batch: int, seq_q: int) -> int:
    """The workspace's first words, the arrival counters, that must be zero
    before a split-KV kernel's launch for `batch` sequences of `seq_q`
    queries: 4 per row of each tile."""
    attention = kernel.manifest["attention"]
    q_heads, kv_heads = attention["q_heads"], attention["kv_heads"]
    rows = min(128, seq_q * _packing(q_heads, kv_heads))
    return 4 * _split_tiles(q_heads, kv_heads, batch, seq_q) * rows


def _split_tiles(q_heads, kv_heads, batch, seq_q):
    """The 128-row tiles of packed query rows (AttentionMath.h's
    splitTiles): batch · head groups · ceil(seq_q · packing / 128)."""
    packing = _packing(q_heads, kv_heads)
    return batch * (q_heads // packing) * -(-seq_q * packing // 128)


def _exp2_fraction(value):
    """The exp2_emulation_fraction argument as the extension takes it: a
    share in [0, 1], or -1 for the target's own (None)."""
    if value is None:
        return -1.0
    value = _real("exp2_emulation_fraction", value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"exp2_emulation_fraction must be in [0, 1] or None "
                         f"(the target's own), got {value}")
    return value


def _ir_arguments(ir, target, cache, sm_count):
    """compile_ir's and compile_backward_ir's shared arguments, checked."""
    if not isinstance(ir, str):
        raise TypeError(f"ir must be a str of MLIR, got {type(ir).__name__}")
    return (_string("ir", ir), _string("target", target),
            _flag("cache", cache), _integer("sm_count", sm_count, 0))


def compile_ir(ir: str, target: str = _DEFAULT_TARGET, *, cache: bool = True,
               rescale_threshold: float = 8.0,
               exp2_emulation_fraction: Optional[float] = None,
               sm_count: int = 0) -> Kernel:
    """Compiles entry IR (text, as fa4c reads it: one ``func.func`` holding
    one ``fa4.attention``, with any attributes, ``score_mod`` / ``mask_mod``
    regions and extras) to a ``Kernel``; see docs/Variants.md. Within one
    process the same text is compiled once; ``cache`` uses the compile
    cache across processes. Parse and verifier errors raise
    ``fa4.CompileError`` with the diagnostics."""
    ir, target, cache, sm_count = _ir_arguments(ir, target, cache, sm_count)
    rescale_threshold = _real("rescale_threshold", rescale_threshold)
    exp2_emulation_fraction = _exp2_fraction(exp2_emulation_fraction)
    key = ("ir", ir, target, rescale_threshold, exp2_emulation_fraction,
           sm_count)
    return _memoized(key, lambda: Kernel(
        _fa4.compile_ir(ir, target, cache, rescale_threshold,
                        exp2_emulation_fraction, sm_count),
        ir_of=(ir, target, sm_count)))


def backward_ir(ir: str, deterministic: bool = False, *,
                with_lse: bool = False) -> str:
    """The backward entry IR of a forward entry (text, as ``compile_ir``
    takes it): ``<name>_backward(q, k, v, o, dout, lse, dq, dk, dv, delta,
    dq_accum, extras...)`` holding the ``fa4.attention_backward`` of the
    same attention — its mask, window, scale, softcap, ``score_mod`` /
    ``mask_mod`` regions and extras — on the forward's tensor types (the
    LSE the forward's, else [batch, q_heads, seq_q] float32). With
    ``with_lse``, instead, the forward made to write its LSE (an argument
    after O, when it writes none), which the backward reads. A forward the
    backward does not take (FP8, a V head dim of its own, a block mask,
    seqused_k, a paged cache, split-KV, varlen) raises
    ``fa4.CompileError`` naming it."""
    if not isinstance(ir, str):
        raise TypeError(f"ir must be a str of MLIR, got {type(ir).__name__}")
    return _fa4.derive_ir(_string("ir", ir),
                          _flag("deterministic", deterministic),
                          _flag("with_lse", with_lse))


def compile_backward_ir(ir: str, target: str = _DEFAULT_TARGET, *,
                        deterministic: bool = False, cache: bool = True,
                        sm_count: int = 0) -> "BackwardKernel":
    """Compiles the backward of entry IR to a ``BackwardKernel``: IR
    holding an ``fa4.attention_backward``, or a forward entry whose
    backward ``backward_ir`` derives (so ``compile_ir(ir)`` and
    ``compile_backward_ir(ir)`` are a variant's forward and backward, its
    regions differentiated by the compiler). Call it with the forward's
    extras: ``kernel(..., extras=[...])``. ``deterministic`` accumulates
    dQ in a fixed order. Errors raise ``fa4.CompileError``."""
    ir, target, cache, sm_count = _ir_arguments(ir, target, cache, sm_count)
    deterministic = _flag("deterministic", deterministic)
    key = ("backward-ir", ir, target, deterministic, sm_count)
    return _memoized(key, lambda: BackwardKernel(
        _fa4.compile_backward_ir(ir, target, cache, sm_count, deterministic)))


def attention(q, k, v, causal: bool = False,
              window: Sequence[int] = (-1, -1), softcap: float = 0.0,
              scale: Optional[float] = None, return_lse: bool = False,
              seqused_k=None, deterministic: bool = False, q_descale=None,
              k_descale=None, v_descale=None):
    """Attention of torch tensors, as FlashAttention's ``flash_attn_func``.

    q: (batch, seq_q, q_heads, head_dim); k, v: (batch, seq_k, kv_heads,
    head_dim), fp16 or bf16, q_heads a multiple of kv_heads (GQA/MQA); v
    may have a head dim of its own (32, 64, 96, 128 or 256, at most q's:
    (192, 128) is DeepSeek-V3's), which O then has.
    causal: bottom-right aligned causal mask; window: (left, right) keys
    visible around the diagonal, -1 unbounded (with causal, right is 0);
    softcap: 0 for none; scale: None for 1/sqrt(head_dim); seqused_k: None,
    or a (batch,) int32 tensor on q's device, sequence b attending to its
    first seqused_k[b] keys only (clamped to [0, seq_k]), its masks aligned
    bottom-right to that length (FlashAttention's ``seqused_k``). Returns O
    (like q, with v's head dim), and with ``return_lse`` also the log-sum-exp (batch, q_heads,
    seq_q) in float32; an empty problem (batch, seq_q or seq_k 0) returns
    at once, rows without keys O = 0 and LSE = -inf. Differentiable with
    respect to q, k and v (the LSE is an output without a gradient, as
    FlashAttention's): the backward (fa4.attention_backward) runs fa4's
    backward kernels — on the GPU for CUDA tensors, its own chip's
    (Blackwell's or Hopper's; for seqused_k calls ``backward()`` raises
    NotImplementedError), in the emulator for CPU tensors (sm_100a's);
    ``deterministic``: the backward adds dQ's parts in a fixed order (the
    same bits on every run; each K/V head's work on one CTA, so slower
    where batch · kv_heads is below the GPU's SM count), as
    FlashAttention's ``deterministic``. CUDA tensors run on the GPU in the
    current stream, CPU tensors in the emulator. Inputs are read in place
    with any strides a TMA tensor map can express — head_dim contiguous, the other strides
    multiples of 16 bytes, a 16-byte aligned start, e.g.
    ``x.transpose(1, 2)`` of a (batch, heads, seq, head_dim) tensor; others
    are copied to contiguous ones first.

    FP8: q, k and v ``torch.float8_e4m3fn``, with ``q_descale``,
    ``k_descale``, ``v_descale`` each None (1) or a (batch, kv_heads)
    float32 tensor on q's device (FlashAttention-3's FP8 interface: the
    attention of q · q_descale, k · k_descale, v · v_descale, each factor
    the sequence's and the query's K/V head's); O is bfloat16; q and k's head dim
    64, 96, 128, 192 or 256, v's 64, 96, 128 or 256 (at most q's). The kernel is the
    GPU's (Hopper's or Blackwell's) for CUDA tensors, the default chip's in
    the emulator for CPU ones; for Hopper's, V is transposed and its keys
    permuted into the layout it reads (docs/FP8.md) on its own device
    before the launch. Not differentiable.

    This is the ``torch.ops.fa4.attention`` custom op (FP8:
    ``torch.ops.fa4.attention_fp8``), so ``torch.compile`` traces through
    it.
    """
    if _ops is None:
        raise ImportError("fa4.attention takes torch tensors: install torch "
                          "(fa4.compile works without it; a Kernel launches "
                          "torch tensors)")
    if _ops.is_fp8(q) or any(t is not None
                             for t in (q_descale, k_descale, v_descale)):
        _flag("deterministic", deterministic)
        return _ops.attention_fp8(q, k, v, q_descale, k_descale, v_descale,
                                  causal, window, softcap, scale, return_lse,
                                  seqused_k)
    return _ops.attention(q, k, v, causal, window, softcap, scale,
                            return_lse, seqused_k,
                            deterministic=deterministic)


def attention_ir(q, k, v, ir: str, extras: Sequence = (),
                 return_lse: bool = False, deterministic: bool = False):
    """Attention of torch tensors as entry IR describes it — its mask,
    window, scale, softcap, ``score_mod`` / ``mask_mod`` regions — reading
    ``extras`` (the tensors its regions read, in its order), differentiable
    with respect to q, k and v: the compiler derives the backward from the
    same IR (``backward_ir``), differentiating the regions. q, k, v in the
    IR's declared types ((batch, seq, heads, head_dim) views; inputs whose
    strides differ from those the IR declares — the identity layout's, or
    a heads-first one's — are copied into them); the IR
    need not write the LSE (a copy that does is compiled). Returns O, and
    with ``return_lse`` also the LSE (batch, q_heads, seq_q) float32;
    ``deterministic``: the backward adds dQ's parts in a fixed order. An
    empty problem returns O = 0 and LSE = -inf at once. CUDA tensors run
    on their GPU's chip, CPU tensors in the emulator. This is
    the ``torch.ops.fa4.attention_ir`` custom op. IR whose backward is not
    built (FP8, a V head dim of its own, block masks, serving
    tables) raises ``fa4.CompileError``: use ``compile_ir`` for it."""
    if _ops is None:
        raise ImportError("fa4.attention_ir takes torch tensors: install torch")
    return _ops.attention_ir(q, k, v, ir, extras, return_lse, deterministic)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                     max_seqlen_k: int, causal: bool = False,
                     window: Sequence[int] = (-1, -1), softcap: float = 0.0,
                     scale: Optional[float] = None, return_lse: bool = False,
                     seqused_k=None, q_descale=None, k_descale=None,
                     v_descale=None):
    """Attention of a variable-length batch, as FlashAttention's
    ``flash_attn_varlen_func``.

    q: (total_q, q_heads, head_dim), k, v: (total_k, kv_heads, head_dim),
    the sequences packed one after another; cu_seqlens_q, cu_seqlens_k:
    (batch + 1,) int32 tensors on q's device, sequence b being rows
    [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q (and O) and [cu_seqlens_k[b],
    cu_seqlens_k[b + 1]) of k and v. max_seqlen_q, max_seqlen_k: the longest
    sequence's queries and keys, as FlashAttention takes them (checked
    against tables on the CPU; the kernel's grid does not depend on them:
    it has a task per tile of the packed rows and one more per sequence, and
    finds each task's sequence in cu_seqlens_q). causal and
    window align bottom-right to each sequence's own lengths; seqused_k:
    None, or a (batch,) int32 tensor, sequence b attending to its first
    seqused_k[b] keys only. softcap, scale as in ``attention`` (v may have a
    head dim of its own, as there). Returns O
    (total_q, q_heads, v's head_dim) and, with ``return_lse``, the LSE (q_heads,
    total_q) in float32. Rows of q outside every sequence are not written
    (their O and LSE are left as allocated). Tables on the CPU are checked
    here (non-decreasing, inside the packed tensors, no sequence longer
    than the max); on a GPU the kernel clamps every entry to the packed
    tensors instead (reading them would wait for the GPU). This is the
    ``torch.ops.fa4.attention_varlen`` custom op. FP8: q, k and v
    ``torch.float8_e4m3fn`` with ``attention``'s descale tables, a row per
    sequence ((batch, kv_heads) float32), O bfloat16
    (``torch.ops.fa4.attention_varlen_fp8``): Blackwell's kernels (sm_90a's
    FP8 kernels take dense batches only and refuse it by name).
    """
    if _ops is None:
        raise ImportError("fa4.attention_varlen takes torch tensors: install "
                          "torch")
    return _ops.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                   max_seqlen_q, max_seqlen_k, causal, window,
                                   softcap, scale, return_lse, seqused_k,
                                   q_descale, k_descale, v_descale)


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=None,
                           block_table=None, causal: bool = False,
                           window: Sequence[int] = (-1, -1),
                           softcap: float = 0.0,
                           scale: Optional[float] = None,
                           return_lse: bool = False, num_splits: int = 0,
                           q_descale=None, k_descale=None, v_descale=None):
    """Attention against a KV cache, as FlashAttention's
    ``flash_attn_with_kvcache`` (without appending new keys).

    q: (batch, seq_q, q_heads, head_dim); k_cache, v_cache: (batch, seq_k,
    kv_heads, head_dim), contiguous per sequence, or with ``block_table`` a
    paged cache (num_blocks, page_size, kv_heads, head_dim), page_size a
    power of two of at least 16, read through block_table, a (batch,
    max_blocks) int32 tensor (key j of sequence b is row j % page_size of
    block block_table[b, j // page_size]; an entry outside [0, num_blocks)
    reads zeros). cache_seqlens: None (every key: seq_k, or max_blocks *
    page_size), an int, or a (batch,) int32 tensor on q's device: sequence
    b attends to its first cache_seqlens[b] keys, its causal mask and
    window aligned bottom-right to that length. causal, window, softcap,
    scale and return_lse as in ``attention``. num_splits: split-KV
    (flash-decoding), each sequence's keys cut into that many parts on CTAs
    of their own and merged exactly (1: none, at most 128); 0 lets fa4
    choose from the problem and the GPU's SM count (none in the emulator).
    FP8: q, k_cache and v_cache ``torch.float8_e4m3fn`` with the descale
    tables of ``attention`` (O bfloat16): Blackwell's kernels (a Blackwell
    GPU's for CUDA tensors, sm_100a's in the emulator for CPU ones); sm_90a's
    FP8 kernels take dense caches only and refuse these by name.
    """
    if (isinstance(num_splits, numbers.Integral) and
            not isinstance(num_splits, bool) and not 0 <= num_splits <= 128):
        raise ValueError(f"num_splits must be in [0, 128], got {num_splits}")
    num_splits = _integer("num_splits", num_splits, 0, 129)
    if _ops is None:
        raise ImportError("fa4.attention_with_kvcache takes torch tensors: "
                          "install torch")
    if cache_seqlens is not None and not isinstance(cache_seqlens,
                                                    _ops.torch.Tensor):
        count = _integer("cache_seqlens", cache_seqlens, 0, 1 << 31)
        if not isinstance(q, _ops.torch.Tensor):
            raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
        if q.dim() < 1:
            raise ValueError(f"q must be (batch, seq_q, q_heads, head_dim), "
                             f"got shape {tuple(q.shape)}")
        cache_seqlens = _ops.torch.full((q.shape[0],), count,
                                          dtype=_ops.torch.int32,
                                          device=q.device)
    if _ops.is_fp8(q) or any(t is not None
                             for t in (q_descale, k_descale, v_descale)):
        return _ops.attention_fp8(q, k_cache, v_cache, q_descale, k_descale,
                                  v_descale, causal, window, softcap, scale,
                                  return_lse, cache_seqlens, block_table,
                                  num_splits)
    return _ops.attention(q, k_cache, v_cache, causal, window, softcap,
                            scale, return_lse, cache_seqlens, block_table,
                            num_splits)


# With torch installed, fa4.attention is also torch.ops.fa4.attention from
# the start (torch.compile and torch.library.opcheck find it there).
if importlib.util.find_spec("torch") is not None:
    from . import _torch as _ops  # noqa: E402
