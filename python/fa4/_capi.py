"""fa4's runtime through its C API (libfa4rt.so), with ctypes: the one
binding of the runtime in Python.

Pure Python and self-contained (no import of the rest of the package, no
native extension), so it runs under any Python that has torch — on the GPU
machine, where fa4's nanobind extension, built for this machine's Python
and LLVM, cannot load. Load it as ``fa4._capi`` or, without the package, as
a module from its file (bench/h200/check.py does). ``fa4.Kernel`` launches
through it too, its compilation handed over in memory (``create_kernel``).

    kernel = load_kernel("out/attn.cubin.json")     # + attn.cubin, attn.ptx
    kernel(q, k, v, o, lse)                          # torch tensors

A launch is fa4's ``runtime::launch``: the runtime checks the tensors against
the kernel and says what is wrong (``LaunchError``), builds the tensor maps
from the manifest and launches. CUDA tensors run on the GPU in torch's
current stream (or ``stream``, a CUstream as an int), asynchronously and
in place, with their strides. CPU tensors run in fa4-emu (sm_100a, sm_103a and sm_90a
kernels): their bytes are copied into the emulator's memory, placed as on
the host (their strides, their alignment, which of them overlap), and O's
and the LSE's elements copied back.

The library is found from ``library=`` if given, else ``$FA4RT_LIBRARY``,
else ``libfa4rt.so`` beside this file, else by the dynamic loader's search.
"""

import ctypes
import json
import os
import threading

ABI_VERSION = 5
EMULATOR_PLAN_ONLY = 1
MAX_RANK = 8

__all__ = ["Kernel", "LaunchError", "LoadError", "create_kernel", "load_kernel",
           "load_library"]


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
    "fa4rt_kernel_create": (ctypes.c_void_p,
                            [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                             ctypes.c_char_p, ctypes.c_size_t]),
    "fa4rt_kernel_free": (None, [ctypes.c_void_p]),
    "fa4rt_kernel_manifest": (ctypes.c_char_p, [ctypes.c_void_p]),
    "fa4rt_backend_cuda": (ctypes.c_void_p, []),
    "fa4rt_backend_emulator": (ctypes.c_void_p,
                               [ctypes.c_uint, ctypes.c_uint64, ctypes.c_uint]),
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
    "fa4rt_backward_load": (ctypes.c_void_p, [ctypes.c_char_p]),
    "fa4rt_backward_create": (ctypes.c_void_p,
                              [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                               ctypes.c_char_p, ctypes.c_size_t]),
    "fa4rt_backward_free": (None, [ctypes.c_void_p]),
    "fa4rt_backward_manifest": (ctypes.c_char_p, [ctypes.c_void_p]),
    "fa4rt_backward_launch": (ctypes.c_int,
                              [ctypes.c_void_p, ctypes.c_void_p, _P(_Tensor),
                               ctypes.c_size_t, ctypes.c_void_p]),
    "fa4rt_prepare_fp8_value": (ctypes.c_int,
                                [ctypes.c_void_p, ctypes.c_size_t,
                                 _P(ctypes.c_int64), _P(ctypes.c_int64),
                                 ctypes.c_void_p, ctypes.c_size_t]),
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
        # The version before anything else: a library of another ABI may
        # lack functions this module declares.
        try:
            version = lib.fa4rt_abi_version
        except AttributeError:
            raise LoadError(f"{path} is not libfa4rt (it has no "
                            f"fa4rt_abi_version)") from None
        version.restype, version.argtypes = ctypes.c_int, []
        if version() != ABI_VERSION:
            raise LoadError(f"{path} speaks fa4rt ABI {version()}, "
                            f"this module {ABI_VERSION}")
        for name, (result, arguments) in _SIGNATURES.items():
            try:
                function = getattr(lib, name)
            except AttributeError:
                raise LoadError(f"{path} lacks {name} although it speaks ABI "
                                f"{ABI_VERSION}") from None
            function.restype = result
            function.argtypes = arguments
        _libraries[path] = lib
        return lib


def _error(lib):
    return lib.fa4rt_last_error().decode(errors="replace")


# Element types by torch's name: fa4's names for q, k, v, o and the LSE,
# MLIR's for the extras (what the manifest's `extras` say).
_TENSOR_DTYPES = {"torch.float16": b"fp16", "torch.bfloat16": b"bf16",
                  "torch.float8_e4m3fn": b"e4m3", "torch.float32": b"f32"}
_EXTRA_DTYPES = {"torch.float16": b"f16", "torch.bfloat16": b"bf16",
                 "torch.float32": b"f32", "torch.float64": b"f64",
                 "torch.int8": b"i8", "torch.int16": b"i16",
                 "torch.int32": b"i32", "torch.int64": b"i64",
                 "torch.bool": b"i1"}


# What each role takes, for the message refusing another dtype (the
# runtime names the kernel's own dtype when a taken one does not match).
_ROLE_DTYPES = {"q": "torch.float16, torch.bfloat16 or torch.float8_e4m3fn",
                "lse": "torch.float32"}


# Descriptions by (dtype, sizes, strides, dtype table): a launch copies the
# cached one and sets its address (filling sizes and strides field by field
# is much of a launch's host time). Bounded; cleared when full.
_described = {}
_DESCRIBED_MAX = 512


def _describe(name, tensor, dtypes, address=None):
    """The fa4rt_tensor of a torch tensor (at `address` when it is placed
    elsewhere, as in the emulator's memory, with its own strides)."""
    key = (tensor.dtype, tensor.shape, tensor.stride(), dtypes is _TENSOR_DTYPES)
    known = _described.get(key)
    if known is None:
        known = _describe_new(name, tensor, dtypes)
        if len(_described) >= _DESCRIBED_MAX:
            _described.clear()
        _described[key] = known
    described = _Tensor.from_buffer_copy(known)
    described.address = tensor.data_ptr() if address is None else address
    return described


def _describe_new(name, tensor, dtypes):
    """_describe's description of a (dtype, sizes, strides) not seen yet,
    its address 0; a TypeError / ValueError naming `name` when the C API
    cannot take it."""
    dtype = dtypes.get(str(tensor.dtype))
    if dtype is None:
        taken = (_ROLE_DTYPES["lse"] if name == "lse" else
                 _ROLE_DTYPES["q"] if name in ("q", "k", "v", "o") else
                 ", ".join(sorted(dtypes)))
        raise TypeError(f"{name}: dtype {tensor.dtype} is not one fa4 takes "
                        f"there ({taken})")
    rank = tensor.dim()
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"{name}: rank {rank} is outside 1..{MAX_RANK}")
    described = _Tensor()
    described.dtype = dtype
    described.rank = rank
    strides = tensor.stride()
    for i in range(rank):
        described.sizes[i] = tensor.shape[i]
        described.strides[i] = strides[i]
    return described


# The last element's offset (in elements) of a view, by (sizes, strides).
_extents = {}


def _extent(shape, strides):
    """Offset of a view's last element from its first: sum (size-1)*stride
    over the axes of more than one element."""
    key = (shape, strides)
    last = _extents.get(key)
    if last is None:
        last = sum((size - 1) * stride
                   for size, stride in zip(shape, strides) if size > 1)
        if len(_extents) >= _DESCRIBED_MAX:
            _extents.clear()
        _extents[key] = last
    return last


def _tensor(name, value, written=False):
    """`value` when it is a torch tensor whose elements lie in host or
    device memory it owns, a TypeError / ValueError naming `name` else.
    Checked before any byte is read or copied: a tensor whose storage was
    freed or shrunk (``untyped_storage().resize_``), one without storage
    (fake, functorch-batched) or nested is refused here, where the C API
    would only see an address. A negated or conjugated view (a bit on the
    tensor, not in its bytes) is resolved for an input (a copy) and refused
    for an output (`written`)."""
    import torch
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.is_nested:
        raise ValueError(f"{name}: a nested tensor; fa4 takes dense (strided) "
                         f"tensors")
    if value.layout != torch.strided:
        raise ValueError(f"{name}: layout {value.layout}; fa4 takes dense "
                         f"(strided) tensors")
    if value.is_neg() or value.is_conj():
        if written:
            raise ValueError(f"{name}: a negated or conjugated view; the "
                             f"kernel writes it in place")
        value = value.resolve_neg().resolve_conj()
    if value.device.type == "meta" or value.numel() == 0:
        return value
    if type(value).__name__ == "FakeTensor":
        raise ValueError(f"{name}: a fake tensor (torch's FakeTensorMode) has "
                         f"no memory fa4 can read")
    try:
        storage_bytes = value.untyped_storage().nbytes()
        address = value.data_ptr()
    except (RuntimeError, NotImplementedError) as e:
        raise ValueError(f"{name}: a tensor without memory fa4 can read "
                         f"({str(e).splitlines()[0]})") from None
    if address == 0:
        raise ValueError(f"{name}: its data pointer is null (freed storage, "
                         f"or a fake tensor)")
    last = _extent(value.shape, value.stride())
    end = (value.storage_offset() + last + 1) * value.element_size()
    if end > storage_bytes:
        raise ValueError(f"{name}: its elements reach byte {end} of a storage "
                         f"of {storage_bytes} (the storage was resized)")
    return value


def _arguments(q, k, v, o, lse, extras):
    """A launch's tensors checked (_tensor), O and the LSE as the outputs,
    the extras a sequence of tensors (a tensor itself is not one)."""
    import torch
    if isinstance(extras, (str, bytes, torch.Tensor)) or \
            not hasattr(extras, "__iter__"):
        raise TypeError(f"extras must be a sequence of tensors, got "
                        f"{type(extras).__name__}")
    q, k, v = (_tensor(name, t) for name, t in (("q", q), ("k", k), ("v", v)))
    o = _tensor("o", o, written=True)
    lse = None if lse is None else _tensor("lse", lse, written=True)
    extras = [_tensor(f"extra{i}", e) for i, e in enumerate(extras)]
    return q, k, v, o, lse, extras


def _bounded(name, value, high):
    """`value` as an int in [0, high) (a C unsigned argument)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not 0 <= value < high:
        raise ValueError(f"{name} must be in [0, {high}), got {value}")
    return value


def _host_span(tensor):
    """[begin, end): the host bytes a CPU tensor's elements lie in (inside
    its storage: torch checks every view against it)."""
    begin = tensor.data_ptr()
    if tensor.numel() == 0:
        return begin, begin
    last = sum((size - 1) * stride
               for size, stride in zip(tensor.shape, tensor.stride()) if size > 1)
    return begin, begin + (last + 1) * tensor.element_size()


# The emulator's allocations are 256-byte aligned; a placed tensor keeps
# its host address modulo this, so alignment is judged as on a GPU.
_PLACEMENT_ALIGNMENT = 256


def _current_stream(device):
    """torch's current stream of `device` (a CUDA device with its index), as
    the CUstream the C API takes."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device.index)
    return torch.cuda.current_stream(device).cuda_stream


class _on_device:
    """`device` current for the launch (its context is the driver's current
    one, where the runtime loads the kernel's module), switched only when
    another is current."""

    __slots__ = ("_device", "_switch")

    def __init__(self, device):
        self._device, self._switch = device, None

    def __enter__(self):
        import torch
        if torch.cuda.current_device() != self._device.index:
            self._switch = torch.cuda.device(self._device)
            self._switch.__enter__()

    def __exit__(self, *exc):
        if self._switch is not None:
            return self._switch.__exit__(*exc)
        return False


class _BoundLaunch:
    """A CUDA launch with its arguments described (Kernel.bind). It holds the
    kernel and the tensors, so that neither is freed while it can launch,
    and the structures the arguments point into. Without a stream of its
    own it launches in torch's current stream of the moment (so that a CUDA
    graph being captured on another stream captures it)."""

    __slots__ = ("_kernel", "_device", "_arguments", "_stream", "_held")

    def __init__(self, kernel, device, arguments, stream, held):
        self._kernel, self._device = kernel, device
        self._arguments, self._stream, self._held = arguments, stream, held

    def __call__(self):
        import torch
        lib = self._kernel._lib
        with _on_device(self._device), self._kernel._using() as handle:
            stream = (self._stream if self._stream is not None else
                      _current_stream(self._device))
            if lib.fa4rt_launch_cuda(handle, *self._arguments,
                                     ctypes.c_void_p(stream)):
                raise LaunchError(_error(lib))


class _InFlight:
    """One launch in flight on a _Handle (its `with` gives the C handle):
    counted, so that close() waits for it."""

    __slots__ = ("_owner",)

    def __init__(self, owner):
        self._owner = owner

    def __enter__(self):
        owner = self._owner
        with owner._state:
            if not owner._handle or owner._closing:
                raise ValueError("the kernel was closed")
            owner._in_flight += 1
        return owner._handle

    def __exit__(self, *exc):
        owner = self._owner
        with owner._state:
            owner._in_flight -= 1
            owner._state.notify_all()
        return False


class _Handle:
    """A handle of libfa4rt (a forward's kernel or a backward's three) whose
    launches in flight are counted: close() waits for them, so that the
    handle is never freed under one (ctypes releases Python's lock during a
    call). Subclasses name the C functions reading the manifest and freeing
    the handle."""

    _manifest_function = _free_function = None

    def __init__(self, lib, handle, path):
        self._lib = lib
        self._handle = handle
        self._state = threading.Condition()
        self._in_flight = 0
        # Set by close(): no launch starts after it, so that launches in a
        # loop on other threads cannot keep it waiting.
        self._closing = False
        self.path = path
        self.manifest_json = getattr(lib, self._manifest_function)(handle).decode()
        self.manifest = json.loads(self.manifest_json)

    def _using(self):
        """The handle, kept open for one launch (a context manager giving
        it); a ValueError once closed."""
        return _InFlight(self)

    def close(self):
        """Frees the kernel once the launches in flight have returned; later
        launches raise ValueError."""
        state = getattr(self, "_state", None)
        if state is None:  # __init__ did not get that far
            return
        with state:
            self._closing = True
            while self._in_flight:
                state.wait()
            if self._handle:
                getattr(self._lib, self._free_function)(self._handle)
                self._handle = None

    def __del__(self):
        self.close()


class Kernel(_Handle):
    """A kernel loaded from its manifest: ``manifest`` (a dict),
    ``manifest_json``; calling it launches it (see the module's doc)."""

    _manifest_function = "fa4rt_kernel_manifest"
    _free_function = "fa4rt_kernel_free"

    def __repr__(self):
        return (f"fa4._capi.Kernel({self.path!r}, {self.manifest.get('target')}, "
                f"{self.manifest.get('attention', {})})")

    def __call__(self, q, k, v, o, lse=None, extras=(), stream=None, *,
                 workers=0, seed=1, plan_only=False):
        """Launches on q, k, v, o (and the LSE, the extras): on the GPU for
        CUDA tensors (`stream`: a CUstream as an int, default torch's current
        stream of q's device), in fa4-emu for CPU tensors (`workers`,
        `seed`: the emulator's threads and schedule; with `plan_only` the
        launch stops after every check and the plan, where the kernel would
        start, and the outputs are left as they were)."""
        q, k, v, o, lse, extras = _arguments(q, k, v, o, lse, extras)
        if q.device.type == "cuda":
            self._bind_checked(q, k, v, o, lse, extras, stream)()
        else:
            if not self._handle:
                raise ValueError("the kernel was closed")
            self._emulate(q, k, v, o, lse, extras,
                          _bounded("workers", workers, 1 << 32),
                          _bounded("seed", seed, 1 << 64), bool(plan_only))

    def bind(self, q, k, v, o, lse=None, extras=(), stream=None):
        """A CUDA launch with its arguments described once: a callable that
        launches again on the same tensors (for timing loops, where
        describing the tensors would be host time the GPU waits for), in
        `stream` or else torch's current stream at each call."""
        return self._bind_checked(*_arguments(q, k, v, o, lse, extras), stream)

    def _bind_checked(self, q, k, v, o, lse, extras, stream):
        """bind() of arguments _arguments() checked."""
        if not self._handle:
            raise ValueError("the kernel was closed")
        tensors = [q, k, v, o] + ([lse] if lse is not None else [])
        if q.device.type != "cuda":
            raise ValueError(f"q is on {q.device}: a CUDA launch takes "
                             f"tensors on the GPU (every tensor must be on "
                             f"the GPU)")
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
        arguments = ([ctypes.byref(t) for t in described] +
                     [lse_arg, extra_args if extras else None, len(extras)])
        if stream is not None:
            stream = _bounded("stream", stream, 1 << 64)
        return _BoundLaunch(self, q.device, arguments, stream,
                            (self, tensors, extras, described, lse_arg, extra_args))

    def _emulate(self, q, k, v, o, lse, extras, workers, seed, plan_only):
        named = [("q", q, _TENSOR_DTYPES), ("k", k, _TENSOR_DTYPES),
                 ("v", v, _TENSOR_DTYPES), ("o", o, _TENSOR_DTYPES)]
        if lse is not None:
            named.append(("lse", lse, _TENSOR_DTYPES))
        named += [(f"extra{i}", e, _EXTRA_DTYPES) for i, e in enumerate(extras)]
        lib = self._lib

        def launch(backend, described):
            lse_arg = ctypes.byref(described[4]) if lse is not None else None
            first_extra = 5 if lse is not None else 4
            extra_args = (_Tensor * len(extras))(*described[first_extra:])
            with self._using() as handle:
                return lib.fa4rt_launch(handle, backend,
                                        *[ctypes.byref(t) for t in described[:4]],
                                        lse_arg, extra_args if extras else None,
                                        len(extras), None)

        _emulated(lib, named, range(3, 5 if lse is not None else 4), launch,
                  workers, seed, plan_only)


def _emulated(lib, named, written, launch, workers, seed, plan_only):
    """A launch in fa4-emu on CPU tensors: `named` the (name, tensor, dtypes)
    of its tensors in the C call's order, `written` the indices of those it
    writes, `launch(backend, described)` the C call (0 when it succeeded).

    The emulator's memory mirrors the host's: tensors whose host bytes
    overlap are placed in one allocation at the same distances apart, each
    with its own strides, so that the runtime's checks see the caller's
    tensors as they are (their strides, alignment and aliasing; a kernel
    compiled for a static layout gets that layout) and a broadcast input
    costs its storage, not its elements."""
    import torch
    for name, tensor, _ in named:
        if tensor.device.type != "cpu":
            raise ValueError(f"{name} is on {tensor.device}, q on the "
                             f"CPU: every tensor must be on the CPU")
    # Groups of tensors whose host bytes overlap, by address.
    spans = sorted((_host_span(t) + (i,) for i, (_, t, _) in enumerate(named)))
    groups = []
    for begin, end, i in spans:
        if groups and begin < groups[-1][1] and end > begin:
            groups[-1][1] = max(groups[-1][1], end)
            groups[-1][2].append(i)
        else:
            groups.append([begin, end, [i]])
    backend = lib.fa4rt_backend_emulator(
        workers, seed, EMULATOR_PLAN_ONLY if plan_only else 0)
    if not backend:
        raise LaunchError(_error(lib))

    def host(address, nbytes):
        pointer = lib.fa4rt_emulator_host(backend, address, nbytes)
        if not pointer:
            raise LaunchError(_error(lib))
        return pointer

    try:
        placed = [None] * len(named)
        for begin, end, members in groups:
            start = begin - begin % _PLACEMENT_ALIGNMENT
            nbytes = end - start
            address = lib.fa4rt_emulator_allocate(backend, max(nbytes, 1))
            if not address:
                raise LaunchError(_error(lib))
            if end > begin:
                ctypes.memmove(host(address + begin - start, end - begin),
                               begin, end - begin)
            for i in members:
                offset = named[i][1].data_ptr() - start
                placed[i] = (address, start, nbytes, offset)
        described = [_describe(name, tensor, dtypes, placed[i][0] + placed[i][3])
                     for i, (name, tensor, dtypes) in enumerate(named)]
        if launch(backend, described):
            raise LaunchError(_error(lib))
        if plan_only:
            return
        # The outputs back, element by element through their strides (the
        # launch refused them sharing memory with anything); an inference
        # tensor is written in inference mode, the only mode that may.
        for i in written:
            tensor = named[i][1]
            mode = (torch.inference_mode() if tensor.is_inference()
                    else torch.no_grad())
            with mode:
                if tensor.numel() == 0:
                    continue
                address, start, nbytes, offset = placed[i]
                size = tensor.element_size()
                raw = torch.empty(-(-nbytes // size) * size, dtype=torch.uint8)
                ctypes.memmove(raw.data_ptr(), host(address, nbytes), nbytes)
                tensor.copy_(raw.view(tensor.dtype).as_strided(
                    tensor.shape, tensor.stride(), offset // size))
    finally:
        lib.fa4rt_backend_free(backend)


def _handed_over(library, manifest_json, ptx, cubin, create, free):
    """A handle `create` (fa4rt_kernel_create or fa4rt_backward_create) made
    from the manifest's JSON, the PTX and the cubin (str or bytes)."""
    lib = load_library(library)

    def raw(what, value):
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise TypeError(f"{what} must be str or bytes, got {type(value).__name__}")

    manifest_json, ptx, cubin = (raw("manifest_json", manifest_json),
                                 raw("ptx", ptx), raw("cubin", cubin))
    if b"\0" in manifest_json:
        raise LoadError("the manifest holds a NUL character")
    handle = getattr(lib, create)(manifest_json, ptx, len(ptx), cubin,
                                  len(cubin))
    if not handle:
        raise LoadError(_error(lib))
    return lib, handle


def create_kernel(manifest_json, ptx=b"", cubin=b"", library=None,
                  name="<in memory>"):
    """A kernel handed over in memory (fa4rt_kernel_create): the manifest's
    JSON, the PTX and the cubin (str or bytes; either may be empty, not
    both), as a compiler in this process made them (fa4.Kernel's launches
    come here). The same checks as ``load_kernel``; ``name`` is what the
    kernel's repr shows in place of a path."""
    lib, handle = _handed_over(library, manifest_json, ptx, cubin,
                               "fa4rt_kernel_create", "fa4rt_kernel_free")
    return Kernel(lib, handle, name)


def create_backward(manifest_json, ptx=b"", cubin=b"", library=None,
                    name="<in memory>"):
    """The backward's kernels handed over in memory (fa4rt_backward_create),
    as ``create_kernel`` takes a forward's: fa4.compile's backward comes
    here. The same checks as ``load_backward``."""
    lib, handle = _handed_over(library, manifest_json, ptx, cubin,
                               "fa4rt_backward_create", "fa4rt_backward_free")
    return BackwardKernel(lib, handle, name)


BACKWARD_TENSORS = ("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv",
                    "delta", "dq_accum")
_BACKWARD_WRITTEN = {"dq", "dk", "dv", "delta", "dq_accum"}


class BackwardKernel(_Handle):
    """The backward's three kernels (fa4c --backward), loaded from
    their manifest (kind "backward") or handed over in memory:
    ``manifest``, ``manifest_json``. Calling it with the 11 tensors of
    BACKWARD_TENSORS (and ``extras=``, the memrefs the kernels' score_mod /
    mask_mod regions read, in the manifest's order) runs the three kernels
    in order: on the GPU for CUDA
    tensors (enqueued on `stream`, default torch's current stream of q's
    device), in fa4-emu for CPU tensors (`workers`, `seed`: the emulator's
    threads and schedule). delta ([batch, q_heads, seq_q]) and dq_accum
    (q's sizes) are float32 scratch the kernels fill."""

    _manifest_function = "fa4rt_backward_manifest"
    _free_function = "fa4rt_backward_free"

    def __repr__(self):
        return (f"fa4._capi.BackwardKernel({self.path!r}, "
                f"{self.manifest.get('attention', {})})")

    def _arguments(self, tensors, extras=()):
        """The 11 tensors and the extras (the memrefs the kernels' regions
        read, in the manifest's order) checked, as (name, tensor, dtypes)
        in the C call's order."""
        import torch
        if not self._handle:
            raise ValueError("the kernel was closed")
        if len(tensors) != len(BACKWARD_TENSORS):
            raise TypeError(f"the backward takes {len(BACKWARD_TENSORS)} "
                            f"tensors ({', '.join(BACKWARD_TENSORS)}), got "
                            f"{len(tensors)}")
        if isinstance(extras, (str, bytes, torch.Tensor)) or \
                not hasattr(extras, "__iter__"):
            raise TypeError(f"extras must be a sequence of tensors, got "
                            f"{type(extras).__name__}")
        named = [(name, _tensor(name, t, written=name in _BACKWARD_WRITTEN),
                  _TENSOR_DTYPES)
                 for name, t in zip(BACKWARD_TENSORS, tensors)]
        named += [(f"extra{i}", _tensor(f"extra{i}", e), _EXTRA_DTYPES)
                  for i, e in enumerate(extras)]
        device = named[0][1].device
        for name, t, _ in named:
            if t.device != device:
                raise ValueError(f"{name} is on {t.device}, q on {device}: "
                                 f"every tensor must be on q's device")
        return named

    def bind(self, *tensors, extras=(), stream=None):
        """The CUDA launch with its arguments described once (a callable),
        as Kernel.bind."""
        return self._bind_checked(self._arguments(tensors, extras), stream)

    def _bind_checked(self, named, stream):
        """bind() of tensors _arguments() checked."""
        checked = [t for _, t, _ in named]
        device = checked[0].device
        if device.type != "cuda":
            raise ValueError(f"q is on {device}: bind() makes a CUDA launch "
                             f"(call the kernel itself on CPU tensors, which "
                             f"run in fa4-emu)")
        described = (_Tensor * len(named))(*[
            _describe(name, t, dtypes) for name, t, dtypes in named])
        lib = self._lib
        backend = lib.fa4rt_backend_cuda()
        if not backend:
            raise LaunchError(_error(lib))
        if stream is not None:
            stream = _bounded("stream", stream, 1 << 64)

        def launch():
            with _on_device(device), self._using() as handle:
                s = stream if stream is not None else _current_stream(device)
                if lib.fa4rt_backward_launch(handle, backend, described,
                                             len(checked), ctypes.c_void_p(s)):
                    raise LaunchError(_error(lib))
        launch._held = (self, checked, described)
        return launch

    def __call__(self, *tensors, extras=(), stream=None, workers=0, seed=1):
        named = self._arguments(tensors, extras)
        if named[0][1].device.type == "cuda":
            self._bind_checked(named, stream)()
            return
        workers = _bounded("workers", workers, 1 << 32)
        seed = _bounded("seed", seed, 1 << 64)
        lib = self._lib

        def launch(backend, described):
            array = (_Tensor * len(described))(*described)
            with self._using() as handle:
                return lib.fa4rt_backward_launch(handle, backend, array,
                                                 len(described), None)

        _emulated(lib, named,
                  [i for i, name in enumerate(BACKWARD_TENSORS)
                   if name in _BACKWARD_WRITTEN],
                  launch, workers, seed, False)


def load_backward(manifest_path, library=None):
    """Loads a backward's manifest (kind "backward") and the cubin and PTX
    it names, beside it."""
    lib = load_library(library)
    path = os.fspath(manifest_path)
    handle = lib.fa4rt_backward_load(path.encode())
    if not handle:
        raise LoadError(_error(lib))
    return BackwardKernel(lib, handle, path)


def load_kernel(manifest_path, library=None):
    """Loads `<name>.cubin.json` and the cubin and PTX it names, beside it."""
    lib = load_library(library)
    path = os.fspath(manifest_path)
    handle = lib.fa4rt_kernel_load(path.encode())
    if not handle:
        raise LoadError(_error(lib))
    return Kernel(lib, handle, path)
