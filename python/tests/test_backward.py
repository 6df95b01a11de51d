"""fa4.attention's backward on CPU tensors: dQ, dK and dV from fa4's backward
kernels (fa4.attention_backward compiled for sm_90a, run in fa4-emu), against
float64 gradients from torch's autograd through the float64 reference, by
FlashAttention's rule: an error at most twice that of the same gradients
computed in the input type, plus a small atol. And the compiled backward
itself: fa4.compile_backward, Kernel.backward, the compile cache."""

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


def judge(q, k, v, do, got, atol=2e-3, **variant):
    """dQ, dK, dV `got` against the float64 gradients, by FA's rule."""
    want = float64_gradients(q, k, v, do, **variant)
    lowp = low_precision_gradients(q, k, v, do, **variant)
    for name, got, ref, plain in zip(("dq", "dk", "dv"), got, want, lowp):
        assert got.dtype == q.dtype and got.shape == ref.shape, name
        err = (got.double() - ref).abs().max().item()
        bound = 2 * (plain - ref).abs().max().item() + atol
        assert err <= bound, f"{name}: error {err:.3g} > {bound:.3g} ({variant})"


def check(q, k, v, atol=2e-3, seed=1, **variant):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    o = fa4.attention(q, k, v, **variant)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(seed)).to(o.dtype)
    o.backward(do)
    judge(q, k, v, do, (q.grad, k.grad, v.grad), atol, **variant)


@pytest.mark.parametrize("shape,variant", [
    ((2, 130, 200, 4, 2, 64, torch.float16), dict(causal=True)),
    ((1, 77, 300, 6, 2, 96, torch.bfloat16), dict()),
    ((1, 257, 129, 3, 1, 64, torch.float16), dict(causal=True)),
    ((2, 150, 150, 2, 2, 128, torch.bfloat16), dict(window=(40, 10))),
    ((1, 200, 100, 4, 4, 64, torch.float16), dict(softcap=5.0, scale=0.2)),
    ((1, 150, 170, 6, 2, 32, torch.bfloat16), dict(causal=True)),
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


def test_deterministic_gives_the_same_bits_under_every_schedule(inputs):
    """deterministic=True: dQ's f32 accumulator holds the same bits
    whatever order fa4-emu's schedules run the CTAs and warps in (seeds),
    where the default order's atomics differ between schedules; and the
    op and autograd take the flag."""
    q, k, v = inputs(2, 150, 300, 4, 2, 64, torch.bfloat16, seed=2)
    kernel = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, dtype="bf16",
                         lse=True, target="sm_90a", sm_count=3)
    o, lse = torch.empty_like(q), torch.empty(2, 4, 150)
    kernel(q, k, v, o, lse)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(4)).to(q.dtype)

    def accumulators(deterministic):
        backward = kernel.backward(deterministic=deterministic)
        runs = []
        for seed in (1, 2, 3, 4):
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            dq_accum = torch.empty(q.shape)
            backward(q, k, v, o, do, lse, dq, dk, dv, torch.empty(2, 4, 150),
                     dq_accum, seed=seed, workers=2)
            runs.append(dq_accum)
        return runs
    fixed = accumulators(True)
    assert all(torch.equal(fixed[0], run) for run in fixed[1:])
    # The check has teeth: the default order's sums differ.
    free = accumulators(False)
    assert not all(torch.equal(free[0], run) for run in free[1:])
    assert (fixed[0] - free[0]).abs().max().item() < 1e-3
    # Through autograd: the flag reaches the backward.
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    fa4.attention(*leaves, deterministic=True).backward(do)
    judge(q, k, v, do, [t.grad for t in leaves])
    with pytest.raises(TypeError, match="deterministic"):
        fa4.attention(q, k, v, deterministic="yes")


@pytest.mark.parametrize("head_dim,q_heads,kv_heads,mask", [
    (128, 2, 1, "causal"), (96, 3, 3, "none")])
def test_deterministic_bits_past_head_dim_64(inputs, head_dim, q_heads,
                                             kv_heads, mask):
    """The fixed order where the warpgroups split dQ's columns (64 + 64 at
    hd128 with GQA 2 packed, 64 + 32 at hd96): the same gradients' and
    accumulator's bits under two schedules."""
    q, k, v = inputs(2, 70, 150, q_heads, kv_heads, head_dim, torch.float16,
                     seed=3)
    kernel = fa4.compile(head_dim=head_dim, q_heads=q_heads,
                         kv_heads=kv_heads, mask=mask, lse=True,
                         target="sm_90a", sm_count=2)
    o, lse = torch.empty_like(q), torch.empty(2, q_heads, 70)
    kernel(q, k, v, o, lse)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(6)).half()
    backward = kernel.backward(deterministic=True)
    runs = []
    for seed in (1, 3):
        grads = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)]
        dq_accum = torch.empty(q.shape)
        backward(q, k, v, o, do, lse, *grads, torch.empty(2, q_heads, 70),
                 dq_accum, seed=seed, workers=2)
        runs.append(grads + [dq_accum])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    judge(q, k, v, do, runs[0][:3], causal=mask == "causal")


def test_compiled_backward_runs_in_the_emulator(inputs):
    """fa4.compile(..., backward=True): the forward and its backward, the
    backward a BackwardKernel that runs on CPU tensors in fa4-emu and
    checks its tensors."""
    kernel = fa4.compile(head_dim=64, q_heads=6, kv_heads=2, mask="window",
                         window=(30, 4), dtype="bf16", lse=True,
                         target="sm_90a", backward=True)
    backward = kernel.backward()
    assert backward is kernel.backward()
    assert backward.manifest["kind"] == "backward"
    assert backward.manifest["target"] == "sm_90a"
    assert backward.manifest["attention"]["gqa_packing"] == 1  # ratio 3
    assert "fa4.BackwardKernel(sm_90a" in repr(backward)
    q, k, v = inputs(2, 61, 83, 6, 2, 64, torch.bfloat16, seed=5)
    o = torch.empty_like(q)
    lse = torch.empty(2, 6, 61)
    kernel(q, k, v, o, lse)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(7)).to(q.dtype)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta, dq_accum = torch.empty(2, 6, 61), torch.empty(q.shape)
    # The runtime's checks, named.
    with pytest.raises(fa4.LaunchError, match="delta: dtype"):
        backward(q, k, v, o, do, lse, dq, dk, dv, delta.half(), dq_accum)
    with pytest.raises(fa4.LaunchError, match="dk: sizes"):
        backward(q, k, v, o, do, lse, dq, dv[:, :5], dv, delta, dq_accum)
    with pytest.raises(fa4.LaunchError, match="shares memory"):
        backward(q, k, v, o, do, lse, dq, dk, dk, delta, dq_accum)
    backward(q, k, v, o, do, lse, dq, dk, dv, delta, dq_accum)
    judge(q, k, v, do, (dq, dk, dv), window=(30, 4))


def test_compiled_backward_is_cached_beside_the_forward(tmp_path, monkeypatch):
    """The compile cache holds a variant's forward and backward as two
    entries; a second compile of the backward (another process, here the
    native layer without fa4's memo) comes from it."""
    monkeypatch.setenv("FA4_CACHE_DIR", str(tmp_path))
    args = (64, 2, 1, "causal", -1, -1, "fp16", None, 0.0, "sm_90a", True, 0,
            False)
    first = fa4._fa4.compile_backward(*args)
    second = fa4._fa4.compile_backward(*args)
    assert not first.from_cache and second.from_cache
    assert first.cubin == second.cubin and first.manifest_json == second.manifest_json
    fa4._fa4.compile(64, 2, 1, "causal", -1, -1, "fp16", True, None, 0.0,
                     "sm_90a", True, 8.0, 0.125, 0)
    entries = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 2


def test_a_forward_entry_under_the_backward_key_is_replaced(tmp_path, monkeypatch):
    """An entry of the other kind under a backward's key (a self-consistent
    forward's files there) is no hit: it is moved away and the compile's
    own entry takes its place."""
    import hashlib
    import shutil
    monkeypatch.setenv("FA4_CACHE_DIR", str(tmp_path))
    args = (64, 2, 1, "none", -1, -1, "fp16", None, 0.0, "sm_90a", True, 0,
            False)
    fa4._fa4.compile_backward(*args)
    (backward_key,) = [p.name for p in tmp_path.iterdir()]
    fa4._fa4.compile(64, 2, 1, "none", -1, -1, "fp16", True, None, 0.0,
                     "sm_90a", True, 8.0, 0.125, 0)
    (forward_key,) = [p.name for p in tmp_path.iterdir() if p.name != backward_key]
    shutil.rmtree(tmp_path / backward_key)
    shutil.copytree(tmp_path / forward_key, tmp_path / backward_key)
    index = tmp_path / backward_key / "index"
    index.write_text(index.read_text().replace(forward_key, backward_key))
    first = fa4._fa4.compile_backward(*args)
    assert not first.from_cache and '"kind": "backward"' in first.manifest_json
    again = fa4._fa4.compile_backward(*args)
    assert again.from_cache and again.cubin == first.cubin
    assert hashlib.sha256(again.cubin).digest() == hashlib.sha256(first.cubin).digest()


def test_compile_with_backward_compiles_it_every_time():
    """compile(..., backward=True) compiles (or refuses) the backward on
    every call, the forward memoized or not."""
    with pytest.raises(TypeError, match="backward"):
        fa4.compile(head_dim=64, q_heads=2, kv_heads=1, backward="yes")
    fa4.compile(head_dim=64, q_heads=2, kv_heads=1, target="sm_100a")
    for _ in range(2):
        kernel = fa4.compile(head_dim=64, q_heads=2, kv_heads=1,
                             target="sm_100a", backward=True)
        assert kernel.backward().manifest["target"] == "sm_100a"
    fa4.compile(head_dim=64, q_heads=2, kv_heads=1, target="sm_90a",
                num_splits=2)
    for _ in range(2):
        with pytest.raises(NotImplementedError, match="num_splits"):
            fa4.compile(head_dim=64, q_heads=2, kv_heads=1, target="sm_90a",
                        num_splits=2, backward=True)


def test_compiled_backward_refusals():
    # The default target is the first chip whose backward compiles to
    # kernels: the default chip, Blackwell's; a Blackwell manifest's steps
    # are 128 rows, Hopper's 64.
    blackwell = fa4.compile_backward(head_dim=64, q_heads=2, kv_heads=1)
    assert blackwell.manifest["target"] == "sm_100a"
    assert blackwell.manifest["attention"]["step_rows"] == 128
    hopper = fa4.compile_backward(head_dim=64, q_heads=2, kv_heads=1,
                                  target="sm_90a")
    assert hopper.manifest["attention"]["step_rows"] == 64
    with pytest.raises(fa4.CompileError, match="sm_80"):
        fa4.compile_backward(head_dim=64, q_heads=2, kv_heads=1,
                             target="sm_80")
    with pytest.raises(ValueError, match="dtype"):
        fa4.compile_backward(dtype="fp8")
    split = fa4.compile(head_dim=64, q_heads=2, kv_heads=1, target="sm_90a",
                        num_splits=2)
    with pytest.raises(NotImplementedError, match="num_splits"):
        split.backward()


@pytest.mark.parametrize("variant", [dict(causal=True), dict(window=(2, 1)),
                                     dict(softcap=2.0, scale=0.3), dict()])
def test_the_reference_passes_gradcheck(variant):
    """The oracle the kernels' gradients are judged against: its float64
    gradients (torch's autograd through `reference`) agree with finite
    differences (torch.autograd.gradcheck), GQA 2, every row seeing a key."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 5, 4, 8, dtype=torch.float64, generator=g)
    k = torch.randn(1, 7, 2, 8, dtype=torch.float64, generator=g)
    v = torch.randn(1, 7, 2, 8, dtype=torch.float64, generator=g)
    leaves = tuple(t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda q, k, v: reference(q, k, v, **variant)[0], leaves)


def test_backward_with_regions_takes_their_extras(tmp_path):
    """A backward whose score_mod reads an extra (ALiBi's slopes, GQA 4,
    causal: test/Sim/Inputs/backward-alibi.mlir) compiled by fa4c from IR,
    run through the C API in fa4-emu with the slopes as a tensor, against
    torch's float64 autograd of the same bias; without the extra the launch
    is refused, naming the count."""
    import math
    import pathlib
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    fa4c = pathlib.Path(fa4.__file__).resolve().parents[2] / "bin" / "fa4c"
    assert fa4c.exists(), f"{fa4c}: the build's fa4c (tests run from build/python)"
    subprocess.run([str(fa4c), str(root / "test/Sim/Inputs/backward-alibi.mlir"),
                    "--target", "sm_90a", "-o", str(tmp_path / "a.cubin")],
                   check=True)
    kernel = fa4._capi.load_backward(tmp_path / "a.cubin.json")
    assert kernel.manifest["attention"]["score_mod"] is True
    assert kernel.manifest["extras"][0]["shape"] == [16]

    batch, seq, hq, hkv, d = 1, 67, 16, 4, 128
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(batch, seq, h, d, generator=g).half()
               for h in (hq, hkv, hkv))
    slopes = torch.rand(16, generator=g) * 0.5
    do = torch.randn(batch, seq, hq, d, generator=g).half()
    scale = 1 / math.sqrt(d)

    def forward(q, k, v):
        qq, kk, vv = (t.transpose(1, 2) for t in (q, k, v))
        kk, vv = (t.repeat_interleave(hq // hkv, dim=1) for t in (kk, vv))
        i = torch.arange(seq).view(seq, 1)
        j = torch.arange(seq).view(1, seq)
        bias = slopes.double().view(hq, 1, 1) * (j - i)
        s = (qq @ kk.transpose(-1, -2)) * scale + bias
        s = s.masked_fill(j > i, -math.inf)
        return (torch.softmax(s, -1) @ vv).transpose(1, 2), torch.logsumexp(s, -1)

    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    o, lse = forward(*leaves)
    o.backward(do.double())
    want = [t.grad for t in leaves]

    o16, lse32 = o.detach().half(), lse.detach().float()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta, dq_accum = torch.empty(batch, hq, seq), torch.empty(q.shape)
    tensors = (q, k, v, o16, do, lse32, dq, dk, dv, delta, dq_accum)
    with pytest.raises(fa4._capi.LaunchError, match="and its regions' 1 extras, got 11"):
        kernel(*tensors)
    kernel(*tensors, extras=(slopes,))
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        err = (got.double() - ref).abs().max().item()
        assert err < 1e-2, f"{name}: error {err:.3g}"


# A score_mod written as IR (tanh of the score plus ALiBi's bias, the slopes
# an extra), GQA 2, causal: fa4.attention_ir and the backward the compiler
# derives from the same IR.
_IR_TANH_ALIBI = """
func.func @attention(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>,
                     %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>,
                     %slopes: memref<4xf32>) {
  fa4.attention %q, %k, %v -> %o extras(%slopes : memref<4xf32>)
      {mask = #fa4.mask<causal>}
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>
      -> memref<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %slope_of: memref<4xf32>):
    %slope = memref.load %slope_of[%h] : memref<4xf32>
    %d = arith.subi %j, %i : index
    %d64 = arith.index_cast %d : index to i64
    %df = arith.sitofp %d64 : i64 to f32
    %bias = arith.mulf %slope, %df : f32
    %t = math.tanh %s : f32
    %r = arith.addf %t, %bias : f32
    fa4.yield %r : f32
  }
  return
}
"""


def _tanh_alibi_reference(q, k, v, slopes):
    """O and the LSE of _IR_TANH_ALIBI in the inputs' type (causal aligned
    bottom-right, the region's positions top-left)."""
    import math
    hq, hkv, d = q.shape[2], k.shape[2], q.shape[3]
    seq_q, seq_k = q.shape[1], k.shape[1]
    qq, kk, vv = (t.transpose(1, 2) for t in (q, k, v))
    kk, vv = (t.repeat_interleave(hq // hkv, dim=1) for t in (kk, vv))
    i = torch.arange(seq_q).view(seq_q, 1)
    j = torch.arange(seq_k).view(1, seq_k)
    s = torch.tanh((qq @ kk.transpose(-1, -2)) / math.sqrt(d)) + \
        slopes.to(q.dtype).view(hq, 1, 1) * (j - i)
    hidden = j > i + (seq_k - seq_q)
    s = s.masked_fill(hidden, -math.inf)
    # A row that sees no key (seq_q > seq_k): O = 0, LSE = -inf.
    p = torch.where((~hidden).any(-1, keepdim=True), torch.softmax(s, -1), 0)
    return (p @ vv).transpose(1, 2), torch.logsumexp(s, -1)


@pytest.mark.parametrize("seq_q,seq_k", [(77, 101), (130, 65)])
def test_attention_ir_is_differentiable(seq_q, seq_k):
    """fa4.attention_ir on CPU tensors (fa4-emu): O, the LSE and dQ, dK,
    dV of a region the compiler differentiates, against torch's float64
    autograd of the same function, by FlashAttention's rule (at most twice
    the float32 computation's error on the fp16 inputs, plus 2e-3)."""
    g = torch.Generator().manual_seed(seq_q)
    batch, hq, hkv, d = 2, 4, 2, 64
    q = torch.randn(batch, seq_q, hq, d, generator=g).half()
    k, v = (torch.randn(batch, seq_k, hkv, d, generator=g).half()
            for _ in range(2))
    slopes = torch.rand(hq, generator=g)
    do = torch.randn(batch, seq_q, hq, d, generator=g).half()

    def gradients(dtype):
        leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        o, lse = _tanh_alibi_reference(*leaves, slopes)
        o.backward(do.to(dtype))
        return o.detach(), lse.detach(), [t.grad for t in leaves]

    o64, lse64, want = gradients(torch.float64)
    o32, _, low = gradients(torch.float32)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o, lse = fa4.attention_ir(*leaves, _IR_TANH_ALIBI, extras=[slopes],
                              return_lse=True)
    assert o.shape == q.shape and o.dtype == torch.float16
    assert not lse.requires_grad
    assert (o.double() - o64).abs().max() <= \
        2 * (o32.half().double() - o64).abs().max() + 2e-3
    seen = torch.isfinite(lse64)
    assert torch.equal(seen, torch.isfinite(lse)) and not seen.all() == \
        (seq_q > seq_k)
    assert (lse.double() - lse64)[seen].abs().max() < 1e-3
    o.backward(do)
    for name, leaf, ref, f32 in zip("qkv", leaves, want, low):
        err = (leaf.grad.double() - ref).abs().max().item()
        bound = 2 * (f32.half().double() - ref).abs().max().item() + 2e-3
        assert err <= bound, f"d{name}: error {err:.3g} > {bound:.3g}"


def test_compile_ir_kernels_have_their_backward():
    """Kernel.backward of a compile_ir kernel is compile_backward_ir of its
    IR: the regions and extras of the forward (the manifest says so); the
    derived IR is backward_ir's; with_lse adds the LSE after O."""
    kernel = fa4.compile_ir(_IR_TANH_ALIBI, "sm_90a")
    backward = kernel.backward()
    assert backward.manifest["kind"] == "backward"
    assert backward.manifest["attention"]["score_mod"] is True
    assert [e["shape"] for e in backward.manifest["extras"]] == [[4]]
    assert kernel.backward(deterministic=True).manifest["attention"][
        "deterministic"] is True
    text = fa4.backward_ir(_IR_TANH_ALIBI)
    assert "func.func @attention_backward(" in text
    assert "fa4.attention_backward" in text and "math.tanh" in text
    with_lse = fa4.backward_ir(_IR_TANH_ALIBI, with_lse=True)
    assert "lse %arg4" in with_lse and "memref<?x4x?xf32>" in with_lse
    assert fa4.compile_ir(with_lse, "sm_90a").manifest["attention"]["lse"]
    # The same backward from the derived text (a backward entry compiles
    # as it is).
    again = fa4.compile_backward_ir(text, "sm_90a")
    assert again.manifest["extras"] == backward.manifest["extras"]


def test_backward_ir_names_what_it_cannot_derive():
    """A forward the backward does not take is refused, naming why; so is
    IR that is not a forward entry."""
    paged = open(__import__("pathlib").Path(__file__).resolve().parents[2] /
                 "examples" / "paged-kv-cache.mlir").read()
    with pytest.raises(fa4.CompileError, match="seqused_k table, which the "
                       "backward does not take"):
        fa4.backward_ir(paged)
    with pytest.raises(fa4.CompileError, match="seqused_k"):
        fa4.compile_ir(paged, "sm_90a").backward()
    with pytest.raises(fa4.CompileError, match="does not parse"):
        fa4.backward_ir("func.func @f(")
    with pytest.raises(fa4.CompileError, match="holds a backward"):
        fa4.backward_ir(fa4.backward_ir(_IR_TANH_ALIBI), with_lse=True)
    with pytest.raises(TypeError, match="extras must be a sequence"):
        fa4.attention_ir(*(torch.zeros(1, 1, h, 64).half() for h in (4, 2, 2)),
                         _IR_TANH_ALIBI, extras=torch.zeros(4))


def test_attention_ir_opcheck():
    """torch.library.opcheck on fa4::attention_ir: the fake implementation's
    shapes, the schema and the autograd registration agree with the op."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 33, 4, 64, generator=g).half().requires_grad_()
    k, v = (torch.randn(1, 40, 2, 64, generator=g).half().requires_grad_()
            for _ in range(2))
    slopes = torch.rand(4, generator=g)
    torch.library.opcheck(torch.ops.fa4.attention_ir.default,
                          (q, k, v, [slopes], _IR_TANH_ALIBI))


def _plain_attention(q, k, v):
    """Softmax attention of (batch, seq, heads, head_dim) tensors, GQA by
    repetition, no mask, in the inputs' type."""
    qq, kk, vv = (t.transpose(1, 2) for t in (q, k, v))
    groups = qq.shape[1] // kk.shape[1]
    kk, vv = (t.repeat_interleave(groups, dim=1) for t in (kk, vv))
    s = (qq @ kk.transpose(-1, -2)) * qq.shape[-1] ** -0.5
    return (torch.softmax(s, -1) @ vv).transpose(1, 2)


def test_attention_ir_takes_the_layout_the_ir_declares():
    """A heads-first entry (test/Sim/inputs-heads-first.mlir: its
    attention reads [batch, seq, heads, dim] views of heads-first tensors)
    through fa4.attention_ir: inputs in any layout are laid out as the IR
    declares, O and the gradients come back dense and right; an empty
    problem returns at once; deterministic gives the same bits twice."""
    import pathlib
    ir = (pathlib.Path(__file__).resolve().parents[2] / "test" / "Sim" /
          "inputs-heads-first.mlir").read_text()
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 70, 4, 64, generator=g).bfloat16()
    k, v = (torch.randn(2, 45, 2, 64, generator=g).bfloat16() for _ in range(2))
    do = torch.randn(2, 70, 4, 64, generator=g).bfloat16()
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    o64 = _plain_attention(*leaves)
    o64.backward(do.double())
    runs = []
    for deterministic in (True, True, False):
        got = [t.clone().requires_grad_() for t in (q, k, v)]
        o = fa4.attention_ir(*got, ir, deterministic=deterministic)
        assert o.is_contiguous() and o.shape == q.shape
        assert (o.double() - o64).abs().max() < 2e-2
        o.backward(do)
        for name, t, ref in zip("qkv", got, leaves):
            err = (t.grad.double() - ref.grad).abs().max().item()
            assert err < 3e-2, f"d{name}: error {err:.3g}"
        runs.append([t.grad for t in got])
    assert all(torch.equal(a, b) for a, b in zip(runs[0], runs[1]))
    empty = fa4.attention_ir(q[:, :0], k, v, ir, return_lse=True)
    assert empty[0].shape == (2, 0, 4, 64) and empty[1].shape == (2, 4, 0)
    o, lse = fa4.attention_ir(q, k[:, :0], v[:, :0], ir, return_lse=True)
    assert not o.any() and torch.isinf(lse).all() and (lse < 0).all()


def test_backward_of_static_sizes_refuses_other_sizes():
    """An entry with static sizes: its derived backward's manifest records
    them and a launch of other sizes is refused, as the forward's is."""
    ir = _IR_TANH_ALIBI.replace("?x?x4x64", "1x40x4x64").replace(
        "?x?x2x64", "1x50x2x64")
    backward = fa4.compile_backward_ir(ir, "sm_90a")
    attention = backward.manifest["attention"]
    assert (attention["static_batch"], attention["static_seq_q"],
            attention["static_seq_k"]) == (1, 40, 50)
    q = torch.zeros(1, 41, 4, 64).half()
    k, v = torch.zeros(1, 50, 2, 64).half(), torch.zeros(1, 50, 2, 64).half()
    with pytest.raises(fa4.LaunchError, match="seq_q is 41, but the kernel "
                       "was compiled for 40"):
        backward(q, k, v, q.clone(), q.clone(), torch.zeros(1, 4, 41),
                 q.clone(), k.clone(), v.clone(), torch.zeros(1, 4, 41),
                 torch.zeros(q.shape), extras=[torch.zeros(4)])
    same = """
func.func @same(%x: memref<?x?x4x64xf16>, %o: memref<?x?x4x64xf16>) {
  fa4.attention %x, %x, %x -> %o
      : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>
      -> memref<?x?x4x64xf16>
  return
}
"""
    for derive in (fa4.backward_ir, lambda ir: fa4.compile_ir(ir, "sm_90a")):
        with pytest.raises(fa4.CompileError, match="operands #0 and #1 are "
                           "the same argument"):
            derive(same)


def test_attention_ir_on_cpu_takes_the_chip_the_module_names():
    """A module naming its chip (fa4.target) runs that chip's kernels in
    the emulator; an extra that requires grad is refused, not left with a
    silent None gradient."""
    ir = ("module attributes {fa4.target = #fa4.target<sm_90a>} {\n" +
          _IR_TANH_ALIBI + "}\n")
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 40, 4, 64, generator=g).half().requires_grad_()
    k, v = (torch.randn(1, 33, 2, 64, generator=g).half().requires_grad_()
            for _ in range(2))
    slopes = torch.rand(4, generator=g)
    o = fa4.attention_ir(q, k, v, ir, extras=[slopes])
    o.float().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all()
               for t in (q, k, v))
    with pytest.raises(NotImplementedError, match="extras\\[0\\] requires grad"):
        fa4.attention_ir(q, k, v, ir, extras=[slopes.requires_grad_()])
