"""fa4.attention as a torch custom op (``torch.ops.fa4.attention``).

The op takes the variant as plain arguments and returns (O, LSE), the LSE
empty when it is not asked for; its fake implementation gives the shapes, so
``torch.compile`` traces through it without running a kernel.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from . import LaunchError, compile

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def _check(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be (batch, seq, heads, head_dim), "
                             f"got shape {tuple(t.shape)}")
    if q.dtype not in _DTYPES:
        raise ValueError(f"q: dtype {q.dtype}; fa4 takes float16 or bfloat16")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name}: dtype {t.dtype}, q is {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, q is on {q.device}")
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree "
                         "on batch or head_dim")


def _tma_ready(t):
    """`t` itself when a tensor map can describe it (head_dim contiguous,
    the other strides multiples of 16 bytes, a 16-byte aligned start), so
    that e.g. a (batch, heads, seq, head_dim) tensor seen through
    ``transpose(1, 2)`` is read in place; else a contiguous copy."""
    sizes, strides = t.shape, t.stride()
    ok = t.data_ptr() % 16 == 0 and (sizes[-1] == 1 or strides[-1] == 1)
    for size, stride in zip(sizes[:-1], strides[:-1]):
        ok = ok and (size == 1 or (stride > 0 and stride * t.element_size() % 16 == 0))
    return t if ok else t.contiguous()


def _variant(q, k, causal, window_left, window_right):
    if window_left >= 0 or window_right >= 0:
        # FlashAttention's convention: causal with a window is the window
        # with nothing visible right of the diagonal.
        return "window", (window_left, 0 if causal else window_right)
    return ("causal" if causal else "none"), None


# The targets fa4 has a schedule for, by compute capability.
_TARGETS = {(9, 0): "sm_90a", (10, 0): "sm_100a"}


def _target(device):
    """The target and the persistent grid's size for tensors on `device`:
    the GPU's own (sm_90a on Hopper, sm_100a on Blackwell, its SM count), or
    sm_100a for CPU tensors, which run in fa4-emu (which runs sm_90a kernels
    too: `fa4.compile(target="sm_90a")` on CPU tensors)."""
    if device.type != "cuda":
        return "sm_100a", 0
    capability = tuple(torch.cuda.get_device_capability(device))
    target = _TARGETS.get(capability)
    if target is None:
        name = torch.cuda.get_device_name(device)
        raise LaunchError(
            f"{name} is sm_{capability[0]}{capability[1]}; fa4 compiles for "
            "sm_90a (Hopper, compute capability 9.0) and sm_100a (Blackwell, "
            "10.0)")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return target, int(sms)


def _kernel(q, k, causal, window_left, window_right, softcap, scale, return_lse):
    mask, window = _variant(q, k, causal, window_left, window_right)
    target, sm_count = _target(q.device)
    return compile(head_dim=q.shape[3], q_heads=q.shape[2], kv_heads=k.shape[2],
                   mask=mask, dtype=_DTYPES[q.dtype], lse=return_lse,
                   window=window, softcap=softcap or None, scale=scale,
                   target=target, sm_count=sm_count)


@torch.library.custom_op("fa4::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  causal: bool, window_left: int, window_right: int,
                  softcap: float, scale: Optional[float],
                  return_lse: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    kernel = _kernel(q, k, causal, window_left, window_right, softcap, scale,
                     return_lse)
    q, k, v = (_tma_ready(t.detach()) for t in (q, k, v))
    batch, seq_q, q_heads, _ = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = (torch.empty((batch, q_heads, seq_q), dtype=torch.float32,
                       device=q.device) if return_lse
           else torch.empty((0,), dtype=torch.float32, device=q.device))
    if q.device.type == "cuda":
        with torch.cuda.device(q.device):
            kernel(q, k, v, o, lse if return_lse else None)
    elif q.device.type == "cpu":
        kernel(q, k, v, o, lse if return_lse else None)
    else:
        raise LaunchError(f"fa4 runs CUDA tensors on the GPU and CPU tensors "
                          f"in the emulator; got a {q.device.type} tensor")
    return o, lse


@_attention_op.register_fake
def _(q, k, v, causal, window_left, window_right, softcap, scale, return_lse):
    batch, seq_q, q_heads, _ = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((batch, q_heads, seq_q) if return_lse else (0,),
                      dtype=torch.float32)
    return o, lse


def attention(q, k, v, causal: bool, window: Sequence[int], softcap: float,
              scale: Optional[float], return_lse: bool):
    _check(q, k, v)
    if len(window) != 2:
        raise ValueError(f"window must be (left, right), got {window!r}")
    o, lse = _attention_op(q, k, v, bool(causal), int(window[0]),
                           int(window[1]), float(softcap),
                           None if scale is None else float(scale),
                           bool(return_lse))
    return (o, lse) if return_lse else o
