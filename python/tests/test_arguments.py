"""The Python argument layer: what fa4.attention, fa4.compile, Kernel and
torch.ops.fa4.attention do with arguments at the edges (misaligned, empty,
requiring grad, of the wrong type), each answered by a result or by a
ValueError, TypeError or fa4 error that names the argument."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fa4
from conftest import reference


def test_misaligned_contiguous_input_is_copied(inputs):
    q, k, v = inputs(1, 64, 64, 2, 1, 64, torch.float16)
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)
    shifted.copy_(q)
    assert shifted.is_contiguous() and shifted.data_ptr() % 16
    assert torch.equal(fa4.attention(shifted, k, v), fa4.attention(q, k, v))


@pytest.mark.parametrize("batch,seq_q,seq_k", [(0, 64, 64), (1, 0, 64), (2, 64, 0)])
def test_empty_problems_return_empty_results(batch, seq_q, seq_k, monkeypatch):
    # Nothing is compiled for them.
    monkeypatch.setattr(fa4._fa4, "compile", None)
    q = torch.randn(batch, seq_q, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(batch, seq_k, 2, 64, dtype=torch.bfloat16)
    o, lse = fa4.attention(q, k, k, causal=True, return_lse=True)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert lse.shape == (batch, 4, seq_q) and lse.dtype == torch.float32
    # Rows that see no key: O = 0, LSE = -inf (fa4's convention).
    assert bool((o == 0).all()) and bool((lse == float("-inf")).all())
    # The sizes too (O is allocated): 2^31 queries are past the limit.
    huge = torch.zeros(1, 1, 4, 64, dtype=torch.bfloat16).expand(1, 1 << 31, 4, 64)
    with pytest.raises(fa4.LaunchError, match="below 2\\^31"):
        no_key = torch.zeros(1, 0, 2, 64, dtype=torch.bfloat16)
        fa4.attention(huge, no_key, no_key)
    # The variant is still checked.
    with pytest.raises(fa4.CompileError, match="head dim 80 is not supported"):
        fa4.attention(q[..., :40].repeat(1, 1, 1, 2), k[..., :40].repeat(1, 1, 1, 2),
                      k[..., :40].repeat(1, 1, 1, 2))


def op(q, k, v, causal=False, left=-1, right=-1, softcap=0.0, scale=None,
       return_lse=False):
    return torch.ops.fa4.attention(q, k, v, causal, left, right, softcap,
                                   scale, return_lse)


# (arguments of the op, the exception and its message): what the real op
# and its fake implementation both refuse.
REFUSED = {
    "float32": (dict(dtype=torch.float32), ValueError, "float16 or bfloat16"),
    "rank 3": (dict(rank=3), ValueError, r"\(batch, seq, heads, head_dim\)"),
    "head dim 80": (dict(head_dim=80), fa4.CompileError, "head dim 80"),
    "heads 3 over 2": (dict(q_heads=3), fa4.CompileError, "multiple"),
    "window -2": (dict(left=-2), ValueError, "window left must be -1"),
    "window 2^31": (dict(left=1 << 31), fa4.CompileError, "window_left must be"),
    "softcap negative": (dict(softcap=-1.0), fa4.CompileError, "softcap"),
    "seq_k 2^31": (dict(seq_k=1 << 31), fa4.LaunchError, "below 2\\^31"),
}


def arguments(dtype=torch.float16, rank=4, head_dim=64, q_heads=2, seq_k=64,
              **scalars):
    q = torch.randn(1, 64, q_heads, head_dim).to(dtype)
    # K and V broadcast from one key.
    k = torch.randn(1, 1, 2, head_dim).to(dtype).expand(1, seq_k, 2, head_dim)
    if rank == 3:
        q, k = q[0], k[0]
    return (q, k, k), scalars


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_op_and_its_fake_refuse_alike(name):
    given, error, message = REFUSED[name]
    given = dict(given)
    scalars = {key: given.pop(key) for key in list(given)
               if key in ("left", "softcap")}
    tensors, scalars = arguments(**given, **scalars)
    with pytest.raises(error, match=message):
        op(*tensors, **scalars)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in tensors]
        with pytest.raises(error, match=message):
            op(*fake, **scalars)


def test_a_copy_that_cannot_be_allocated_is_a_launch_error(monkeypatch):
    """A broadcast input within the size limits is copied whole for TMA;
    when that copy cannot be had, the error says so (here torch's allocator
    is made to fail: 2^30 keys of head dim 64 would need 128 GiB)."""
    def no_memory(self, *args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(torch.Tensor, "clone", no_memory)
    # Past the up-front estimate of host memory (test_launch_guards.py),
    # which would refuse this one first.
    monkeypatch.setattr(fa4._torch, "_available_host_bytes", lambda: None)
    q = torch.randn(1, 64, 2, 64, dtype=torch.float16)
    k = torch.randn(1, 1, 1, 64, dtype=torch.float16).expand(1, 1 << 30, 1, 64)
    with pytest.raises(fa4.LaunchError,
                       match=r"k: its strides \(64, 0, 64, 1\) need a contiguous copy"
                             r" for TMA, 137438953472 bytes, which could not be allocated"):
        fa4.attention(q, k, k)


def test_fake_gives_the_real_shapes(inputs):
    q, k, v = inputs(2, 70, 90, 4, 2, 64, torch.bfloat16)
    o, lse = op(q, k, v, True, -1, -1, 0.0, None, True)
    with FakeTensorMode() as mode:
        fo, flse = op(*[mode.from_tensor(t) for t in (q, k, v)], True, -1, -1,
                      0.0, None, True)
    assert (fo.shape, fo.dtype, flse.shape, flse.dtype) == \
        (o.shape, o.dtype, lse.shape, lse.dtype)


def test_requires_grad_is_recorded_and_no_grad_matches(inputs):
    q, k, v = inputs(1, 64, 64, 2, 1, 64, torch.float16)
    q.requires_grad_()
    # Autograd records the call (the backward is test_backward.py's); the
    # output is the same with grad mode on or off.
    assert fa4.attention(q, k, v).requires_grad
    want = fa4.attention(q.detach(), k, v)
    assert torch.equal(fa4.attention(q, k, v).detach(), want)
    with torch.no_grad():
        assert torch.equal(fa4.attention(q, k, v), want)
    with torch.inference_mode():
        assert torch.equal(fa4.attention(q, k, v), want)


def test_argument_errors_name_the_argument():
    """Errors that nanobind's signature match gave as "incompatible function
    arguments ... Invoked with types"."""
    cases = [
        (dict(scale="x"), TypeError, "scale must be a number"),
        (dict(target=5), TypeError, "target must be a str"),
        (dict(head_dim=1 << 70), ValueError, "head_dim must be in"),
        (dict(softcap="1"), TypeError, "softcap must be a number"),
        (dict(rescale_threshold=None), TypeError, "rescale_threshold must be a number"),
        (dict(sm_count=-1), ValueError, "sm_count must be in"),
        (dict(cache="yes"), TypeError, "cache must be a bool"),
        (dict(window=(1.5, 2)), TypeError, r"window\[0\] must be an int"),
        (dict(mask=None), TypeError, "mask must be a str"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            fa4.compile(**{"head_dim": 64, "q_heads": 2, "kv_heads": 1, **kwargs})
    with pytest.raises(TypeError, match="target must be a str"):
        fa4.compile_ir("func.func @f() { return }", target=None)
    kernel = fa4.compile(head_dim=64, q_heads=2, kv_heads=1)
    q = torch.randn(1, 64, 2, 64, dtype=torch.float16)
    k = torch.randn(1, 64, 1, 64, dtype=torch.float16)
    o = torch.empty_like(q)
    with pytest.raises(TypeError, match="q must be a tensor"):
        kernel([1], k, k, o)
    with pytest.raises(TypeError, match="extras must be a sequence"):
        kernel(q, k, k, o, extras=3)
    with pytest.raises(ValueError, match="workers must be in"):
        kernel(q, k, k, o, workers=-1)
    with pytest.raises(TypeError, match="seed must be an int"):
        kernel(q, k, k, o, seed=1.0)
    with pytest.raises(TypeError, match=r"window\[1\] must be an int"):
        fa4.attention(q, k, k, window=(4, "8"))
    with pytest.raises(TypeError, match="stage must be a str"):
        kernel.ir(3)


WINDOWS = [
    # (mask, window) for compile, (causal, window) for attention: the variant.
    (("none", None), (False, (-1, -1)), ("none", -1, -1)),
    (("none", (-1, -1)), (False, (-1, -1)), ("none", -1, -1)),
    (("causal", (-1, -1)), (True, (-1, -1)), ("causal", -1, -1)),
    (("none", (8, 4)), (False, (8, 4)), ("window", 8, 4)),
    (("window", (8, 4)), (False, (8, 4)), ("window", 8, 4)),
    (("causal", (8, 4)), (True, (8, 4)), ("window", 8, 0)),
    (("causal", (8, -1)), (True, (8, -1)), ("window", 8, 0)),
    (("causal", (-1, 4)), (True, (-1, 4)), ("causal", -1, -1)),
    (("none", (-1, 0)), (False, (-1, 0)), ("window", -1, 0)),
]


@pytest.fixture
def compiles(monkeypatch):
    """The (mask, left, right) of every compile asked for; each compile
    then fails with CompileError("stub")."""
    compiled = []

    def compile_stub(head_dim, q_heads, kv_heads, mask, left, right, *rest):
        compiled.append((mask, left, right))
        raise fa4.CompileError("stub")

    monkeypatch.setattr(fa4._fa4, "compile", compile_stub)
    monkeypatch.setattr(fa4, "_memo", {})
    return compiled


@pytest.mark.parametrize("given,as_attention,variant", WINDOWS,
                         ids=[str(w[0]) for w in WINDOWS])
def test_one_window_normalization(given, as_attention, variant, compiles):
    compiled = compiles
    with pytest.raises(fa4.CompileError, match="stub"):
        fa4.compile(head_dim=64, q_heads=2, kv_heads=1, mask=given[0],
                    window=given[1])
    q = torch.randn(1, 64, 2, 64, dtype=torch.float16)
    k = torch.randn(1, 64, 1, 64, dtype=torch.float16)
    with pytest.raises(fa4.CompileError, match="stub"):
        fa4.attention(q, k, k, causal=as_attention[0], window=as_attention[1])
    assert compiled == [variant, variant]


def test_window_errors():
    with pytest.raises(ValueError, match="needs window"):
        fa4.compile(mask="window")
    with pytest.raises(ValueError, match="needs window"):
        fa4.compile(mask="window", window=(-1, -1))
    with pytest.raises(ValueError, match="window left must be -1"):
        fa4.compile(window=(-3, 4))
    q = torch.randn(1, 64, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="window right must be -1"):
        fa4.attention(q, q, q, window=(4, -7))


def test_flags_and_text_are_checked_before_anything_runs():
    """A truthy non-flag is no causal mask, and text with a lone surrogate is
    refused by fa4, not by the extension's signature match."""
    q = torch.randn(1, 8, 2, 64, dtype=torch.float16)
    with pytest.raises(TypeError, match="causal must be a bool"):
        fa4.attention(q, q, q, causal="no")
    with pytest.raises(ValueError, match="window must be"):
        fa4.attention(q, q, q, window={0: 1, 1: 2})
    with pytest.raises(ValueError, match="not valid Unicode"):
        fa4.compile_ir("\udcff")
    with pytest.raises(ValueError, match="target is not valid Unicode"):
        fa4.compile(head_dim=64, target="sm_100a\udcff")


def test_numpy_flags_and_windows_are_taken_as_python_ones(compiles):
    """np.True_ is a flag as True is, a numpy pair a window as a tuple is;
    fa4.attention and fa4.compile take the same ones."""
    np = pytest.importorskip("numpy")
    compiled = compiles
    q = torch.randn(1, 64, 2, 64, dtype=torch.float16)
    k = torch.randn(1, 64, 1, 64, dtype=torch.float16)
    for call in (lambda: fa4.attention(q, k, k, causal=np.True_,
                                       window=np.array([8, 3])),
                 lambda: fa4.compile(head_dim=64, q_heads=2, kv_heads=1,
                                     mask="causal", window=np.array([8, 3]),
                                     lse=np.False_)):
        with pytest.raises(fa4.CompileError, match="stub"):
            call()
    assert compiled == [("window", 8, 0), ("window", 8, 0)]
    for bad in ({0: 1, 1: 2}, {1, 2}, np.array(5)):
        with pytest.raises(ValueError, match="window must be"):
            fa4.compile(head_dim=64, window=bad)
    with pytest.raises(fa4.CompileError, match="stub"):
        fa4.attention(q, k, k, window=torch.tensor([8, 3]))
    assert compiled[-1] == ("window", 8, 3)
    with pytest.raises(TypeError, match="window\\[0\\] must be an int"):
        fa4.attention(q, k, k, window=torch.tensor([8.0, 3.0]))


def test_nested_tensors_are_refused_by_name():
    q = torch.nested.nested_tensor([torch.randn(8, 2, 64), torch.randn(5, 2, 64)],
                                   dtype=torch.float16)
    dense = torch.randn(1, 8, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="q is a nested tensor"):
        fa4.attention(q, dense, dense)

