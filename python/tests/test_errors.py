"""Every failure is a Python exception naming its cause."""

import pytest
import torch

import fa4
from fa4 import _fa4


def test_compile_errors():
    with pytest.raises(fa4.CompileError, match="head dim 80 is not supported"):
        fa4.compile(head_dim=80)
    with pytest.raises(fa4.CompileError, match="multiple"):
        fa4.compile(q_heads=6, kv_heads=4)
    with pytest.raises(ValueError, match="dtype must be fp16, bf16 or e4m3"):
        fa4.compile(dtype="fp32")
    with pytest.raises(ValueError, match="mask must be"):
        fa4.compile(mask="diagonal")
    with pytest.raises(ValueError, match="needs window"):
        fa4.compile(mask="window")
    with pytest.raises(TypeError, match="head_dim must be an int"):
        fa4.compile(head_dim=64.0)


def test_attention_argument_errors():
    q = torch.randn(1, 64, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        fa4.attention(q.float(), q.float(), q.float())
    with pytest.raises(ValueError, match="k: dtype torch.bfloat16"):
        fa4.attention(q, q.bfloat16(), q)
    with pytest.raises(ValueError, match=r"\(batch, seq, heads, head_dim\)"):
        fa4.attention(q[0], q, q)
    with pytest.raises(ValueError, match="disagree"):
        fa4.attention(q, q[..., :32], q[..., :32])
    with pytest.raises(fa4.CompileError, match="multiple"):
        fa4.attention(torch.randn(1, 64, 3, 64, dtype=torch.float16), q, q)


@pytest.fixture(scope="module")
def kernel():
    return fa4.compile(head_dim=64, q_heads=2, kv_heads=1, lse=True)


def tensors():
    q = torch.randn(1, 64, 2, 64, dtype=torch.float16)
    k = torch.randn(1, 64, 1, 64, dtype=torch.float16)
    return q, k, k.clone(), torch.empty_like(q), torch.empty(1, 2, 64)


def test_launch_validation(kernel):
    q, k, v, o, lse = tensors()
    wide = torch.zeros(1, 64, 2, 128, dtype=torch.float16)
    with pytest.raises(fa4.LaunchError, match="q: strides .*: head_dim must be contiguous"):
        kernel(wide[..., ::2], k, v, o, lse)
    # Rows 68 elements (136 bytes) apart.
    padded = torch.zeros(1, 64, 68, dtype=torch.float16)[..., :64].unsqueeze(2)
    with pytest.raises(fa4.LaunchError, match="k: strides .*multiple of 16 bytes"):
        kernel(q, padded, v, o, lse)
    with pytest.raises(fa4.LaunchError, match="o: strides .* share memory"):
        kernel(q, k, v, o.as_strided(o.shape, (8192, 64, 64, 1)), lse)
    with pytest.raises(fa4.LaunchError, match="o: shares memory with q"):
        kernel(q, k, v, q, lse)
    with pytest.raises(fa4.LaunchError, match="lse: shares memory with o"):
        kernel(q, k, v, o, o.view(torch.float32).flatten()[:128].view(1, 2, 64))
    with pytest.raises(fa4.LaunchError, match="lse: strides .* are not the dense"):
        kernel(q, k, v, o, lse.transpose(1, 2).contiguous().transpose(1, 2))
    storage = torch.empty(q.numel() + 1, dtype=torch.float16)
    shifted = storage[1:].view(q.shape)
    with pytest.raises(fa4.LaunchError, match="q: base address is not 16-byte aligned"):
        kernel(shifted, k, v, o, lse)
    with pytest.raises(fa4.LaunchError, match="lse: the kernel writes the log-sum-exp"):
        kernel(q, k, v, o, None)
    with pytest.raises(fa4.LaunchError, match="v: dtype bf16"):
        kernel(q, k, v.bfloat16(), o, lse)
    with pytest.raises(fa4.LaunchError, match="k: sizes"):
        kernel(q, torch.randn(1, 64, 2, 64, dtype=torch.float16), v, o, lse)
    with pytest.raises(fa4.LaunchError, match="lse: dtype bf16"):
        kernel(q, k, v, o, lse.bfloat16())


def test_gpu_launch_of_cpu_tensors(kernel):
    q, k, v, o, lse = tensors()
    with pytest.raises(ValueError, match="must be on the GPU"):
        kernel._capi_kernel().bind(q, k, v, o, lse)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_backend_without_a_driver():
    """On a machine without a GPU the CUDA path fails with a message, not an
    abort (torch's own check comes first)."""
    with pytest.raises((RuntimeError, AssertionError)):
        fa4.attention(torch.randn(1, 64, 2, 64, dtype=torch.float16, device="cuda"),
                      torch.randn(1, 64, 2, 64, dtype=torch.float16, device="cuda"),
                      torch.randn(1, 64, 2, 64, dtype=torch.float16, device="cuda"))
