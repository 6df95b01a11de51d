"""On the build machine: compiles the fa4 kernels sdpa_compile.py's decoder
layers need on the H200 (sm_90a, 132 SMs) with the fa4 package, into a
directory with an index prebuilt_fa4.py reads, and libfa4rt.so beside them.

    PYTHONPATH=build/python build/python-venv/bin/python \\
        bench/h200/prebuild_sdpa.py dist-sdpa
"""

import os
import shutil
import sys

import fa4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prebuilt_fa4 import variant_key  # noqa: E402

# (head_dim, q_heads, kv_heads, causal): the layers sdpa_compile.py runs.
LAYERS = [(128, 16, 16, True), (128, 16, 4, True), (128, 16, 16, False),
          (64, 16, 16, True)]


def main(out):
    os.makedirs(out, exist_ok=True)
    index = {}
    # The key of each compilation as the extension is asked for it (the
    # normalized variant fa4.compile passes on).
    native_compile = fa4._fa4.compile
    asked = []

    def recording(*args):
        asked.append(variant_key(*args[:10], args[10], args[14], *args[15:]))
        return native_compile(*args)
    fa4._fa4 = type("Recording", (), {"compile": staticmethod(recording)})
    for head_dim, q_heads, kv_heads, causal in LAYERS:
        for dtype in ("bf16",):
            mask = "causal" if causal else "none"
            kernel = fa4.compile(head_dim=head_dim, q_heads=q_heads,
                                 kv_heads=kv_heads, mask=mask, dtype=dtype,
                                 lse=True, target="sm_90a", sm_count=132)
            stem = f"sdpa-d{head_dim}-h{q_heads}-{kv_heads}-{mask}-{dtype}"
            with open(os.path.join(out, stem + ".cubin"), "wb") as f:
                f.write(kernel.cubin)
            with open(os.path.join(out, stem + ".ptx"), "w") as f:
                f.write(kernel.ptx)
            with open(os.path.join(out, stem + ".cubin.json"), "w") as f:
                f.write(kernel._native.manifest_json)
            index[asked[-1]] = stem
    fa4._fa4 = type("Restored", (), {"compile": staticmethod(native_compile)})
    import json
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    library = os.path.join(os.path.dirname(fa4.__file__), "libfa4rt.so")
    shutil.copy(library, os.path.join(out, "libfa4rt.so"))
    print(f"{len(index)} kernels in {out}")


if __name__ == "__main__":
    main(sys.argv[1])
