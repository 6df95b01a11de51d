"""fa4.compile: what a Kernel shows, and the compile cache across
processes."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import fa4


def test_kernel_shows_its_code():
    kernel = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                         dtype="bf16", lse=True)
    assert kernel.cubin[:4] == b"\x7fELF"
    assert ".target sm_100a" in kernel.ptx
    assert "tcgen05.mma" in kernel.ptx
    attention = kernel.manifest["attention"]
    assert (attention["head_dim"], attention["q_heads"], attention["kv_heads"],
            attention["mask"], attention["dtype"], attention["lse"]) == \
        (64, 4, 2, "causal", "bf16", True)
    assert [m["tensor"] for m in kernel.manifest["tensor_maps"]] == ["q", "k", "v", "o"]
    # Within a process a variant is compiled once.
    assert fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                       dtype="bf16", lse=True) is kernel


def test_ir_at_each_level():
    kernel = fa4.compile(head_dim=64, q_heads=2, kv_heads=2)
    assert fa4.stages()[0] == "entry" and fa4.stages()[-2:] == ["llvm", "ptx"]
    assert "fa4.attention" in kernel.ir("entry")
    assert "strided<[?, ?, ?, 1], offset: ?>" in kernel.ir("bufferize")
    assert "fa4.online_softmax" in kernel.ir("tile")
    assert "gpu.module" in kernel.ir("nvvm")
    assert "define ptx_kernel" in kernel.ir("llvm")
    assert kernel.ir("ptx") == kernel.ptx
    with pytest.raises(fa4.CompileError, match="unknown stage 'level-z'.*entry bufferize tile"):
        kernel.ir("level-z")


COMPILE = textwrap.dedent("""
    import json, sys, time
    import fa4
    started = time.perf_counter()
    kernel = fa4.compile(head_dim=96, q_heads=6, kv_heads=3, mask="window",
                         window=(64, 8), softcap=30.0)
    print(json.dumps({"seconds": time.perf_counter() - started,
                      "from_cache": kernel.from_cache,
                      "cubin": kernel.cubin.hex()}))
""")


def test_second_process_hits_the_cache(tmp_path):
    env = dict(os.environ, FA4_CACHE_DIR=str(tmp_path / "cache"))
    runs = [json.loads(subprocess.run([sys.executable, "-c", COMPILE], env=env,
                                      check=True, capture_output=True,
                                      text=True).stdout)
            for _ in range(2)]
    assert [run["from_cache"] for run in runs] == [False, True]
    assert runs[0]["cubin"] == runs[1]["cubin"]
    print("compile: miss %.3f s, hit %.3f s"
          % (runs[0]["seconds"], runs[1]["seconds"]))
    # Without the cache, compiled again.
    assert not fa4.compile(head_dim=96, q_heads=6, kv_heads=3, mask="window",
                           window=(64, 8), softcap=30.0, cache=False).from_cache
