"""fa4.attention_with_kvcache and seqused_k on CPU tensors (the emulator):
each sequence attends to its own first keys, its masks aligned bottom-right
to that length, against the float64 reference run sequence by sequence."""

import pytest
import torch

import fa4
from conftest import reference


def per_sequence_reference(q, k, v, used, causal, window=(-1, -1)):
    outs, lses = [], []
    for b, n in enumerate(used.tolist()):
        if n == 0:
            outs.append(torch.zeros_like(q[b:b + 1], dtype=torch.float64))
            lses.append(torch.full((1, q.shape[2], q.shape[1]), float("-inf"),
                                   dtype=torch.float64))
            continue
        o, lse = reference(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n], causal,
                           window)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def assert_matches(o, lse, want_o, want_lse, tolerance):
    """O within `tolerance` of the reference; the LSE too where it is finite,
    and -inf exactly on the rows that see no key."""
    assert (o.double() - want_o).abs().max().item() <= tolerance
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() <= tolerance


@pytest.mark.parametrize("causal,window,q_heads,kv_heads,seq_q", [
    (True, (-1, -1), 6, 2, 40),     # GQA 3, causal, seq_q > some lengths
    (False, (-1, -1), 8, 2, 1),     # decode
    (False, (50, 0), 4, 4, 70),     # a window
])
def test_cache_seqlens(inputs, causal, window, q_heads, kv_heads, seq_q):
    q, k, v = inputs(5, seq_q, 300, q_heads, kv_heads, 64, torch.float16)
    used = torch.tensor([0, 1, 300, 129, 77], dtype=torch.int32)
    o, lse = fa4.attention_with_kvcache(q, k, v, used, causal=causal,
                                        window=window, return_lse=True)
    assert_matches(o, lse, *per_sequence_reference(q, k, v, used, causal,
                                                   window), 1e-2)


def test_seqused_k_clamps(inputs):
    """Counts past seq_k read seq_k keys, negative ones none."""
    q, k, v = inputs(3, 20, 100, 2, 1, 64, torch.bfloat16)
    used = torch.tensor([-5, 1000, 50], dtype=torch.int32)
    o = fa4.attention(q, k, v, causal=True, seqused_k=used)
    want, _ = per_sequence_reference(q, k, v, torch.tensor([0, 100, 50]), True)
    assert (o.double() - want).abs().max().item() <= 2e-2


def test_int_cache_seqlens_and_refusals(inputs):
    q, k, v = inputs(2, 8, 64, 2, 2, 64, torch.float16)
    o = fa4.attention_with_kvcache(q, k, v, 40)
    want, _ = per_sequence_reference(q, k, v, torch.tensor([40, 40]), False)
    assert (o.double() - want).abs().max().item() <= 1e-2
    used = torch.tensor([3, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="num_splits"):
        fa4.attention_with_kvcache(q, k, v, used, num_splits=-1)
    with pytest.raises(ValueError, match="num_splits"):
        fa4.attention_with_kvcache(q, k, v, used, num_splits=129)
    with pytest.raises(TypeError, match="num_splits"):
        fa4.attention_with_kvcache(q, k, v, used, num_splits=2.0)
    with pytest.raises(ValueError, match="int32"):
        fa4.attention(q, k, v, seqused_k=used.long())
    with pytest.raises(ValueError, match=r"\(batch,\)"):
        fa4.attention(q, k, v, seqused_k=used[:1])
    with pytest.raises(TypeError, match="seqused_k"):
        fa4.attention(q, k, v, seqused_k=[3, 4])
    with pytest.raises(ValueError, match="cache_seqlens"):
        fa4.attention_with_kvcache(q, k, v, -1)


def test_torch_compile_and_opcheck(inputs):
    q, k, v = inputs(2, 16, 64, 2, 1, 64, torch.float16)
    used = torch.tensor([10, 64], dtype=torch.int32)

    def f(q, k, v, used):
        return fa4.attention_with_kvcache(q, k, v, used, causal=True) * 2

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(q, k, v, used), f(q, k, v, used))
    torch.library.opcheck(torch.ops.fa4.attention.default,
                          (q, k, v, True, -1, -1, 0.0, None, True, used))


def paged(k, v, page, seed=0):
    """K and V (batch, seq_k, heads, dim) as a paged cache of seq_k / page
    pages per sequence in a random order among two spare blocks, and the
    block table."""
    batch, seq_k = k.shape[:2]
    blocks = seq_k // page
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(batch * blocks + 2, generator=g)[:batch * blocks]
    table = order.reshape(batch, blocks).to(torch.int32)
    k_cache = torch.zeros(batch * blocks + 2, page, *k.shape[2:], dtype=k.dtype)
    v_cache = torch.zeros_like(k_cache)
    k_cache[order] = k.reshape(batch * blocks, page, *k.shape[2:])
    v_cache[order] = v.reshape(batch * blocks, page, *v.shape[2:])
    return k_cache, v_cache, table


@pytest.mark.parametrize("page", [16, 64, 256])
def test_paged_cache(inputs, page):
    q, k, v = inputs(5, 24, 512, 6, 2, 64, torch.float16)
    k_cache, v_cache, table = paged(k, v, page)
    used = torch.tensor([0, 1, 512, 127, 300], dtype=torch.int32)
    # Blocks wholly past a sequence's keys may name anything, even past the
    # cache: they read zeros and are never seen.
    table[1, 1:] = 10 ** 6
    table[0, :] = -1
    o, lse = fa4.attention_with_kvcache(q, k_cache, v_cache, used,
                                        block_table=table, causal=True,
                                        return_lse=True)
    assert_matches(o, lse, *per_sequence_reference(q, k, v, used, True), 1e-2)


def test_paged_refusals(inputs):
    q, k, v = inputs(2, 8, 64, 2, 2, 64, torch.float16)
    k_cache, v_cache, table = paged(k, v, 16)
    with pytest.raises(ValueError, match="int32"):
        fa4.attention_with_kvcache(q, k_cache, v_cache, block_table=table.long())
    with pytest.raises(ValueError, match="max_blocks"):
        fa4.attention_with_kvcache(q, k_cache, v_cache, block_table=table[:1])
    with pytest.raises(ValueError, match="power of two"):
        fa4.attention_with_kvcache(q, k_cache[:, :12], v_cache[:, :12],
                                   block_table=table)


@pytest.mark.parametrize("seq_q", [1, 7, 16])
def test_decode_queries(inputs, seq_q):
    """Decode and speculative decode: 1 to 16 queries per sequence against
    a paged cache, causal aligned to each sequence's keys."""
    q, k, v = inputs(4, seq_q, 256, 12, 2, 128, torch.bfloat16)
    k_cache, v_cache, table = paged(k, v, 16, seed=seq_q)
    used = torch.tensor([256, 17, 100, 3], dtype=torch.int32)
    o, lse = fa4.attention_with_kvcache(q, k_cache, v_cache, used,
                                        block_table=table, causal=True,
                                        return_lse=True)
    assert_matches(o, lse, *per_sequence_reference(q, k, v, used, True), 2e-2)


def test_more_refusals(inputs):
    q, k, v = inputs(2, 8, 64, 2, 2, 64, torch.float16)
    k_cache, v_cache, table = paged(k, v, 16)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        fa4.attention_with_kvcache([1], k_cache, v_cache, 3)
    with pytest.raises(ValueError, match="at least one block"):
        fa4.attention_with_kvcache(q, k_cache[:0], v_cache[:0],
                                   block_table=table)
    # num_splits of another library's integer type, as cache_seqlens.
    import numpy as np
    o = fa4.attention_with_kvcache(q, k_cache, v_cache, np.int64(20),
                                   block_table=table, num_splits=np.int64(1))
    assert o.shape == q.shape


@pytest.mark.parametrize("splits,page,causal,q_heads,kv_heads,seq_q", [
    (2, 0, True, 6, 2, 3),       # GQA 3 unpacked, causal
    (3, 16, False, 8, 2, 1),     # decode against a paged cache
    (7, 64, True, 12, 4, 5),     # more parts than some sequences' blocks
])
def test_split_kv(inputs, splits, page, causal, q_heads, kv_heads, seq_q):
    """Split-KV: the parts of each sequence's keys merged exactly, whatever
    CTA finishes last, sequences with no key and parts with no block among
    them; twice, as the workspace is kept and its counters left zero."""
    q, k, v = inputs(5, seq_q, 512, q_heads, kv_heads, 64, torch.bfloat16)
    used = torch.tensor([0, 1, 512, 129, 300], dtype=torch.int32)
    table = None
    k_cache, v_cache = k, v
    if page:
        k_cache, v_cache, table = paged(k, v, page, seed=splits)
    want = per_sequence_reference(q, k, v, used, causal)
    for _ in range(2):
        o, lse = fa4.attention_with_kvcache(q, k_cache, v_cache, used,
                                            block_table=table, causal=causal,
                                            return_lse=True, num_splits=splits)
        assert_matches(o, lse, *want, 2e-2)


def test_split_kv_compile_and_workspace(inputs):
    """The op with num_splits under torch.compile, and a Kernel compiled
    with num_splits launched by hand with its workspace."""
    q, k, v = inputs(2, 4, 256, 4, 2, 64, torch.float16)
    used = torch.tensor([200, 256], dtype=torch.int32)

    def f(q, k, v, used):
        return fa4.attention_with_kvcache(q, k, v, used, num_splits=2) * 2

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(q, k, v, used), f(q, k, v, used))
    kernel = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, seqused_k=True,
                         num_splits=3)
    assert kernel.manifest["attention"]["num_splits"] == 3
    words = fa4.split_workspace_words(kernel, 2, 4)
    assert words > 0 and fa4.split_workspace_words(fa4.compile(
        head_dim=64, q_heads=4, kv_heads=2), 2, 4) == 0
    o = torch.empty_like(q)
    kernel(q, k, v, o, extras=[used, torch.zeros(words, dtype=torch.int32)])
    want, _ = per_sequence_reference(q, k, v, used, False)
    assert (o.double() - want).abs().max().item() <= 1e-2
    with pytest.raises(fa4.LaunchError, match="workspace needs"):
        kernel(q, k, v, o, extras=[used, torch.zeros(words - 1,
                                                     dtype=torch.int32)])
    with pytest.raises(fa4.LaunchError, match="extra1: the split-KV workspace"):
        kernel(q, k, v, o, extras=[used])
    # The workspace is written: it may not lie in an input.
    k_words = k.view(torch.int32).reshape(-1)
    assert k_words.numel() >= words
    with pytest.raises(fa4.LaunchError, match="shares memory with k"):
        kernel(q, k, v, o, extras=[used, k_words[:words]])


@pytest.mark.parametrize("page", [0, 16, 64])
def test_unfilled_cache_rows(inputs, page):
    """NaN and infinities in the cache rows past cache_seqlens (a cache
    allocated with torch.empty) never reach O: the kernel clears the V rows
    past the count before P·V reads them."""
    q, k, v = inputs(4, 3, 256, 8, 2, 64, torch.bfloat16)
    used = torch.tensor([1, 130, 256, 77], dtype=torch.int32)
    want = per_sequence_reference(q, k, v, used, True)
    k, v = k.clone(), v.clone()
    for b, n in enumerate(used.tolist()):
        k[b, n:] = float("nan")
        v[b, n:] = float("nan")
        v[b, n::3] = float("inf")
    table = None
    if page:
        k, v, table = paged(k, v, page, seed=page)
    o, lse = fa4.attention_with_kvcache(q, k, v, used, block_table=table,
                                        causal=True, return_lse=True)
    assert torch.isfinite(o).all()
    assert_matches(o, lse, *want, 2e-2)


def test_split_workspace_reuse():
    """The torch op's workspace per stream: a launch leaves its counters
    zero and its parts' data right behind them, so a later launch whose
    counters reach further (a larger batch or seq_q) zeroes the difference
    first, and one whose counters are within them zeroes nothing."""
    from fa4 import _torch
    device = torch.device("cpu")
    _torch._workspaces.clear()
    ws = _torch._split_workspace(device, 100, 10)
    assert ws.numel() == 100 and not ws.any()
    ws[10:] = 7  # the first launch's parts' data
    again = _torch._split_workspace(device, 100, 40)
    assert again.data_ptr() == ws.data_ptr()
    assert not ws[:40].any() and (ws[40:] == 7).all()
    ws[40:] = 5  # the second launch's data, behind its 40 counters
    _torch._split_workspace(device, 100, 20)
    assert not ws[:40].any() and (ws[40:] == 5).all()
    bigger = _torch._split_workspace(device, 200, 60)
    assert bigger.numel() == 200 and not bigger.any()
    _torch._workspaces.clear()
