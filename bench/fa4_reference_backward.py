#!/usr/bin/env python3
"""Builds FlashAttention-4's Blackwell backward ahead of time, on a machine
without a GPU, for bench/sass_budget.py --backward to compare with fa4's.

FA4 (PyPI flash-attn-4 4.0.0b36, CuTe DSL) compiles its kernels when they
are first called. Called on torch fake CUDA tensors (FakeTensorMode) with
FLASH_ATTENTION_ARCH=sm_100a and CUTE_DSL_ARCH=sm_100a, its backward
interface compiles the three kernels (preprocess, main, dQ postprocess)
and skips the launches; CUTE_DSL_KEEP=ptx,cubin,ir and CUTE_DSL_DUMP_DIR
keep what it compiled. FA4 picks a 2-CTA main kernel at head dim 128;
FA_DISABLE_2CTA=1 (read when its package is imported, hence a process per
variant) gives the 1-CTA one, the comparison for fa4's 1-CTA kernel.

Set up once (a venv of its own; the torch wheel needs no GPU):

  python3 -m venv fa4ref && fa4ref/bin/pip install torch flash-attn-4==4.0.0b36 \\
      nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-core \\
      nvidia-cutlass-dsl-libs-cu12 quack-kernels apache-tvm-ffi torch-c-dlpack-ext

then

  fa4ref/bin/python bench/fa4_reference_backward.py OUT [hd128-none-1cta ...]
  python3 bench/sass_budget.py --backward OUT/hd128-none-1cta/main.cubin \\
      --head-dim 128 --roles dq=0-3,grad=4-11,mma=12,load=13

(The roles of FA4's 1-CTA backward as its warp assignment reads: four dQ
reduction warps, two warpgroups of softmax gradient, an MMA warp, a load
warp.) Each variant lands in OUT/<variant>/{preprocess,main,postprocess}.
{cubin,ptx}; building all six takes about a minute here.
"""

import glob
import os
import shutil
import subprocess
import sys

VARIANTS = {
    "hd128-none-1cta": (128, False, False), "hd128-causal-1cta": (128, True, False),
    "hd128-none-2cta": (128, False, True), "hd128-causal-2cta": (128, True, True),
    "hd64-none-1cta": (64, False, False), "hd64-causal-1cta": (64, True, False),
}


def dsl_packages():
    import nvidia_cutlass_dsl  # a namespace package: no __file__
    for base in nvidia_cutlass_dsl.__path__:
        for name in ("dsl_packages", "python_packages"):
            if os.path.isdir(os.path.join(base, name)):
                return os.path.join(base, name)
    sys.exit("fa4_reference_backward: nvidia_cutlass_dsl has no dsl_packages")


def build(out, variant):
    """In this process (the environment already set): compile and sort the files."""
    head_dim, causal, two_cta = VARIANTS[variant]
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    import cutlass.cute as cute
    from flash_attn.cute import interface
    from flash_attn.cute.flash_bwd_sm100 import FlashAttentionBackwardSm100
    from flash_attn.cute.flash_bwd_preprocess import FlashAttentionBackwardPreprocess
    from flash_attn.cute.flash_bwd_postprocess import FlashAttentionBackwardPostprocess

    dump = os.environ["CUTE_DSL_DUMP_DIR"]
    target = os.path.join(out, variant)
    os.makedirs(target, exist_ok=True)
    compile_ = cute.compile
    names = {FlashAttentionBackwardSm100: "main",
             FlashAttentionBackwardPreprocess: "preprocess",
             FlashAttentionBackwardPostprocess: "postprocess"}

    def keep(kernel, *args, **kwargs):
        before = set(os.listdir(dump))
        result = compile_(kernel, *args, **kwargs)
        name = names.get(type(kernel), type(kernel).__name__)
        if name == "main" and bool(getattr(kernel, "use_2cta_instrs", False)) != two_cta:
            sys.exit(f"{variant}: FA4 built a {'2' if not two_cta else '1'}-CTA main kernel")
        for f in sorted(set(os.listdir(dump)) - before):
            ext = f.rsplit(".", 1)[-1]
            if ext in ("cubin", "ptx"):
                shutil.move(os.path.join(dump, f), os.path.join(target, f"{name}.{ext}"))
        return result

    cute.compile = keep
    b, s, h = 1, 4096, 16
    with FakeTensorMode():
        q, k, v, o, do = (torch.empty(b, s, h, head_dim, dtype=torch.bfloat16, device="cuda")
                          for _ in range(5))
        lse = torch.empty(b, h, s, dtype=torch.float32, device="cuda")
        interface._flash_attn_bwd(q, k, v, o, do, lse, causal=causal, deterministic=False)
    print(f"{variant}: {sorted(os.listdir(target))}")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--one":
        build(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        print("variants:", ", ".join(VARIANTS))
        return
    if sys.argv[1].startswith("-"):
        sys.exit(f"fa4_reference_backward: unknown option {sys.argv[1]} (usage: OUT [variants])")
    out = os.path.abspath(sys.argv[1])
    chosen = sys.argv[2:] or list(VARIANTS)
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        sys.exit(f"fa4_reference_backward: unknown variant(s) {', '.join(unknown)} "
                 f"(known: {', '.join(VARIANTS)})")
    failed = []
    for variant in chosen:
        dump = os.path.join(out, ".dump", variant)
        shutil.rmtree(dump, ignore_errors=True)
        os.makedirs(dump)
        env = dict(os.environ, FLASH_ATTENTION_ARCH="sm_100a", CUTE_DSL_ARCH="sm_100a",
                   CUTE_DSL_KEEP="ptx,cubin,ir", CUTE_DSL_DUMP_DIR=dump,
                   FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED="0")
        env["PYTHONPATH"] = dsl_packages() + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("FA_DISABLE_2CTA", None)
        if not VARIANTS[variant][2] and VARIANTS[variant][0] >= 128:
            env["FA_DISABLE_2CTA"] = "1"
        if subprocess.run([sys.executable, os.path.abspath(__file__), "--one", out, variant],
                          env=env).returncode:
            failed.append(variant)
    shutil.rmtree(os.path.join(out, ".dump"), ignore_errors=True)
    if failed:
        sys.exit(f"fa4_reference_backward: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
