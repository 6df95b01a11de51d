"""V's layout for Hopper's FP8 kernels, with torch's ops alone: the fa4
package's torch op uses it, and so do the H200 benchmarks, which load this
file by itself (the package's native extension is not built there)."""

import torch

# The vt layout's key order within each group of 16: position k = 4t + 2h
# + e holds key 8h + 2t + e (fa4/Runtime/Fp8Value.h, vtKeyAt; the tests hold
# this to fa4rt_prepare_fp8_value).
_VT_KEYS = (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)


def prepare_fp8_value(v):
    """V (batch, seq_k, kv_heads, head_dim) float8_e4m3fn as Hopper's FP8
    kernels read it ("vt", docs/FP8.md): (batch, kv_heads, head_dim,
    16 * ceil(seq_k / 16)), contiguous, the keys of each 16 permuted, the
    padding keys +0.0; with torch's ops on v's own device."""
    if not isinstance(v, torch.Tensor) or v.dtype != torch.float8_e4m3fn \
            or v.dim() != 4:
        raise ValueError("prepare_fp8_value takes V as a (batch, seq_k, "
                         "kv_heads, head_dim) float8_e4m3fn tensor, got "
                         + (f"{v.dtype} of shape {tuple(v.shape)}"
                            if isinstance(v, torch.Tensor)
                            else type(v).__name__))
    batch, seq_k, heads, dim = v.shape
    padded = -(-seq_k // 16) * 16
    # Bytes: the permutation moves them as they are (and pad and gather
    # take uint8 on every device).
    keys_last = v.view(torch.uint8).permute(0, 2, 3, 1)
    if padded != seq_k:
        keys_last = torch.nn.functional.pad(keys_last, (0, padded - seq_k))
    order = torch.tensor(_VT_KEYS, dtype=torch.long, device=v.device)
    vt = keys_last.reshape(batch, heads, dim, padded // 16, 16)
    vt = vt.index_select(4, order).reshape(batch, heads, dim, padded)
    return vt.contiguous().view(torch.float8_e4m3fn)
