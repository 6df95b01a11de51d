"""fa4.attention's backward on CPU tensors: dQ, dK and dV from fa4's backward
tile program (fa4.attention_backward, run on the host), against float64
gradients from torch's autograd through the float64 reference, by
FlashAttention's rule: an error at most twice that of the same gradients
computed in the input type, plus a small atol."""

import pytest
import torch

import fa4
from conftest import reference


def float64_gradients(q, k, v, do, **variant):
    """dQ, dK, dV of the float64 reference for the upstream gradient do."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o, _ = reference(*leaves, **variant)
    o.backward(do.double())
    return [t.grad for t in leaves]


def low_precision_gradients(q, k, v, do, **variant):
    """The same gradients through the reference run in float32 on inputs of
    the input type, rounded to it: what the input type alone costs."""
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    qq, kk, vv = (t.transpose(1, 2) for t in leaves)
    groups = qq.shape[1] // kk.shape[1]
    kk, vv = (t.repeat_interleave(groups, dim=1) for t in (kk, vv))
    scale = variant.get("scale") or qq.shape[-1] ** -0.5
    s = (qq @ kk.transpose(-1, -2)) * scale
    if variant.get("softcap"):
        s = variant["softcap"] * torch.tanh(s / variant["softcap"])
    from conftest import visible
    mask = visible(s.shape[-2], s.shape[-1], variant.get("causal", False),
                   variant.get("window", (-1, -1)))
    p = torch.nan_to_num(torch.softmax(s.masked_fill(~mask, float("-inf")), -1))
    p = p.to(q.dtype).float()
    o = (p @ vv).transpose(1, 2)
    o.backward(do.float())
    return [t.grad.to(q.dtype).double() for t in leaves]


def check(q, k, v, atol=2e-3, seed=1, **variant):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    o = fa4.attention(q, k, v, **variant)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(seed)).to(o.dtype)
    o.backward(do)
    want = float64_gradients(q, k, v, do, **variant)
    lowp = low_precision_gradients(q, k, v, do, **variant)
    for name, got, ref, plain in zip(("dq", "dk", "dv"),
                                     (q.grad, k.grad, v.grad), want, lowp):
        assert got.dtype == q.dtype and got.shape == ref.shape, name
        err = (got.double() - ref).abs().max().item()
        bound = 2 * (plain - ref).abs().max().item() + atol
        assert err <= bound, f"{name}: error {err:.3g} > {bound:.3g} ({variant})"


@pytest.mark.parametrize("shape,variant", [
    ((2, 130, 200, 4, 2, 64, torch.float16), dict(causal=True)),
    ((1, 77, 300, 6, 2, 96, torch.bfloat16), dict()),
    ((1, 257, 129, 3, 1, 64, torch.float16), dict(causal=True)),
    ((2, 150, 150, 2, 2, 128, torch.bfloat16), dict(window=(40, 10))),
    ((1, 200, 100, 4, 4, 64, torch.float16), dict(softcap=5.0, scale=0.2)),
])
def test_gradients_match_the_float64_reference(inputs, shape, variant):
    check(*inputs(*shape), **variant)


def test_return_lse_and_detached_lse(inputs):
    q, k, v = (t.requires_grad_() for t in inputs(1, 64, 96, 2, 1, 64, torch.float16))
    o, lse = fa4.attention(q, k, v, causal=True, return_lse=True)
    (o.float().sum() + lse.detach().sum()).backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None


def test_backward_refuses_what_it_cannot_do(inputs):
    q, k, v = (t.requires_grad_() for t in inputs(1, 64, 64, 2, 1, 64, torch.float16))
    # The LSE has no gradient: it does not require grad.
    o, lse = fa4.attention(q, k, v, return_lse=True)
    assert o.requires_grad and not lse.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        lse.sum().backward()
    # seqused_k: no backward yet, said at backward(), not a zero gradient.
    used = torch.tensor([40], dtype=torch.int32)
    o = fa4.attention(q, k, v, seqused_k=used)
    with pytest.raises(NotImplementedError, match="seqused_k"):
        o.float().sum().backward()
    # The op called directly without the LSE.
    o, _ = torch.ops.fa4.attention(q, k, v, False, -1, -1, 0.0, None, False)
    with pytest.raises(NotImplementedError, match="return_lse=True"):
        o.float().sum().backward()


def test_no_double_backward(inputs):
    q, k, v = (t.requires_grad_() for t in inputs(1, 64, 64, 2, 1, 64, torch.float16))
    o = fa4.attention(q, k, v)
    (dq,) = torch.autograd.grad(o.float().sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match="no second derivative"):
        dq.float().sum().backward()


def test_backward_op_checks_its_tensors(inputs):
    q, k, v = inputs(1, 64, 64, 2, 1, 64, torch.float16)
    o, lse = torch.ops.fa4.attention(q, k, v, False, -1, -1, 0.0, None, True)
    op = torch.ops.fa4.attention_backward
    with pytest.raises(ValueError, match="lse must be a float32 tensor"):
        op(o, q, k, v, o, lse[:, :1], False, -1, -1, 0.0, None)
    with pytest.raises(ValueError, match="dout must be a tensor like q"):
        op(o.float(), q, k, v, o, lse, False, -1, -1, 0.0, None)


def test_opcheck(inputs):
    """torch's own checks of both ops, the forward's autograd registration
    included."""
    q, k, v = inputs(1, 64, 80, 2, 1, 64, torch.bfloat16)
    o, lse = torch.ops.fa4.attention(q, k, v, True, -1, -1, 0.0, None, True)
    torch.library.opcheck(torch.ops.fa4.attention_backward.default,
                          (torch.randn_like(o), q, k, v, o, lse, True, -1, -1,
                           0.0, None))
    torch.library.opcheck(torch.ops.fa4.attention.default,
                          tuple(t.requires_grad_() for t in (q, k, v)) +
                          (True, -1, -1, 0.0, None, True),
                          test_utils=("test_schema", "test_autograd_registration",
                                      "test_faketensor"))


def test_torch_compile_trains(inputs):
    """A training step compiled with torch.compile: the backward op traces
    through its fake implementation and runs on the host."""
    q, k, v = inputs(1, 96, 96, 2, 2, 64, torch.float16)
    weight = torch.nn.Parameter(torch.eye(64, dtype=torch.float16))

    def step(x):
        return fa4.attention(x @ weight, k, v, causal=True).float().square().sum()

    eager = torch.autograd.grad(step(q), weight)[0]
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    traced = torch.autograd.grad(compiled(q), weight)[0]
    assert torch.equal(eager, traced)
