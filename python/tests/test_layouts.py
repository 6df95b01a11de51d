"""Kernels compiled for a static strided layout, and the placement of CPU
tensors in the emulator's memory: both launch paths (the extension's
Kernel and fa4._capi) run what a GPU would, refuse what a GPU launch
refuses (aliasing), and copy nothing larger than the caller's storage."""

import pytest
import torch

import fa4
from fa4 import _capi
from conftest import reference, write_files


def heads_first_ir(static):
    """Q, K, V and O as [batch, heads, seq, head_dim] (what the raise makes
    of torch-mlir's IR): static strides [4·96·64, 64, 96·64, 1] when the
    sizes are static (as the raise gives them), [?, 64, ?, 1] when not."""
    if static:
        q, kv = "tensor<1x4x96x64xf16>", "tensor<1x2x96x64xf16>"
        init = f"%init = tensor.empty() : {q}"
    else:
        q, kv = "tensor<?x4x?x64xf16>", "tensor<?x2x?x64xf16>"
        init = f"""%c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %batch = tensor.dim %q, %c0 : {q}
  %seq = tensor.dim %q, %c2 : {q}
  %init = tensor.empty(%batch, %seq) : {q}"""
    return f"""
func.func @attention(%q: {q}, %k: {kv}, %v: {kv}) -> {q} {{
  {init}
  %o = fa4.attention %q, %k, %v -> %init {{mask = #fa4.mask<causal>, heads_first}}
      : {q}, {kv}, {kv} -> {q}
  return %o : {q}
}}
"""


@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_heads_first_kernel_runs_on_cpu_tensors(static, inputs, tmp_path):
    kernel = fa4.compile_ir(heads_first_ir(static))
    declared = kernel.manifest["tensor_maps"][0]["layout_strides"]
    assert declared == ([4 * 96 * 64, 64, 96 * 64, 1] if static
                        else [None, 64, None, 1])
    q, k, v = inputs(1, 96, 96, 4, 2, 64, torch.float16)
    # The same memory as [batch, heads, seq, head_dim] tensors, seen as
    # [batch, seq, heads, head_dim]: the layout the kernel was compiled for.
    qh, kh, vh = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    want, _ = reference(q, k, v, causal=True)
    o = torch.zeros(1, 4, 96, 64, dtype=torch.float16).transpose(1, 2)
    kernel(qh, kh, vh, o)
    assert (o.double() - want).abs().max().item() <= 1e-2
    o_capi = torch.zeros_like(o.transpose(1, 2)).transpose(1, 2)
    _capi.load_kernel(write_files(kernel, tmp_path))(qh, kh, vh, o_capi)
    assert torch.equal(o_capi, o)
    # Dense tensors are not that layout: refused with their own strides.
    with pytest.raises(fa4.LaunchError, match=r"q: strides \[24576, 256, 64, 1\] differ"):
        kernel(q, kh, vh, o)


@pytest.fixture(scope="module")
def capi_kernel(tmp_path_factory):
    kernel = fa4.compile(head_dim=64, q_heads=2, kv_heads=1, lse=True)
    return _capi.load_kernel(write_files(kernel, tmp_path_factory.mktemp("capi")))


def test_capi_applies_the_aliasing_checks(capi_kernel, inputs):
    q, k, v = inputs(1, 64, 64, 2, 1, 64, torch.float16)
    o, lse = torch.zeros_like(q), torch.zeros(1, 2, 64)
    with pytest.raises(_capi.LaunchError, match="o: shares memory with q"):
        capi_kernel(q, k, v, q, lse)
    # O over V's storage and beyond it.
    storage = torch.zeros(q.numel(), dtype=q.dtype)
    storage[:v.numel()] = v.flatten()
    with pytest.raises(_capi.LaunchError, match="o: shares memory with v"):
        capi_kernel(q, k, storage[:v.numel()].view(v.shape), storage.view(q.shape), lse)
    with pytest.raises(_capi.LaunchError, match="lse: shares memory with o"):
        capi_kernel(q, k, v, o, o.view(torch.float32).flatten()[:128].view(1, 2, 64))
    # Misaligned inputs are refused as on a GPU (the placement keeps the
    # host address modulo 256).
    shifted = torch.empty(q.numel() + 1, dtype=torch.float16)[1:].view(q.shape)
    shifted.copy_(q)
    with pytest.raises(_capi.LaunchError, match="q: base address is not 16-byte aligned"):
        capi_kernel(shifted, k, v, o, lse)
    # Nothing refused: the same answer as the extension's launch.
    capi_kernel(q, k, v, o, lse)
    want, want_lse = reference(q, k, v)
    assert (o.double() - want).abs().max().item() <= 1e-2
    assert (lse.double() - want_lse).abs().max().item() <= 1e-2


def test_capi_checks_sizes_before_copying(capi_kernel):
    """A broadcast input of 2^37 elements over 64 stored ones is refused by
    its sizes, not copied element by element (which aborted the process)."""
    row = torch.zeros(1, 1, 1, 64, dtype=torch.float16)
    k = row.expand(1, 1 << 31, 1, 64)
    q = torch.zeros(1, 64, 2, 64, dtype=torch.float16)
    with pytest.raises(_capi.LaunchError, match="below 2\\^31"):
        capi_kernel(q, k, k, torch.zeros_like(q), torch.zeros(1, 2, 64))
    with pytest.raises(_capi.LaunchError, match="k: strides"):
        capi_kernel(q, row.expand(1, 64, 1, 64), row.expand(1, 64, 1, 64),
                    torch.zeros_like(q), torch.zeros(1, 2, 64))


def test_attention_checks_sizes_before_copying():
    """fa4.attention copies a broadcast input to a contiguous one, but only
    once its sizes are within the runtime's limits."""
    row = torch.zeros(1, 1, 1, 64, dtype=torch.float16)
    q = row.expand(1, 1 << 30, 2, 64)
    with pytest.raises(fa4.LaunchError, match="reaches 2\\^31"):
        fa4.attention(q, row.expand(1, 64, 1, 64), row.expand(1, 64, 1, 64))


@pytest.mark.parametrize("strides", [
    # Rows 192 elements apart, the two heads 128 apart: head 1's rows lie
    # between head 0's (block 3j + 2 never meets block 3j') without sharing
    # an element.
    (12288, 192, 128, 1),
    # Rows 128 apart, heads 192: even and odd 64-element blocks.
    (8320, 128, 192, 1),
])
def test_o_layouts_with_distinct_elements_run(capi_kernel, inputs, strides):
    """O's elements must be distinct (the kernel would race on shared ones);
    the check is exact, so layouts whose axes interleave without sharing an
    element run (a check by extents alone refused both), through the
    extension and through the C API."""
    q, k, v = inputs(1, 64, 64, 2, 1, 64, torch.float16)
    want, want_lse = reference(q, k, v)
    kernel = fa4.compile(head_dim=64, q_heads=2, kv_heads=1, lse=True)
    for launch in (kernel, capi_kernel):
        storage = torch.zeros(strides[0], dtype=torch.float16)
        o = storage.as_strided(q.shape, strides)
        lse = torch.zeros(1, 2, 64)
        launch(q, k, v, o, lse)
        assert (o.double() - want).abs().max().item() <= 1e-2
        assert (lse.double() - want_lse).abs().max().item() <= 1e-2


def test_o_layouts_with_shared_elements_are_refused(capi_kernel, inputs):
    """Rows 128 apart and heads 256: row 2 of head 0 is row 0 of head 1."""
    q, k, v = inputs(1, 64, 64, 2, 1, 64, torch.float16)
    kernel = fa4.compile(head_dim=64, q_heads=2, kv_heads=1, lse=True)
    o = torch.zeros(8512, dtype=torch.float16).as_strided(q.shape, (8512, 128, 256, 1))
    with pytest.raises(fa4.LaunchError, match=r"o: strides \[8512, 128, 256, 1\] make elements share memory"):
        kernel(q, k, v, o, torch.zeros(1, 2, 64))
    with pytest.raises(_capi.LaunchError, match=r"o: strides \[8512, 128, 256, 1\] make elements share memory"):
        capi_kernel(q, k, v, o, torch.zeros(1, 2, 64))
