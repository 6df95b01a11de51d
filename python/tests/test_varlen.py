"""fa4.attention_varlen on CPU tensors (the emulator): ragged batches packed
(total, heads, head_dim), each sequence against the float64 reference of its
own rows, its masks aligned bottom-right to its own lengths."""

import pytest
import torch

import fa4
from conftest import reference


def packed(lengths_q, lengths_k, q_heads, kv_heads, head_dim, dtype, seed=0,
           spare=0):
    """Q, K, V packed, their cu_seqlens tables, and `spare` rows of Q past
    the last sequence."""
    g = torch.Generator().manual_seed(seed)
    cu = lambda lengths: torch.tensor(
        [0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    cu_q, cu_k = cu(lengths_q), cu(lengths_k)
    q = torch.randn(int(cu_q[-1]) + spare, q_heads, head_dim, generator=g)
    k = torch.randn(int(cu_k[-1]), kv_heads, head_dim, generator=g)
    v = torch.randn(int(cu_k[-1]), kv_heads, head_dim, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype), cu_q, cu_k


def varlen_reference(q, k, v, cu_q, cu_k, causal, window=(-1, -1),
                     softcap=0.0, used=None):
    """O (total_q, heads, dim) and the LSE (heads, total_q), sequence by
    sequence; rows of no sequence NaN."""
    o = torch.full(q.shape, float("nan"), dtype=torch.float64)
    lse = torch.full((q.shape[1], q.shape[0]), float("nan"), dtype=torch.float64)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if used is not None:
            k1 = k0 + max(0, min(int(used[b]), k1 - k0))
        if q1 == q0:
            continue
        if k1 == k0:
            o[q0:q1] = 0
            lse[:, q0:q1] = float("-inf")
            continue
        ob, lb = reference(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                           causal, window, softcap)
        o[q0:q1] = ob[0]
        lse[:, q0:q1] = lb[0]
    return o, lse


def assert_matches(o, lse, want_o, want_lse, tolerance):
    rows = ~torch.isnan(want_o[:, 0, 0])
    assert (o.double()[rows] - want_o[rows]).abs().max().item() <= tolerance
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse) & rows, finite)
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() <= tolerance


@pytest.mark.parametrize("causal,window,q_heads,kv_heads,dtype", [
    (True, (-1, -1), 6, 2, torch.float16),     # GQA 3, causal
    (False, (-1, -1), 8, 2, torch.bfloat16),   # GQA 4 packed
    (False, (40, 0), 4, 4, torch.float16),     # a window
])
def test_ragged(causal, window, q_heads, kv_heads, dtype):
    lengths_q = [0, 1, 127, 129, 60, 128]
    lengths_k = [5, 0, 300, 129, 200, 128]
    q, k, v, cu_q, cu_k = packed(lengths_q, lengths_k, q_heads, kv_heads, 64,
                                 dtype)
    o, lse = fa4.attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q),
                                  max(lengths_k), causal=causal, window=window,
                                  return_lse=True)
    assert o.shape == q.shape and lse.shape == (q_heads, q.shape[0])
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-2
    assert_matches(o, lse, *varlen_reference(q, k, v, cu_q, cu_k, causal,
                                             window), tolerance)


def test_seqused_k_softcap_and_hopper():
    lengths_q, lengths_k = [3, 70, 1], [90, 200, 130]
    q, k, v, cu_q, cu_k = packed(lengths_q, lengths_k, 4, 2, 64, torch.float16,
                                 seed=1)
    used = torch.tensor([0, 150, 129], dtype=torch.int32)
    o = fa4.attention_varlen(q, k, v, cu_q, cu_k, 70, 200, causal=True,
                             softcap=20.0, seqused_k=used)
    want, _ = varlen_reference(q, k, v, cu_q, cu_k, True, softcap=20.0,
                               used=used)
    assert (o.double() - want).abs().max().item() <= 1e-2
    # The Hopper kernel, launched through fa4.compile on the packed tensors.
    kernel = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                         target="sm_90a", varlen=True)
    assert kernel.manifest["attention"]["cu_seqlens_q"] == 0
    o = torch.zeros(1, *q.shape, dtype=q.dtype)
    kernel(q[None], k[None], v[None], o, extras=[cu_q, cu_k])
    want, _ = varlen_reference(q, k, v, cu_q, cu_k, True)
    assert (o[0].double() - want).abs().max().item() <= 1e-2
    with pytest.raises(fa4.LaunchError, match="packed"):
        kernel(q[None].expand(2, -1, -1, -1), k[None].expand(2, -1, -1, -1),
               v[None].expand(2, -1, -1, -1), torch.zeros(2, *q.shape,
                                                          dtype=q.dtype),
               extras=[cu_q, cu_k])
    with pytest.raises(fa4.LaunchError, match="batch \\+ 1"):
        kernel(q[None], k[None], v[None], o, extras=[cu_q, cu_k[:2]])


def test_rows_outside_every_sequence_are_not_written():
    q, k, v, cu_q, cu_k = packed([50, 20], [60, 10], 2, 2, 64, torch.float16,
                                 spare=5)
    kernel = fa4.compile(head_dim=64, q_heads=2, kv_heads=2, varlen=True)
    o = torch.full((1, *q.shape), 7.0, dtype=q.dtype)
    kernel(q[None], k[None], v[None], o, extras=[cu_q, cu_k])
    assert torch.all(o[0, 70:] == 7.0)
    want, _ = varlen_reference(q, k, v, cu_q, cu_k, False)
    assert (o[0, :70].double() - want[:70]).abs().max().item() <= 1e-2


def test_empty_problems():
    q, k, v, cu_q, cu_k = packed([0, 0], [3, 4], 2, 2, 64, torch.float16)
    o, lse = fa4.attention_varlen(q, k, v, cu_q, cu_k, 0, 4, return_lse=True)
    assert o.shape == (0, 2, 64) and lse.shape == (2, 0)
    # Spare rows only: every sequence empty, nothing written.
    q, k, v, cu_q, cu_k = packed([0, 0, 0], [3, 4, 0], 2, 2, 64,
                                 torch.float16, spare=3)
    o = fa4.attention_varlen(q, k, v, cu_q, cu_k, 0, 4)
    assert o.shape == q.shape
    q, k, v, cu_q, cu_k = packed([4, 2], [0, 0], 2, 2, 64, torch.float16)
    o, lse = fa4.attention_varlen(q, k, v, cu_q, cu_k, 4, 0, return_lse=True)
    assert torch.all(o == 0) and torch.all(lse == float("-inf"))


def test_refusals():
    q, k, v, cu_q, cu_k = packed([4, 2], [5, 3], 2, 2, 64, torch.float16)
    call = lambda **kw: fa4.attention_varlen(
        kw.get("q", q), kw.get("k", k), kw.get("v", v), kw.get("cu_q", cu_q),
        kw.get("cu_k", cu_k), kw.get("max_q", 4), kw.get("max_k", 5))
    with pytest.raises(ValueError, match="packed"):
        call(q=q[None])
    with pytest.raises(ValueError, match="int32"):
        call(cu_q=cu_q.long())
    with pytest.raises(ValueError, match="batch \\+ 1"):
        call(cu_k=cu_k[:2])
    with pytest.raises(ValueError, match="non-decreasing"):
        call(cu_q=torch.tensor([0, 4, 3], dtype=torch.int32))
    with pytest.raises(ValueError, match="past the 8 rows"):
        call(cu_k=torch.tensor([0, 5, 9], dtype=torch.int32))
    with pytest.raises(ValueError, match="more than max_seqlen_q"):
        call(max_q=3)
    with pytest.raises(ValueError, match="max_seqlen_k"):
        call(max_k=-1)
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        call(cu_q=[0, 4, 6])
    with pytest.raises(ValueError, match=r"seqused_k must be \(batch,\)"):
        fa4.attention_varlen(q, k, v, cu_q, cu_k, 4, 5,
                             seqused_k=torch.tensor([1], dtype=torch.int32))


def test_traces_and_checks_as_an_op():
    q, k, v, cu_q, cu_k = packed([4, 9], [6, 12], 4, 2, 64, torch.bfloat16)

    def f(q, k, v, cu_q, cu_k):
        return fa4.attention_varlen(q, k, v, cu_q, cu_k, 9, 12,
                                    causal=True) * 2

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(q, k, v, cu_q, cu_k), f(q, k, v, cu_q, cu_k))
    torch.library.opcheck(torch.ops.fa4.attention_varlen.default,
                          (q, k, v, cu_q, cu_k, 9, 12, True, -1, -1, 0.0,
                           None, True, None))
