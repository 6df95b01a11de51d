"""A stand-in for fa4's native extension (`fa4._fa4`) on the GPU machine,
where the extension (linked against LLVM/MLIR) cannot load: it serves the
kernels prebuild_sdpa.py compiled on the build machine, looked up by the
variant `fa4.compile` asks for, and answers the checks the extension would
make with the kernels' own (the runtime checks every launch anyway).

sdpa_compile.py installs it as `fa4._fa4` before importing fa4; nothing in
the fa4 package knows of it. Its directory (FA4_PREBUILT_DIR) holds
index.json ({key: stem}) and each kernel's stem.cubin, stem.ptx and
stem.cubin.json.
"""

import json
import os

# The chip table's rows the package reads (fa4/Target/Target.h), in its
# order: the first is the default target.
_CHIPS = [
    {"name": "sm_100a", "family": "Blackwell", "sm_count": 148,
     "compute_capability": (10, 0), "emulated": True, "backward": False},
    {"name": "sm_103a", "family": "Blackwell", "sm_count": 148,
     "compute_capability": (10, 3), "emulated": True, "backward": False},
    {"name": "sm_90a", "family": "Hopper", "sm_count": 132,
     "compute_capability": (9, 0), "emulated": True, "backward": True},
]


class CompileError(RuntimeError):
    pass


def variant_key(head_dim, q_heads, kv_heads, mask, left, right, dtype, lse,
                scale, softcap, target, sm_count, seqused_k=False,
                page_size=0, num_splits=1, varlen=False):
    """The key of a compilation: the variant's fields as fa4.compile passes
    them to the extension."""
    return json.dumps([head_dim, q_heads, kv_heads, mask, left, right, dtype,
                       bool(lse), scale, float(softcap), target, sm_count,
                       bool(seqused_k), page_size, num_splits, bool(varlen)])


class _Native:
    def __init__(self, directory, stem):
        base = os.path.join(directory, stem)
        with open(base + ".cubin", "rb") as f:
            self.cubin = f.read()
        with open(base + ".ptx") as f:
            self.ptx = f.read()
        with open(base + ".cubin.json") as f:
            self.manifest_json = f.read()
        self.from_cache = True

    def ir(self, stage):
        raise CompileError("prebuilt kernel: no IR on this machine")


def _index():
    directory = os.environ["FA4_PREBUILT_DIR"]
    with open(os.path.join(directory, "index.json")) as f:
        return directory, json.load(f)


def compile(head_dim, q_heads, kv_heads, mask, left, right, dtype, lse,
            scale, softcap, target, cache, rescale_threshold,
            exp2_emulation_fraction, sm_count, seqused_k=False, page_size=0,
            num_splits=1, varlen=False):
    directory, index = _index()
    key = variant_key(head_dim, q_heads, kv_heads, mask, left, right, dtype,
                      lse, scale, softcap, target, sm_count, seqused_k,
                      page_size, num_splits, varlen)
    if key not in index:
        raise CompileError(f"no prebuilt kernel for {key} in {directory}")
    return _Native(directory, index[key])


def backward_key(head_dim, q_heads, kv_heads, mask, left, right, dtype, scale,
                 softcap, target, cache, sm_count, deterministic):
    """The key of a backward's compilation: compile_backward's arguments
    (the cache flag aside)."""
    return json.dumps(["backward", head_dim, q_heads, kv_heads, mask, left,
                       right, dtype, scale, float(softcap), target, sm_count,
                       bool(deterministic)])


def compile_backward(*args):
    directory, index = _index()
    key = backward_key(*args)
    if key not in index:
        raise CompileError(f"no prebuilt backward for {key} in {directory}")
    return _Native(directory, index[key])


def compile_ir(*args, **kwargs):
    raise CompileError("prebuilt kernels only: no compiler on this machine")


def check_variant(*args):
    pass


def check_shapes(*args):
    pass


def ir_stages():
    return []


def chips():
    return [dict(chip) for chip in _CHIPS]
