"""fa4._capi, the ctypes binding of libfa4rt.so (the C API), on the emulator
backend: a kernel loaded from the files fa4c writes, launched against the
float64 reference and against the extension's own launch, and the runtime's
errors coming back through the C API's error channel."""

import ctypes
import json
import os

import pytest
import torch

import fa4
from fa4 import _capi
from conftest import reference, write_files


@pytest.fixture(scope="module")
def compiled():
    """hd 64, 4 q heads sharing 2 kv heads, causal, LSE: fa4.compile's kernel
    and its files (cubin, PTX, manifest) as fa4c writes them."""
    return fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                       lse=True)


@pytest.fixture
def manifest_path(compiled, tmp_path):
    return write_files(compiled, tmp_path)


def test_library_exports_the_c_api_alone():
    lib = _capi.load_library()
    assert lib.fa4rt_abi_version() == _capi.ABI_VERSION
    # (The message of the thread's last failure, if any: other tests may
    # have left one.)
    assert isinstance(lib.fa4rt_last_error(), bytes)


def test_launch_matches_reference_and_extension(compiled, manifest_path, inputs):
    kernel = _capi.load_kernel(manifest_path)
    assert kernel.manifest == compiled.manifest
    assert json.loads(kernel.manifest_json)["attention"]["lse"] is True
    # seq_q > seq_k: the first 33 query rows see no key (O = 0, LSE = -inf).
    q, k, v = inputs(2, 130, 97, 4, 2, 64, torch.float16)
    o = torch.full_like(q, 5.0)
    lse = torch.zeros(2, 4, 130)
    kernel(q, k, v, o, lse)
    want_o, want_lse = reference(q, k, v, causal=True)
    assert (o.double() - want_o).abs().max().item() <= 1e-2
    assert bool((o[:, :33] == 0).all())
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite) and not bool(finite[..., :33].any())
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() <= 1e-2
    # The same kernel as fa4.Kernel launches it (handed over in memory,
    # fa4rt_kernel_create): the same launch path.
    o_ext, lse_ext = torch.zeros_like(q), torch.zeros_like(lse)
    compiled(q, k, v, o_ext, lse_ext)
    assert torch.equal(o, o_ext) and torch.equal(lse, lse_ext)

    # O as a (batch, heads, seq, head_dim) tensor's transpose: written back
    # through its strides, nothing else touched.
    o_bhsd = torch.full((2, 4, 130, 64), 3.0, dtype=torch.float16)
    kernel(q, k, v, o_bhsd.transpose(1, 2), lse)
    assert torch.equal(o_bhsd.transpose(1, 2), o)


def test_errors_come_back_with_the_runtimes_words(manifest_path, inputs):
    kernel = _capi.load_kernel(manifest_path)
    q, k, v = inputs(1, 64, 64, 4, 2, 64, torch.float16)
    o, lse = torch.zeros_like(q), torch.zeros(1, 4, 64)
    with pytest.raises(_capi.LaunchError, match="k: dtype bf16, the kernel takes fp16"):
        kernel(q, k.bfloat16(), v, o, lse)
    with pytest.raises(_capi.LaunchError, match="lse"):
        kernel(q, k, v, o)
    with pytest.raises(_capi.LaunchError, match=r"v: sizes \[1, 64, 4, 64\]"):
        kernel(q, k, q, o, lse)
    with pytest.raises(TypeError, match="dtype torch.float64"):
        kernel(q.double(), k, v, o, lse)
    with pytest.raises(ValueError, match="lse is on meta"):
        kernel(q, k, v, o, lse.to("meta"))
    with pytest.raises(_capi.LoadError, match="cannot read .*missing.cubin.json"):
        _capi.load_kernel(manifest_path.parent / "missing.cubin.json")
    with pytest.raises(_capi.LoadError, match="cannot load"):
        _capi.load_library(manifest_path.parent / "no-such-libfa4rt.so")

    # The CUDA entry point, called as C would: here there is no driver; on a
    # GPU machine the null base addresses are refused. Either way the launch
    # fails with a message and never reaches a device.
    lib = _capi.load_library()
    t = _capi._Tensor(0, b"fp16", 4, (1, 64, 4, 64) + (0,) * 4,
                      (16384, 256, 64, 1) + (0,) * 4)
    handle = lib.fa4rt_kernel_load(os.fspath(manifest_path).encode())
    try:
        assert lib.fa4rt_launch_cuda(handle, *[ctypes.byref(t)] * 4, None,
                                     None, 0, None) != 0
        assert lib.fa4rt_last_error() != b""
        assert lib.fa4rt_kernel_manifest(handle) is not None
        assert lib.fa4rt_last_error() == b""
    finally:
        lib.fa4rt_kernel_free(handle)
    kernel.close()
    with pytest.raises(ValueError, match="closed"):
        kernel(q, k, v, o, lse)


def test_kernel_from_memory(compiled, manifest_path, inputs):
    """fa4rt_kernel_create: the kernel fa4.Kernel launches, handed over in
    memory, with load_kernel's checks."""
    native = compiled._native
    kernel = _capi.create_kernel(native.manifest_json, native.ptx, native.cubin)
    assert kernel.manifest == compiled.manifest
    q, k, v = inputs(1, 70, 70, 4, 2, 64, torch.float16)
    o, lse = torch.zeros_like(q), torch.zeros(1, 4, 70)
    kernel(q, k, v, o, lse)
    o_file, lse_file = torch.zeros_like(q), torch.zeros(1, 4, 70)
    _capi.load_kernel(manifest_path)(q, k, v, o_file, lse_file)
    assert torch.equal(o, o_file) and torch.equal(lse, lse_file)
    # A plan-only launch makes every check and leaves the outputs alone.
    untouched = torch.full_like(q, 7.0)
    kernel(q, k, v, untouched, lse, plan_only=True)
    assert bool((untouched == 7.0).all())
    with pytest.raises(_capi.LaunchError, match="shares memory with q"):
        kernel(q, k, v, q, lse, plan_only=True)
    # The PTX alone runs in the emulator; the cubin alone is checked.
    _capi.create_kernel(native.manifest_json, ptx=native.ptx)
    _capi.create_kernel(native.manifest_json, cubin=native.cubin)
    with pytest.raises(_capi.LoadError, match="neither a cubin nor PTX"):
        _capi.create_kernel(native.manifest_json)
    with pytest.raises(_capi.LoadError, match="NUL"):
        _capi.create_kernel(native.manifest_json + "\0", native.ptx)
    with pytest.raises(_capi.LoadError):
        _capi.create_kernel("{", native.ptx)
    with pytest.raises(_capi.LoadError, match="entry"):
        _capi.create_kernel(native.manifest_json,
                            native.ptx.replace(compiled.manifest["kernel"], "other"))
    with pytest.raises(TypeError, match="ptx must be str or bytes"):
        _capi.create_kernel(native.manifest_json, 3)
    lib = _capi.load_library()
    # Bytes announced without a pointer, unknown emulator flags.
    assert not lib.fa4rt_kernel_create(native.manifest_json.encode(), None, 5,
                                       None, 0)
    assert b"no PTX given" in lib.fa4rt_last_error()
    assert not lib.fa4rt_backend_emulator(1, 0, 6)
    assert b"unknown flags 6" in lib.fa4rt_last_error()


def test_close_is_not_starved_by_launches_in_a_loop(manifest_path):
    """close() while other threads launch back to back: it stops new
    launches, waits for the ones in flight and frees the kernel (it used to
    wait as long as some launch was in flight, which a loop on several
    threads kept true)."""
    import threading
    import time
    kernel = _capi.load_kernel(manifest_path)
    ended = []

    def launches():
        try:
            while True:
                # What a launch holds: the handle, in flight, while the C
                # call runs without Python's lock.
                with kernel._using():
                    time.sleep(0.002)
        except ValueError as error:
            ended.append(str(error))

    threads = [threading.Thread(target=launches, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    closer = threading.Thread(target=kernel.close, daemon=True)
    closer.start()
    closer.join(timeout=20)
    assert not closer.is_alive(), "close() waited while launches kept coming"
    for thread in threads:
        thread.join(timeout=20)
    assert ended == ["the kernel was closed"] * 4
    assert kernel._handle is None
