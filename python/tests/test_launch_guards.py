"""What a launch refuses before it reads or writes a byte: tensors whose
memory is not theirs (freed or shrunk storage, fake tensors, read-only
arrays as outputs), arguments of the wrong kind, a kernel closed under a
launch, a library of another ABI; and what it handles (inference tensors,
negated views)."""

import ctypes
import threading
import time

import numpy as np
import pytest
import torch

import fa4
from fa4 import _capi
from conftest import reference


@pytest.fixture(scope="module")
def kernel():
    return fa4.compile(head_dim=64, q_heads=2, kv_heads=1)


def inputs(seq_q=40, seq_k=50):
    torch.manual_seed(0)
    return (torch.randn(1, seq_q, 2, 64, dtype=torch.float16),
            torch.randn(1, seq_k, 1, 64, dtype=torch.float16),
            torch.randn(1, seq_k, 1, 64, dtype=torch.float16))


def close_to(o, want):
    return (o.double() - want).abs().max().item() <= 1e-2


def test_read_only_outputs_are_refused(kernel, tmp_path):
    q, k, v = inputs()
    frozen = np.zeros(tuple(q.shape), np.float16)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="o: the array is read-only"):
        kernel(q, k, v, frozen)
    path = tmp_path / "o.bin"
    np.zeros(tuple(q.shape), np.float16).tofile(path)
    mapped = np.memmap(path, dtype=np.float16, mode="r", shape=tuple(q.shape))
    with pytest.raises(ValueError, match="read-only"):
        kernel(q, k, v, mapped)
    immutable = np.frombuffer(bytes(q.numel() * 2), np.float16).reshape(q.shape)
    with pytest.raises(ValueError, match="read-only"):
        kernel(q, k, v, immutable)
    # A read-only input is only read.
    q_frozen = q.numpy().copy()
    q_frozen.flags.writeable = False
    o = torch.zeros_like(q)
    kernel(q_frozen, k, v, o)
    assert close_to(o, reference(q, k, v)[0])


def test_tensors_without_their_memory_are_refused(kernel):
    q, k, v = inputs()
    freed = q.clone()
    freed.untyped_storage().resize_(0)
    with pytest.raises(ValueError, match="q: its data pointer is null"):
        kernel(freed, k, v, torch.zeros_like(q))
    with pytest.raises(ValueError, match="q: its data pointer is null"):
        fa4.attention(freed, k, v)
    shrunk = q.clone()
    shrunk.untyped_storage().resize_(64)
    with pytest.raises(ValueError, match="q: its elements reach byte 10240 "
                                         "of a storage of 64"):
        kernel(shrunk, k, v, torch.zeros_like(q))
    o = torch.zeros_like(q)
    o.untyped_storage().resize_(64)
    with pytest.raises(ValueError, match="o: its elements reach"):
        kernel(q, k, v, o)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (q, k, v)]
        with pytest.raises(ValueError, match="q: "):
            kernel(*fake, torch.empty_like(fake[0]))
    nested = torch.nested.nested_tensor([q[0], q[0]])
    with pytest.raises(ValueError, match="q: a nested tensor"):
        kernel(nested, k, v, torch.zeros_like(q))


def test_argument_kinds(kernel):
    q, k, v = inputs()
    with pytest.raises(TypeError, match="extras must be a sequence of tensors, "
                                        "got Tensor"):
        kernel(q, k, v, torch.zeros_like(q), extras=torch.zeros(2, 16))

    class BrokenDlpack:
        def __dlpack__(self, *args, **kwargs):
            raise KeyError("no")

        def __dlpack_device__(self):
            raise KeyError("no")

    with pytest.raises(TypeError, match="q: not an array torch can take"):
        kernel(BrokenDlpack(), k, v, torch.zeros_like(q))
    with pytest.raises(TypeError, match="dtype torch.float64 is not one fa4 "
                                        r"takes there \(torch.float16, "
                                        r"torch.bfloat16 or torch.float8_e4m3fn"):
        kernel(q.double(), k, v, torch.zeros_like(q))


def test_inference_tensors_and_negated_views(kernel):
    q, k, v = inputs()
    with torch.inference_mode():
        o = torch.zeros_like(q)
    kernel(q, k, v, o)
    assert close_to(o, reference(q, k, v)[0])
    o = torch.zeros_like(q)
    kernel(torch._neg_view(q), k, v, o)
    assert close_to(o, reference(-q, k, v)[0])
    with pytest.raises(ValueError, match="o: a negated or conjugated view"):
        kernel(q, k, v, torch._neg_view(torch.zeros_like(q)))


def test_close_waits_for_a_launch_in_flight(kernel):
    q, k, v = inputs(200, 256)
    capi = _capi.create_kernel(kernel._native.manifest_json, kernel.ptx)
    o = torch.zeros_like(q)
    done = threading.Event()

    def launch():
        capi(q, k, v, o, workers=1)
        done.set()

    thread = threading.Thread(target=launch)
    thread.start()
    # close() once the launch is in flight (a fixed sleep raced the launch's
    # own checks on a loaded machine: closed before it started).
    deadline = time.time() + 60
    while not capi._in_flight and thread.is_alive() and time.time() < deadline:
        time.sleep(0.001)
    capi.close()  # waits for the launch, then frees the kernel
    thread.join()
    assert done.is_set() and close_to(o, reference(q, k, v)[0])
    with pytest.raises(ValueError, match="closed"):
        capi(q, k, v, o)


def test_a_library_that_is_not_libfa4rt():
    with pytest.raises(_capi.LoadError, match="is not libfa4rt"):
        _capi.load_library("libc.so.6")


def test_tensors_past_the_address_space(kernel):
    lib = _capi.load_library()
    capi = _capi.create_kernel(kernel._native.manifest_json, kernel.ptx)
    backend = lib.fa4rt_backend_emulator(1, 0, _capi.EMULATOR_PLAN_ONLY)

    def tensor(address, sizes, dtype=b"fp16"):
        strides, dense = [], 1
        for size in reversed(sizes):
            strides.insert(0, dense)
            dense *= size
        return _capi._Tensor(address, dtype, len(sizes),
                             tuple(sizes) + (0,) * (8 - len(sizes)),
                             tuple(strides) + (0,) * (8 - len(strides)))

    try:
        q, o = tensor(1 << 20, (1, 64, 2, 64)), tensor(1 << 24, (1, 64, 2, 64))
        k = tensor((1 << 64) - 4096, (1, 64, 1, 64))
        v = tensor(1 << 28, (1, 64, 1, 64))
        with capi._using() as handle:
            failed = lib.fa4rt_launch(handle, backend, *[ctypes.byref(t) for t in
                                                         (q, k, v, o)],
                                      None, None, 0, None)
        assert failed
        assert b"k: its elements run past the end of the address space" in \
            lib.fa4rt_last_error()
    finally:
        lib.fa4rt_backend_free(backend)


def test_a_cpu_launch_larger_than_memory_is_refused():
    q, k, v = inputs()
    with pytest.raises(fa4.LaunchError, match="bytes of host memory"):
        fa4.attention(q.expand(1 << 20, 40, 2, 64), k.expand(1 << 20, 50, 1, 64),
                      v.expand(1 << 20, 50, 1, 64))
