"""fa4 under torch.compile: SDPA calls replaced by torch.ops.fa4.attention
where fa4 computes them exactly (fa4.torch), the others left to PyTorch
with the reason; on CPU tensors (the emulator, and the backward on the
host)."""

import functools

import pytest
import torch
import torch.nn.functional as F

import fa4.torch

aot_eager = functools.partial(fa4.torch.backend, inner="aot_eager")


class Block(torch.nn.Module):
    """A decoder layer's attention: projections, SDPA, output projection."""

    def __init__(self, dim=128, heads=2, kv_heads=2, dtype=torch.float16,
                 **sdpa):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.heads, self.kv_heads, self.sdpa = heads, kv_heads, sdpa
        head_dim = dim // heads
        self.q = torch.nn.Linear(dim, dim, dtype=dtype)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * head_dim, dtype=dtype)
        self.o = torch.nn.Linear(dim, dim, dtype=dtype)
        for p in self.parameters():
            p.data = (torch.randn(p.shape, generator=g) * 0.1).to(dtype)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.heads
        q = self.q(x).view(b, s, self.heads, hd).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, hd).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, **self.sdpa)
        return self.o(a.transpose(1, 2).reshape(b, s, d))


def graph_of(fn, *args):
    """The FX graph dynamo makes of fn(*args)."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    torch.compile(fn, backend=keep)(*args)
    return graphs[0]


@pytest.mark.parametrize("dtype,sdpa,kv_heads", [
    (torch.float16, dict(is_causal=True), 2),
    (torch.bfloat16, dict(scale=0.2), 2),
    (torch.bfloat16, dict(is_causal=True, enable_gqa=True), 1),
])
def test_a_compiled_block_matches_sdpa_and_trains(dtype, sdpa, kv_heads):
    block = Block(heads=2, kv_heads=kv_heads, dtype=dtype, **sdpa)
    x = torch.randn(2, 80, 128, generator=torch.Generator().manual_seed(1)).to(dtype)
    want = block(x)
    want.float().square().sum().backward()
    want_grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    torch._dynamo.reset()
    got = torch.compile(block, backend=aot_eager)(x)
    got.float().square().sum().backward()
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert (got.float() - want.float()).abs().max() <= tol * want.abs().max()
    for p, g in zip(block.parameters(), want_grads):
        assert (p.grad.float() - g.float()).abs().max() <= 4 * tol * g.abs().max()


def test_the_rewrite_says_what_it_replaced_and_why_not_the_rest(capsys):
    q = torch.randn(1, 2, 64, 64, dtype=torch.float16)
    k = torch.randn(1, 2, 48, 64, dtype=torch.float16)

    def calls(q, k):
        mask = torch.ones(64, 64, dtype=torch.bool)
        return (F.scaled_dot_product_attention(q, q, q, is_causal=True),   # causal
                F.scaled_dot_product_attention(q, k, k, is_causal=True),   # window
                F.scaled_dot_product_attention(k, q, q, is_causal=True),   # seq_q < seq_k
                F.scaled_dot_product_attention(q, q, q, attn_mask=mask),
                F.scaled_dot_product_attention(q, q, q, dropout_p=0.1),
                F.scaled_dot_product_attention(q.float(), q.float(), q.float()),
                F.scaled_dot_product_attention(q[..., :16], q[..., :16], q[..., :16]),
                F.scaled_dot_product_attention(q, q[:, :1], q[:, :1]))
    gm = graph_of(calls, q, k)
    report = fa4.torch.replace_sdpa(gm, debug=True)
    replaced = [reason for _, done, reason in report if done]
    left = [reason for _, done, reason in report if not done]
    assert replaced == ["fa4.attention causal, head dim 64",
                        "fa4.attention window (-1, 16), head dim 64"]
    assert [reason.split(" (")[0] for reason in left] == [
        "is_causal with seq_q < seq_k, or lengths not known to be equal",
        "an attn_mask tensor", "dropout_p 0.1", "dtype torch.float32",
        "head dim 16", "2 query heads over 1 K/V heads without enable_gqa"]
    err = capsys.readouterr().err
    assert err.count("fa4: SDPA at ") == 8
    assert "test_sdpa_compile.py" in err and "left to PyTorch: dropout_p 0.1" in err
    # The rewritten graph computes what SDPA does.
    outs, want = gm(q, k), calls(q, k)
    for got, ref in zip(outs[:2], want[:2]):
        assert (got.float() - ref.float()).abs().max() < 4e-3


def test_enable_rewrites_inductors_graphs():
    import torch._inductor.config as config
    block = Block(is_causal=True)
    x = torch.randn(1, 64, 128, dtype=torch.float16)
    torch._dynamo.reset()
    with fa4.torch.enable():
        got = torch.compile(block)(x)
        graph_pass = config.pre_grad_custom_pass
    assert config.pre_grad_custom_pass is None
    assert (got.float() - block(x).float()).abs().max() < 4e-3
    # The pass rewrites a graph of the block, after a pass set before it.
    seen = []
    config.pre_grad_custom_pass = lambda graph: seen.append(len(graph.nodes))
    switch = fa4.torch.enable()     # on until disable()
    gm = graph_of(block, x)
    config.pre_grad_custom_pass(gm.graph)
    switch.disable()
    assert config.pre_grad_custom_pass is not None and seen
    config.pre_grad_custom_pass = None
    assert [n.target for n in gm.graph.nodes].count(
        torch.ops.fa4.attention.default) == 1
    assert graph_pass.uuid() is not None


def test_what_sdpa_promises_is_kept():
    """Calls fa4 would compute differently are left alone (a non-positive
    scale, broadcast batches, autocast), the output is contiguous as SDPA's,
    and calls inside checkpointed regions are rewritten too."""
    q = torch.randn(2, 2, 64, 64, dtype=torch.bfloat16)
    k1 = torch.randn(1, 2, 64, 64, dtype=torch.bfloat16)

    def calls(q, k1):
        with torch.autocast("cpu", dtype=torch.float16):
            cast = F.scaled_dot_product_attention(q, q, q)
        return (F.scaled_dot_product_attention(q, q, q, scale=0.0),
                F.scaled_dot_product_attention(q, k1, k1),
                cast,
                F.scaled_dot_product_attention(q, q, q).view(2, 2, 4096))
    gm = graph_of(calls, q, k1)
    report = fa4.torch.replace_sdpa(gm)
    assert [(done, reason.split(" (")[0]) for _, done, reason in report] == [
        (False, "autocast to torch.float16 around torch.bfloat16 inputs"),
        (False, "scale 0.0"), (False, "batches 2, 1, 1 of q, k and v"),
        (True, "fa4.attention, head dim 64")]
    outs, want = gm(q, k1), calls(q, k1)
    assert outs[2].dtype == torch.float16
    assert (outs[3].float() - want[3].float()).abs().max() < 2e-2

    def checkpointed(q):
        inner = lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=True)
        return torch.utils.checkpoint.checkpoint(inner, q, use_reentrant=False)
    gm = graph_of(checkpointed, q.detach().requires_grad_())
    assert [done for _, done, _ in fa4.torch.replace_sdpa(gm)] == [True]


def test_disable_in_any_order():
    import torch._inductor.config as config
    config.pre_grad_custom_pass = None
    first, second = fa4.torch.enable(), fa4.torch.enable()
    first.disable()
    second.disable()
    gm = graph_of(lambda q: F.scaled_dot_product_attention(q, q, q),
                  torch.randn(1, 1, 16, 64, dtype=torch.float16))
    if config.pre_grad_custom_pass is not None:
        config.pre_grad_custom_pass(gm.graph)
    assert torch.ops.fa4.attention.default not in [n.target for n in gm.graph.nodes]
    config.pre_grad_custom_pass = None
