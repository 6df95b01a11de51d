#!/usr/bin/env python3
"""Builds FlashAttention-4's Blackwell backward (with --forward, its
Hopper forward; with --blackwell-forward, its Blackwell forward, 1-CTA and
2-CTA) ahead of time, on a machine without a GPU, for bench/sass_budget.py
to compare with fa4's.

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

--forward builds FlashAttention-4's Hopper forward instead (flash_fwd_sm90.py,
FLASH_ATTENTION_ARCH=sm_90a and CUTE_DSL_ARCH=sm_90a, FLASH_ATTENTION_NUM_SMS=132),
through its forward interface on fake [batch, seq, heads, head_dim] bf16
tensors, for bench/sass_budget.py --target sm_90a to compare with fa4's:

  fa4ref/bin/python bench/fa4_reference_backward.py --forward OUT [hd128-none ...]
  python3 bench/sass_budget.py --target sm_90a OUT/hd128-none/main.cubin \\
      --head-dim 128 --roles producer=0-3,consumer=4-11

Each variant lands in OUT/<variant>/main.{cubin,ptx} with config.json, the
choices FA4 made for it (tile_m x tile_n, K/V stages, intra-warpgroup
overlap, P from registers, MMA warpgroups, setmaxnreg per role, SMEM bytes).
FA4 picks 128 x 128 tiles (two MMA warpgroups: warps 4-11) at head dim 128,
192 x 128 at 64 (three: warps 4-15) and 192 x 144 at 96, non-causal.

--blackwell-forward builds FlashAttention-4's Blackwell forward
(flash_fwd_sm100.py, sm_100a, FLASH_ATTENTION_NUM_SMS=148) on fake bf16
tensors, 16 heads, head dim 128, non-causal: FA4 runs it as a 2-CTA kernel
(cta_group::2, clusters of two), and FA_DISABLE_2CTA=1 gives the 1-CTA one,
for the cost model of fa4's own pairs (docs/SassBudget.md, "CTA pairs"):

  fa4ref/bin/python bench/fa4_reference_backward.py --blackwell-forward OUT
  python3 bench/sass_budget.py OUT/hd128-none-2cta/main.cubin --head-dim 128

(Its warps are fa4's: softmax 0-7, correction 8-11, MMA 12, epilogue 13,
load 14, which sass_budget.py finds by what their loops hold.)
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

# The Blackwell forward's variants (--blackwell-forward): head dim, causal,
# 2-CTA. FA4 runs pairs only without a causal mask or a window.
BLACKWELL_FORWARD_VARIANTS = {
    "hd128-none-2cta": (128, False, True), "hd128-none-1cta": (128, False, False),
    "hd128-causal-1cta": (128, True, False),
}

# The Hopper forward's variants (--forward): head dim, causal.
FORWARD_VARIANTS = {
    "hd128-none": (128, False), "hd128-causal": (128, True),
    "hd64-none": (64, False), "hd64-causal": (64, True), "hd96-none": (96, False),
}


def dsl_packages():
    try:
        import nvidia_cutlass_dsl  # a namespace package: no __file__
    except ImportError:
        sys.exit("fa4_reference_backward: nvidia_cutlass_dsl does not import: run this "
                 "with the Python of a venv holding flash-attn-4 (see --help)")
    for base in nvidia_cutlass_dsl.__path__:
        for name in ("dsl_packages", "python_packages"):
            if os.path.isdir(os.path.join(base, name)):
                return os.path.join(base, name)
    sys.exit("fa4_reference_backward: nvidia_cutlass_dsl has no dsl_packages")


def keep_compiled(cute, dump, target, name_of, on_main):
    """Wraps cute.compile so that each kernel's cubin and PTX, dumped into
    `dump`, move to `target` as NAME.cubin/.ptx (`name_of(kernel)`);
    `on_main(kernel, compiled)` sees the kernel named "main"."""
    compile_ = cute.compile

    def keep(kernel, *args, **kwargs):
        before = set(os.listdir(dump))
        result = compile_(kernel, *args, **kwargs)
        name = name_of(kernel)
        if name == "main":
            on_main(kernel, result)
        for f in sorted(set(os.listdir(dump)) - before):
            ext = f.rsplit(".", 1)[-1]
            if ext in ("cubin", "ptx"):
                shutil.move(os.path.join(dump, f), os.path.join(target, f"{name}.{ext}"))
        return result

    cute.compile = keep


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
    names = {FlashAttentionBackwardSm100: "main",
             FlashAttentionBackwardPreprocess: "preprocess",
             FlashAttentionBackwardPostprocess: "postprocess"}

    def main_built(kernel, _compiled):
        if bool(getattr(kernel, "use_2cta_instrs", False)) != two_cta:
            sys.exit(f"{variant}: FA4 built a {'2' if not two_cta else '1'}-CTA main kernel")

    keep_compiled(cute, dump, target,
                  lambda kernel: names.get(type(kernel), type(kernel).__name__),
                  main_built)
    b, s, h = 1, 4096, 16
    with FakeTensorMode():
        q, k, v, o, do = (torch.empty(b, s, h, head_dim, dtype=torch.bfloat16, device="cuda")
                          for _ in range(5))
        lse = torch.empty(b, h, s, dtype=torch.float32, device="cuda")
        interface._flash_attn_bwd(q, k, v, o, do, lse, causal=causal, deterministic=False)
    print(f"{variant}: {sorted(os.listdir(target))}")


def _forward_smem_bytes(config, compiled):
    """The dynamic shared memory of FA4's Hopper forward: its SharedStorage
    (flash_fwd_sm90.py) read as the sizes it holds: the Q, K and V pipelines'
    mbarriers, then Q, the K and V stages and, when P goes through shared
    memory, P, each 1024-byte aligned. (Its struct can only be sized inside
    a jit; the figure is checked against the launch's constant in the host
    code the compilation produced, and marked when it is not found there.)"""
    try:
        m, n, d, dv = (config[k] for k in ("tile_m", "tile_n", "tile_hdim", "tile_hdimv"))
        stages = config["num_stages"]
    except KeyError:
        return None
    align = lambda x: -(-x // 1024) * 1024
    size = align(8 * (2 + 4 * stages)) + align(2 * m * d) + align(2 * stages * n * d) + \
        align(2 * stages * n * dv) + (0 if config.get("mma_pv_is_rs") else align(2 * m * n))
    try:
        found = f"constant({size} : i64)" in str(compiled.ir_module)
    except Exception:
        found = False
    return size if found else f"{size} (not found in the host code)"


def build_forward(out, variant):
    """In this process (the environment already set): compile FA4's Hopper
    forward, keep its files and record the configuration it chose."""
    head_dim, causal = FORWARD_VARIANTS[variant]
    import json
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    import cutlass.cute as cute
    from flash_attn.cute import interface
    from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90

    dump = os.environ["CUTE_DSL_DUMP_DIR"]
    target = os.path.join(out, variant)
    os.makedirs(target, exist_ok=True)
    config = {}

    def main_config(kernel, result):
        # What __call__ decided, read back from the kernel object.
        for key in ("tile_m", "tile_n", "tile_hdim", "tile_hdimv", "num_stages",
                    "intra_wg_overlap", "mma_pv_is_rs", "Q_in_regs", "num_wg_mma",
                    "num_threads", "num_mma_regs", "num_producer_regs",
                    "use_scheduler_barrier", "use_tma_Q", "use_tma_O", "use_tma_KV",
                    "rescale_O_before_gemm"):
            value = getattr(kernel, key, None)
            if isinstance(value, (bool, int, float, str)):
                config[key] = value
        config["smem_bytes"] = _forward_smem_bytes(config, result)

    keep_compiled(cute, dump, target,
                  lambda kernel: ("main" if isinstance(kernel, FlashAttentionForwardSm90)
                                  else type(kernel).__name__),
                  main_config)
    b, s, h = 1, 4096, 16
    with FakeTensorMode():
        q, k, v = (torch.empty(b, s, h, head_dim, dtype=torch.bfloat16, device="cuda")
                   for _ in range(3))
        interface._flash_attn_fwd(q, k, v, causal=causal)
    if not config:
        sys.exit(f"{variant}: FA4 compiled no FlashAttentionForwardSm90 kernel")
    with open(os.path.join(target, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    print(f"{variant}: {sorted(os.listdir(target))} {config}")


def build_blackwell_forward(out, variant):
    """In this process (the environment already set): compile FA4's
    Blackwell forward and keep its files, checking that it built the 1-CTA
    or 2-CTA kernel asked for."""
    head_dim, causal, two_cta = BLACKWELL_FORWARD_VARIANTS[variant]
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    import cutlass.cute as cute
    from flash_attn.cute import interface
    from flash_attn.cute.flash_fwd_sm100 import FlashAttentionForwardSm100

    dump = os.environ["CUTE_DSL_DUMP_DIR"]
    target = os.path.join(out, variant)
    os.makedirs(target, exist_ok=True)
    built = []
    keep_compiled(
        cute, dump, target,
        lambda kernel: ("main" if isinstance(kernel, FlashAttentionForwardSm100)
                        else type(kernel).__name__),
        lambda kernel, _compiled: built.append(bool(getattr(kernel, "use_2cta_instrs",
                                                            False))))
    # Its persistent scheduler sizes the grid from the device's SM count,
    # which needs a driver: the B200's, as FLASH_ATTENTION_NUM_SMS says.
    import cutlass.utils

    class B200:
        def __init__(self, device_id=0):
            pass

        def get_device_multiprocessor_count(self):
            return int(os.environ["FLASH_ATTENTION_NUM_SMS"])

    cutlass.utils.HardwareInfo = B200
    b, s, h = 1, 4096, 16
    with FakeTensorMode():
        q, k, v = (torch.empty(b, s, h, head_dim, dtype=torch.bfloat16, device="cuda")
                   for _ in range(3))
        interface._flash_attn_fwd(q, k, v, causal=causal)
    if built != [two_cta]:
        sys.exit(f"{variant}: FA4 built {built} (2-CTA main kernels), not [{two_cta}]")
    print(f"{variant}: {sorted(os.listdir(target))}")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--one":
        builder = (build_forward if sys.argv[3] in FORWARD_VARIANTS else
                   build_blackwell_forward if sys.argv[3] in BLACKWELL_FORWARD_VARIANTS
                   else build)
        builder(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) < 2 or any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        print("variants:", ", ".join(VARIANTS))
        print("--forward variants:", ", ".join(FORWARD_VARIANTS))
        print("--blackwell-forward variants:", ", ".join(BLACKWELL_FORWARD_VARIANTS))
        return
    forward = sys.argv[1] == "--forward"
    blackwell_forward = sys.argv[1] == "--blackwell-forward"
    args = sys.argv[2:] if forward or blackwell_forward else sys.argv[1:]
    known = (FORWARD_VARIANTS if forward else
             BLACKWELL_FORWARD_VARIANTS if blackwell_forward else VARIANTS)
    if not args:
        sys.exit("fa4_reference_backward: OUT, the output directory, is missing "
                 "(usage: [--forward|--blackwell-forward] OUT [variants])")
    if args[0].startswith("-"):
        sys.exit(f"fa4_reference_backward: unknown option {args[0]} "
                 "(usage: [--forward|--blackwell-forward] OUT [variants])")
    out = os.path.abspath(args[0])
    packages = dsl_packages()  # before any output directory is made
    chosen = args[1:] or list(known)
    unknown = [v for v in chosen if v not in known]
    if unknown:
        sys.exit(f"fa4_reference_backward: unknown variant(s) {', '.join(unknown)} "
                 f"(known: {', '.join(known)})")
    arch = "sm_90a" if forward else "sm_100a"
    failed = []
    for variant in chosen:
        dump = os.path.join(out, ".dump", variant)
        shutil.rmtree(dump, ignore_errors=True)
        os.makedirs(dump)
        env = dict(os.environ, FLASH_ATTENTION_ARCH=arch, CUTE_DSL_ARCH=arch,
                   CUTE_DSL_KEEP="ptx,cubin,ir", CUTE_DSL_DUMP_DIR=dump,
                   FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED="0")
        env["PYTHONPATH"] = packages + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("FA_DISABLE_2CTA", None)
        if forward:
            # The H100/H200's SMs (FA4 asks when cross-compiling).
            env.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
        elif blackwell_forward:
            env.setdefault("FLASH_ATTENTION_NUM_SMS", "148")
            if not BLACKWELL_FORWARD_VARIANTS[variant][2]:
                env["FA_DISABLE_2CTA"] = "1"
        elif not VARIANTS[variant][2] and VARIANTS[variant][0] >= 128:
            env["FA_DISABLE_2CTA"] = "1"
        if subprocess.run([sys.executable, os.path.abspath(__file__), "--one", out, variant],
                          env=env).returncode:
            failed.append(variant)
    shutil.rmtree(os.path.join(out, ".dump"), ignore_errors=True)
    if failed:
        sys.exit(f"fa4_reference_backward: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
