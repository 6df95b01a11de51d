"""fa4's runtime through its C API (libfa4rt.so), with ctypes.

Pure Python and self-contained (no import of the rest of the package, no
native extension), so it runs under any Python that has torch — on the GPU
machine, where fa4's nanobind extension, built for this machine's Python
and LLVM, cannot load. Load it as ``fa4._capi`` or, without the package, as
a module from its file (bench/h200/check.py does).

    kernel = load_kernel("out/attn.cubin.json")     # + attn.cubin, attn.ptx
    kernel(q, k, v, o, lse)                          # torch tensors

A launch is fa4's ``runtime::launch``: the runtime checks the tensors against
the kernel and says what is wrong (``LaunchError``), builds the tensor maps
from the manifest and launches. CUDA tensors run on the GPU in torch's
current stream (or ``stream``, a CUstream as an int), asynchronously and
in place, with their strides. CPU tensors run in fa4-emu (sm_100a and sm_90a
kernels): their elements are copied into the emulator's memory as dense
tensors, and O's and the LSE's copied back.

The library is found from ``library=`` if given, else ``$FA4RT_LIBRARY``,
else ``libfa4rt.so`` beside this file, else by the dynamic loader's search.
"""

import ctypes
import json
import os
import threading

ABI_VERSION = 1
MAX_RANK = 8

__all__ = ["Kernel", "LaunchError", "LoadError", "load_kernel", "load_library"]


class LoadError(RuntimeError):
    """libfa4rt.so or a kernel could not be loaded."""


class LaunchError(RuntimeError):
    """The runtime refused a launch or the backend failed it."""


class _Tensor(ctypes.Structure):
    # fa4rt_tensor (include/fa4/Runtime/fa4rt.h).
    _fields_ = [("address", ctypes.c_uint64),
                ("dtype", ctypes.c_char_p),
                ("rank", ctypes.c_int32),
                ("sizes", ctypes.c_int64 * MAX_RANK),
                ("strides", ctypes.c_int64 * MAX_RANK)]


_P = ctypes.POINTER
_SIGNATURES = {
    "fa4rt_abi_version": (ctypes.c_int, []),
    "fa4rt_last_error": (ctypes.c_char_p, []),
    "fa4rt_kernel_load": (ctypes.c_void_p, [ctypes.c_char_p]),
    "fa4rt_kernel_free": (None, [ctypes.c_void_p]),
    "fa4rt_kernel_manifest": (ctypes.c_char_p, [ctypes.c_void_p]),
    "fa4rt_backend_cuda": (ctypes.c_void_p, []),
    "fa4rt_backend_emulator": (ctypes.c_void_p, [ctypes.c_uint, ctypes.c_uint64]),
    "fa4rt_backend_free": (None, [ctypes.c_void_p]),
    "fa4rt_emulator_allocate": (ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_uint64]),
    "fa4rt_emulator_host": (ctypes.c_void_p,
                            [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]),
    "fa4rt_launch": (ctypes.c_int,
                     [ctypes.c_void_p, ctypes.c_void_p] + [_P(_Tensor)] * 6 +
                     [ctypes.c_size_t, ctypes.c_void_p]),
    "fa4rt_launch_cuda": (ctypes.c_int,
                          [ctypes.c_void_p] + [_P(_Tensor)] * 6 +
                          [ctypes.c_size_t, ctypes.c_void_p]),
}

_libraries = {}
_libraries_lock = threading.Lock()


def _library_path(path):
    if path:
        return os.fspath(path)
    if os.environ.get("FA4RT_LIBRARY"):
        return os.environ["FA4RT_LIBRARY"]
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libfa4rt.so")
    return beside if os.path.exists(beside) else "libfa4rt.so"


def load_library(path=None):
    """libfa4rt.so as a ctypes library with its functions declared (loaded
    once per path), after checking that it speaks this module's ABI."""
    path = _library_path(path)
    with _libraries_lock:
        lib = _libraries.get(path)
        if lib is not None:
            return lib
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise LoadError(f"cannot load {path}: {e} (set FA4RT_LIBRARY or "
                            f"pass library=)") from None
        for name, (result, arguments) in _SIGNATURES.items():
            function = getattr(lib, name)
            function.restype = result
            function.argtypes = arguments
        if lib.fa4rt_abi_version() != ABI_VERSION:
            raise LoadError(f"{path} speaks fa4rt ABI {lib.fa4rt_abi_version()}, "
                            f"this module {ABI_VERSION}")
        _libraries[path] = lib
        return lib


def _error(lib):
    return lib.fa4rt_last_error().decode(errors="replace")


# Element types by torch's name: fa4's names for q, k, v, o and the LSE,
# MLIR's for the extras (what the manifest's `extras` say).
_TENSOR_DTYPES = {"torch.float16": b"fp16", "torch.bfloat16": b"bf16",
                  "torch.float32": b"f32"}
_EXTRA_DTYPES = {"torch.float16": b"f16", "torch.bfloat16": b"bf16",
                 "torch.float32": b"f32", "torch.float64": b"f64",
                 "torch.int8": b"i8", "torch.int16": b"i16",
                 "torch.int32": b"i32", "torch.int64": b"i64",
                 "torch.bool": b"i1"}


def _describe(name, tensor, dtypes, address=None, strides=None):
    """The fa4rt_tensor of a torch tensor (at `address` with `strides` when
    it is placed elsewhere, as in the emulator's memory)."""
    dtype = dtypes.get(str(tensor.dtype))
    if dtype is None:
        raise TypeError(f"{name}: dtype {tensor.dtype} is not one fa4 takes "
                        f"({', '.join(sorted(dtypes))})")
    rank = tensor.dim()
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"{name}: rank {rank} is outside 1..{MAX_RANK}")
    described = _Tensor()
    described.address = tensor.data_ptr() if address is None else address
    described.dtype = dtype
    described.rank = rank
    strides = tensor.stride() if strides is None else strides
    for i in range(rank):
        described.sizes[i] = tensor.shape[i]
        described.strides[i] = strides[i]
    return described


def _dense_strides(shape):
    strides, stride = [], 1
    for size in reversed(shape):
        strides.append(stride)
        stride *= size
    return tuple(reversed(strides))


class _BoundLaunch:
    """A CUDA launch with its arguments described (Kernel.bind). It holds the
    kernel and the tensors, so that neither is freed while it can launch,
    and the structures the arguments point into. Without a stream of its
    own it launches in torch's current stream of the moment (so that a CUDA
    graph being captured on another stream captures it)."""

    __slots__ = ("_lib", "_device", "_arguments", "_stream", "_held")

    def __init__(self, lib, device, arguments, stream, held):
        self._lib, self._device = lib, device
        self._arguments, self._stream, self._held = arguments, stream, held

    def __call__(self):
        import torch
        with torch.cuda.device(self._device):
            stream = (self._stream if self._stream is not None else
                      torch.cuda.current_stream(self._device).cuda_stream)
            if self._lib.fa4rt_launch_cuda(*self._arguments,
                                           ctypes.c_void_p(stream)):
                raise LaunchError(_error(self._lib))


class Kernel:
    """A kernel loaded from its manifest: ``manifest`` (a dict),
    ``manifest_json``; calling it launches it (see the module's doc)."""

    def __init__(self, lib, handle, path):
        self._lib = lib
        self._handle = handle
        self.path = path
        self.manifest_json = lib.fa4rt_kernel_manifest(handle).decode()
        self.manifest = json.loads(self.manifest_json)

    def close(self):
        if self._handle:
            self._lib.fa4rt_kernel_free(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def __repr__(self):
        return (f"fa4._capi.Kernel({self.path!r}, {self.manifest.get('target')}, "
                f"{self.manifest.get('attention', {})})")

    def __call__(self, q, k, v, o, lse=None, extras=(), stream=None, *,
                 workers=0, seed=1):
        """Launches on q, k, v, o (and the LSE, the extras): on the GPU for
        CUDA tensors (`stream`: a CUstream as an int, default torch's current
        stream of q's device), in fa4-emu for CPU tensors (`workers`,
        `seed`: the emulator's threads and schedule)."""
        extras = list(extras)
        if q.device.type == "cuda":
            self.bind(q, k, v, o, lse, extras, stream)()
        else:
            if not self._handle:
                raise ValueError("the kernel was closed")
            self._emulate(q, k, v, o, lse, extras, workers, seed)

    def bind(self, q, k, v, o, lse=None, extras=(), stream=None):
        """A CUDA launch with its arguments described once: a callable that
        launches again on the same tensors (for timing loops, where
        describing the tensors would be host time the GPU waits for), in
        `stream` or else torch's current stream at each call."""
        if not self._handle:
            raise ValueError("the kernel was closed")
        tensors = [q, k, v, o] + ([lse] if lse is not None else [])
        for name, t in zip(("q", "k", "v", "o", "lse"), tensors):
            if t.device != q.device:
                raise ValueError(f"{name} is on {t.device}, q on {q.device}: "
                                 f"every tensor must be on q's GPU")
        extras = list(extras)
        for i, extra in enumerate(extras):
            if extra.device != q.device:
                raise ValueError(f"extra{i} is on {extra.device}, q on {q.device}")
        described = [_describe(name, t, _TENSOR_DTYPES)
                     for name, t in zip(("q", "k", "v", "o"), (q, k, v, o))]
        lse_arg = (ctypes.byref(_describe("lse", lse, _TENSOR_DTYPES))
                   if lse is not None else None)
        extra_args = (_Tensor * len(extras))(*[
            _describe(f"extra{i}", e, _EXTRA_DTYPES) for i, e in enumerate(extras)])
        arguments = ([self._handle] + [ctypes.byref(t) for t in described] +
                     [lse_arg, extra_args if extras else None, len(extras)])
        return _BoundLaunch(self._lib, q.device, arguments, stream,
                            (self, tensors, extras, described, lse_arg, extra_args))

    def _emulate(self, q, k, v, o, lse, extras, workers, seed):
        import torch
        lib = self._lib
        backend = lib.fa4rt_backend_emulator(workers, seed)
        if not backend:
            raise LaunchError(_error(lib))
        try:
            placed = []

            def place(name, tensor, dtypes, copy_in):
                if tensor.device.type != "cpu":
                    raise ValueError(f"{name} is on {tensor.device}, q on the "
                                     f"CPU: every tensor must be on the CPU")
                nbytes = tensor.numel() * tensor.element_size()
                address = lib.fa4rt_emulator_allocate(backend, max(nbytes, 1))
                if not address:
                    raise LaunchError(_error(lib))
                if copy_in and nbytes:
                    ctypes.memmove(self._host(backend, address, nbytes),
                                   tensor.detach().contiguous().data_ptr(), nbytes)
                placed.append((tensor, address, nbytes))
                return _describe(name, tensor, dtypes, address,
                                 _dense_strides(tensor.shape))

            with torch.no_grad():
                described = [place(name, t, _TENSOR_DTYPES, copy_in)
                             for name, t, copy_in in
                             (("q", q, True), ("k", k, True), ("v", v, True),
                              ("o", o, False))]
                lse_arg = (ctypes.byref(place("lse", lse, _TENSOR_DTYPES, False))
                           if lse is not None else None)
                extra_args = (_Tensor * len(extras))(*[
                    place(f"extra{i}", e, _EXTRA_DTYPES, True)
                    for i, e in enumerate(extras)])
                if lib.fa4rt_launch(self._handle, backend,
                                    *[ctypes.byref(t) for t in described],
                                    lse_arg, extra_args if extras else None,
                                    len(extras), None):
                    raise LaunchError(_error(lib))
                # O and the LSE back (placed 4th and 5th).
                for tensor, address, nbytes in placed[3:5 if lse is not None else 4]:
                    result = torch.empty(tensor.shape, dtype=tensor.dtype)
                    if nbytes:
                        ctypes.memmove(result.data_ptr(),
                                       self._host(backend, address, nbytes), nbytes)
                    tensor.copy_(result)
        finally:
            lib.fa4rt_backend_free(backend)

    def _host(self, backend, address, nbytes):
        host = self._lib.fa4rt_emulator_host(backend, address, nbytes)
        if not host:
            raise LaunchError(_error(self._lib))
        return host


def load_kernel(manifest_path, library=None):
    """Loads `<name>.cubin.json` and the cubin and PTX it names, beside it."""
    lib = load_library(library)
    path = os.fspath(manifest_path)
    handle = lib.fa4rt_kernel_load(path.encode())
    if not handle:
        raise LoadError(_error(lib))
    return Kernel(lib, handle, path)
