"""fa4.attention on CPU tensors (the emulator) against torch's SDPA in
float64, over the variants a user asks for."""

import math

import pytest
import torch

import fa4
from conftest import reference

# (batch, seq_q, seq_k, q_heads, kv_heads, head_dim, dtype, causal, window,
#  softcap, scale, return_lse)
VARIANTS = {
    "fp16-dense-hd128": (1, 256, 256, 8, 8, 128, torch.float16, False, (-1, -1), 0.0, None, False),
    "bf16-causal-gqa-lse": (2, 200, 333, 4, 2, 64, torch.bfloat16, True, (-1, -1), 0.0, None, True),
    "fp16-window-hd96": (1, 190, 300, 4, 1, 96, torch.float16, False, (40, 17), 0.0, None, True),
    "fp16-causal-window": (1, 129, 129, 2, 2, 64, torch.float16, True, (50, -1), 0.0, None, False),
    "bf16-softcap-scale": (1, 150, 150, 2, 1, 128, torch.bfloat16, False, (-1, -1), 15.0, 0.2, True),
    "fp16-causal-sq-gt-sk": (1, 300, 100, 2, 2, 64, torch.float16, True, (-1, -1), 0.0, None, True),
    # GQA ratios 3 (unpacked) and 6 (groups of two, three per K/V head).
    "fp16-causal-gqa3-lse": (2, 70, 150, 6, 2, 64, torch.float16, True, (-1, -1), 0.0, None, True),
    "bf16-window-gqa6": (1, 100, 90, 12, 2, 64, torch.bfloat16, False, (30, 5), 0.0, None, True),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_matches_sdpa(name, inputs):
    (batch, seq_q, seq_k, q_heads, kv_heads, head_dim, dtype, causal, window,
     softcap, scale, return_lse) = VARIANTS[name]
    q, k, v = inputs(batch, seq_q, seq_k, q_heads, kv_heads, head_dim, dtype)
    result = fa4.attention(q, k, v, causal=causal, window=window,
                           softcap=softcap, scale=scale, return_lse=return_lse)
    o, lse = result if return_lse else (result, None)
    assert o.shape == q.shape and o.dtype == q.dtype and o.device == q.device
    want_o, want_lse = reference(q, k, v, causal, window, softcap, scale)
    tolerance = 1e-2 if dtype == torch.float16 else 2e-2
    assert (o.double() - want_o).abs().max().item() <= tolerance
    if return_lse:
        assert lse.shape == (batch, q_heads, seq_q) and lse.dtype == torch.float32
        finite = torch.isfinite(want_lse)
        # Rows that see no key: -inf, as the reference.
        assert torch.equal(torch.isfinite(lse), finite)
        assert (lse.double()[finite] - want_lse[finite]).abs().max().item() <= tolerance


def test_quick_start():
    """The README's example, as written there."""
    q = torch.randn(1, 256, 8, 128, dtype=torch.float16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    o = fa4.attention(q, k, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).double(), k.transpose(1, 2).double(),
        v.transpose(1, 2).double(), is_causal=True).transpose(1, 2)
    assert (o.double() - ref).abs().max().item() < 1e-2


def test_strided_inputs(inputs):
    q, k, v = inputs(2, 130, 96, 4, 2, 64, torch.bfloat16)
    want = fa4.attention(q, k, v, causal=True)
    # (batch, heads, seq, head_dim) storage seen as (batch, seq, heads,
    # head_dim): read in place through the tensor maps' strides.
    qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not qt.is_contiguous()
    assert torch.equal(fa4.attention(qt, kt, vt, causal=True), want)
    # head_dim not contiguous: copied first, same result.
    wide = torch.stack([q, torch.zeros_like(q)], dim=-1).flatten(-2)
    qs = wide[..., ::2]
    assert qs.stride(-1) == 2
    assert torch.equal(fa4.attention(qs, k, v, causal=True), want)


def test_kernel_call_writes_in_place(inputs):
    q, k, v = inputs(1, 128, 160, 4, 2, 64, torch.float16)
    kernel = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                         lse=True)
    o = torch.zeros_like(q)
    lse = torch.zeros(1, 4, 128)
    kernel(q, k, v, o, lse)
    want_o, want_lse = reference(q, k, v, causal=True)
    assert (o.double() - want_o).abs().max().item() <= 1e-2
    assert (lse.double() - want_lse).abs().max().item() <= 1e-2
    # O in (batch, heads, seq, head_dim) storage, written through its strides.
    o_bhsd = torch.zeros(1, 4, 128, 64, dtype=torch.float16)
    kernel(q, k, v, o_bhsd.transpose(1, 2), lse)
    assert torch.equal(o_bhsd.transpose(1, 2), o)
    # O as the first half of each row of a wider buffer: only O's elements
    # are written.
    wide = torch.full((1, 128, 4, 128), 7.0, dtype=torch.float16)
    kernel(q, k, v, wide[..., :64], lse)
    assert torch.equal(wide[..., :64], o)
    assert bool((wide[..., 64:] == 7.0).all())


def test_torch_compile_traces_the_op(inputs):
    q, k, v = inputs(1, 64, 64, 2, 1, 64, torch.float16)

    def f(q, k, v):
        return fa4.attention(q, k, v, causal=True) * 2

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(q, k, v), f(q, k, v))


def test_opcheck(inputs):
    """torch's own checks of the custom op: schema, fake tensors, dispatch."""
    q, k, v = inputs(1, 64, 64, 2, 1, 64, torch.float16)
    torch.library.opcheck(torch.ops.fa4.attention.default,
                          (q, k, v, True, -1, -1, 0.0, None, True))
