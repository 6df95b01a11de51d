"""Shared helpers of the fa4 Python tests: the float64 reference."""

import math

import pytest
import torch


def visible(seq_q, seq_k, causal, window):
    """Which keys each query sees, aligned to the bottom-right corner (as
    FlashAttention): a (seq_q, seq_k) bool tensor."""
    i = torch.arange(seq_q).unsqueeze(1)
    j = torch.arange(seq_k).unsqueeze(0)
    diagonal = i + seq_k - seq_q
    mask = torch.ones(seq_q, seq_k, dtype=torch.bool)
    left, right = window
    if causal:
        right = 0 if (left >= 0 or right >= 0) else right
        if left < 0 and right < 0:
            mask &= j <= diagonal
    if left >= 0:
        mask &= j >= diagonal - left
    if right >= 0:
        mask &= j <= diagonal + right
    return mask


def reference(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """O and LSE in float64 from torch's scaled_dot_product_attention (the
    scores by hand only for softcap, which SDPA cannot express). Rows that
    see no key give O = 0 and LSE = -inf, fa4's convention."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))  # b, h, s, d
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    mask = visible(q.shape[2], k.shape[2], causal, window)
    scores = (q @ k.transpose(-1, -2)) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    if softcap:
        o = torch.softmax(scores, dim=-1) @ v
    else:
        o = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale)
    o = torch.nan_to_num(o, nan=0.0)  # rows that see no key
    return o.transpose(1, 2), lse


@pytest.fixture
def inputs():
    def make(batch, seq_q, seq_k, q_heads, kv_heads, head_dim, dtype, seed=0):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(batch, seq_q, q_heads, head_dim, generator=g)
        k = torch.randn(batch, seq_k, kv_heads, head_dim, generator=g)
        v = torch.randn(batch, seq_k, kv_heads, head_dim, generator=g)
        return q.to(dtype), k.to(dtype), v.to(dtype)
    return make


def write_files(kernel, directory):
    """A kernel's cubin, PTX and manifest in `directory`, as fa4c writes
    them; the manifest's path."""
    m = kernel.manifest
    (directory / m["cubin"]).write_bytes(kernel.cubin)
    (directory / m["ptx"]).write_text(kernel.ptx)
    path = directory / (m["cubin"] + ".json")
    path.write_text(kernel._native.manifest_json)
    return path

