"""Q/K and V/O head dims apart (DeepSeek-V3's (192, 128)): fa4.attention
takes V's head dim from v's shape and gives O that head dim; on CPU tensors
the kernel runs in the emulator against the float64 reference."""

import pytest
import torch

import fa4
from conftest import reference


def make(batch, seq_q, seq_k, q_heads, kv_heads, head_dim, v_head_dim, dtype,
         seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seq_q, q_heads, head_dim, generator=g)
    k = torch.randn(batch, seq_k, kv_heads, head_dim, generator=g)
    v = torch.randn(batch, seq_k, kv_heads, v_head_dim, generator=g)
    return tuple(t.to(dtype) for t in (q, k, v))


@pytest.mark.parametrize("head_dim,v_head_dim,causal,q_heads,kv_heads", [
    (192, 128, True, 4, 2),
    (192, 64, False, 3, 1),
    (128, 96, True, 2, 2),
])
def test_matches_reference(head_dim, v_head_dim, causal, q_heads, kv_heads):
    q, k, v = make(1, 150, 170, q_heads, kv_heads, head_dim, v_head_dim,
                   torch.bfloat16)
    o, lse = fa4.attention(q, k, v, causal=causal, return_lse=True)
    assert o.shape == (1, 150, q_heads, v_head_dim)
    want_o, want_lse = reference(q, k, v, causal)
    # bf16 inputs: O within a few bf16 ulps of values near 1.
    assert (o.double() - want_o).abs().max().item() < 2e-2
    assert (lse.double() - want_lse).abs().max().item() < 1e-3


def test_kernel_manifest_names_both_head_dims():
    kernel = fa4.compile(head_dim=192, v_head_dim=128, q_heads=4, kv_heads=2,
                         mask="causal", dtype="bf16", target="sm_90a")
    attention = kernel.manifest["attention"]
    assert (attention["head_dim"], attention["v_head_dim"]) == (192, 128)
    maps = {m["tensor"]: m for m in kernel.manifest["tensor_maps"]}
    assert maps["q"]["dims"][0] == 192 and maps["k"]["dims"][0] == 192
    assert maps["v"]["dims"][0] == 128 and maps["o"]["dims"][0] == 128
    # One head dim: v_head_dim is head_dim's.
    same = fa4.compile(head_dim=64, q_heads=2, kv_heads=2, target="sm_90a")
    assert same.manifest["attention"]["v_head_dim"] == 64


def test_refusals():
    # V's head dim past Q's, or V at 192: the verifier says which.
    with pytest.raises(fa4.CompileError, match="exceeds Q and K's head dim 64"):
        fa4.compile(head_dim=64, v_head_dim=128, q_heads=2, kv_heads=2)
    with pytest.raises(fa4.CompileError, match="V head dim 192 is not supported"):
        fa4.compile(head_dim=192, q_heads=2, kv_heads=2)
    with pytest.raises(fa4.CompileError, match="take a head dim of their own"):
        fa4.compile(head_dim=192, q_heads=2, kv_heads=2)
    with pytest.raises(ValueError, match="v_head_dim must be positive"):
        fa4.compile(head_dim=192, v_head_dim=0, q_heads=2, kv_heads=2)
    q, k, v = make(1, 8, 8, 2, 2, 192, 128, torch.float16)
    with pytest.raises(ValueError, match="but for the head dim"):
        fa4.attention(q, k, v[:, :4])
    with pytest.raises(ValueError, match="v: head dim 0"):
        fa4.attention(q, k, v[..., :0])
    # The backward of such a variant is not built: said when it is asked for.
    kernel = fa4.compile(head_dim=192, v_head_dim=128, q_heads=2, kv_heads=2,
                         target="sm_90a")
    with pytest.raises(NotImplementedError, match="v_head_dim"):
        kernel.backward()
    o, lse = fa4.attention(q, k, v, return_lse=True)
    with pytest.raises(NotImplementedError, match="differing from Q's"):
        torch.ops.fa4.attention_backward(torch.randn_like(o), q, k, v, o, lse,
                                         False, -1, -1, 0.0, None)
    q.requires_grad_(True)
    o = fa4.attention(q, k, v)
    with pytest.raises(NotImplementedError, match="differing from Q's"):
        o.sum().backward()


@pytest.mark.parametrize("v_head_dim,causal,q_heads,kv_heads,dtype", [
    (256, True, 4, 2, torch.bfloat16),
    (128, False, 3, 1, torch.float16),
])
def test_head_dim_256_in_the_emulator(v_head_dim, causal, q_heads, kv_heads,
                                      dtype):
    # CPU tensors run the default chip's kernel in the emulator: sm_100a's
    # one-Q-tile schedule at head dim 256.
    q, k, v = make(1, 70, 150, q_heads, kv_heads, 256, v_head_dim, dtype, seed=3)
    o, lse = fa4.attention(q, k, v, causal=causal, return_lse=True)
    assert o.shape == (1, 70, q_heads, v_head_dim)
    want_o, want_lse = reference(q, k, v, causal)
    assert (o.double() - want_o).abs().max().item() < 2e-2
    assert (lse.double() - want_lse).abs().max().item() < 1e-3
    for target in ("sm_100a", "sm_103a"):
        kernel = fa4.compile(head_dim=256, v_head_dim=v_head_dim, q_heads=2,
                             kv_heads=2, target=target)
        assert kernel.manifest["attention"]["rows_per_task"] == 128
        # O staged in shared memory where it fits beside Q and two K/V
        # stages (V's 128), else written from registers (V's 256).
        assert (kernel.manifest["attention"].get("o_by_address", False)
                == (v_head_dim == 256))
        assert kernel.manifest["tmem_columns"] == 512


def test_head_dim_256_has_no_backward_yet():
    kernel = fa4.compile(head_dim=256, q_heads=2, kv_heads=2, target="sm_90a")
    assert kernel.manifest["attention"]["head_dim"] == 256
    with pytest.raises(NotImplementedError, match="head dim 32, 64, 96 or 128"):
        kernel.backward()
    q, k, v = make(1, 20, 20, 2, 2, 256, 256, torch.bfloat16)
    q.requires_grad_(True)
    o = fa4.attention(q, k, v)
    with pytest.raises(NotImplementedError, match="head dim 256 is not built"):
        o.sum().backward()


@pytest.mark.parametrize("target", ["sm_100a", "sm_90a"])
def test_head_dim_32(target):
    # Half of a 128-byte swizzle line a row: the kernels' boxes stay 64
    # columns wide over 32-column tensors (the rest zeros, read by no MMA).
    kernel = fa4.compile(head_dim=32, q_heads=4, kv_heads=2, mask="causal",
                         dtype="bf16", lse=True, target=target)
    maps = {m["tensor"]: m for m in kernel.manifest["tensor_maps"]}
    assert maps["q"]["dims"][0] == 32 and maps["q"]["box"][0] == 64
    q, k, v = make(2, 70, 150, 4, 2, 32, 32, torch.bfloat16, seed=5)
    o = torch.empty(2, 70, 4, 32, dtype=torch.bfloat16)
    lse = torch.empty(2, 4, 70, dtype=torch.float32)
    kernel(q, k, v, o, lse)
    want_o, want_lse = reference(q, k, v, True)
    assert (o.double() - want_o).abs().max().item() < 2e-2
    assert (lse.double() - want_lse).abs().max().item() < 1e-3
    # Its backward is built too.
    assert kernel.backward().manifest["attention"]["head_dim"] == 32
