"""Targets: fa4.compile for sm_90a (Hopper) as for sm_100a, and fa4.attention
choosing the kernel's target from the GPU the tensors are on."""

import pytest
import torch

import fa4
from fa4 import _torch


def test_hopper_kernel():
    kernel = fa4.compile(head_dim=128, q_heads=8, kv_heads=2, mask="causal",
                         dtype="bf16", lse=True, target="sm_90a")
    manifest = kernel.manifest
    assert manifest["target"] == "sm_90a"
    assert manifest["block"] == [384, 1, 1]
    # A dense causal kernel at head dim 128 gets a CTA per task (the
    # default grid, "auto"); a non-causal one the H200's 132 persistent CTAs.
    assert manifest["grid"]["policy"] == "per_task"
    assert manifest["grid"]["sm_count"] == 2**31 - 1
    full = fa4.compile(head_dim=128, q_heads=8, kv_heads=2, mask="none",
                       dtype="bf16", target="sm_90a")
    assert full.manifest["grid"]["policy"] == "persistent"
    assert full.manifest["grid"]["sm_count"] == 132
    assert manifest["tmem_columns"] == 0
    assert [r["name"] for r in manifest["roles"]] == ["producer", "consumer0",
                                                      "consumer1"]
    assert manifest["ptxas"]["spill_store_bytes"] == 0
    assert ".target sm_90a" in kernel.ptx
    assert "wgmma.mma_async" in kernel.ptx and "tcgen05" not in kernel.ptx
    # O leaves in 64-row halves (GQA-packed: 4 heads by 16 positions).
    o_map = [m for m in manifest["tensor_maps"] if m["tensor"] == "o"][0]
    assert o_map["box"] == [64, 4, 16, 1]


def test_hopper_kernel_runs_in_the_emulator():
    # CPU tensors launch an sm_90a kernel in fa4-emu as an sm_100a one.
    kernel = fa4.compile(head_dim=64, q_heads=2, kv_heads=2, mask="causal",
                         target="sm_90a")
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 70, 2, 64, generator=generator).to(torch.float16)
               for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) / 8.0
    causal = torch.ones(70, 70, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    want = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v.float())
    assert (o.float() - want).abs().max().item() < 1e-2


def _check_causal_gqa(compiled, q, k, v, tolerance):
    """Launches `compiled` on q, k, v (K/V heads shared by pairs of query
    heads, causal, head dim 64) and checks O and the LSE against torch."""
    seq, heads = q.shape[1], q.shape[2]
    o = torch.full_like(q, float("nan"))
    lse = torch.full((1, heads, seq), float("nan"))
    compiled(q, k, v, o, lse)
    kk, vv = (t.repeat_interleave(2, dim=2).float() for t in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kk) / 8.0
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    want = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), vv)
    assert (o.float() - want).abs().max().item() < tolerance
    assert (lse - torch.logsumexp(scores, -1)).abs().max().item() < 1e-3


def test_hopper_software_exp2():
    """exp2_emulation_fraction on sm_90a: a share of the softmax's
    exponentials computed by the scalar software exp2 (fma.rm.ftz.f32 for
    the floor), a kernel of its own in the compile cache, and right in the
    emulator (O and the LSE, rows past the causal diagonal masked)."""
    args = dict(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                dtype="fp16", lse=True, target="sm_90a")
    mufu = fa4.compile(**args, exp2_emulation_fraction=0.0)
    quarter = fa4.compile(**args, exp2_emulation_fraction=0.25)
    assert "fma.rm.ftz.f32 " not in mufu.ptx
    assert "fma.rm.ftz.f32 " in quarter.ptx and "f32x2" not in quarter.ptx
    assert quarter.manifest["ptxas"]["spill_store_bytes"] == 0
    # sm_90a's own share at head dim 64 is 1/8: the default is that kernel,
    # never the share-0 entry of the cache (nor the other way round).
    default = fa4.compile(**args)
    eighth = fa4.compile(**args, exp2_emulation_fraction=0.125)
    assert default.ptx == eighth.ptx != mufu.ptx
    assert "fma.rm.ftz.f32 " not in fa4.compile(
        **dict(args, head_dim=96)).ptx
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(1, 150, 4, 64, generator=generator).to(torch.float16)
    k, v = (torch.randn(1, 150, 2, 64, generator=generator).to(torch.float16)
            for _ in range(2))
    _check_causal_gqa(quarter, q, k, v, 1e-2)


class _FakeCuda:
    """What _torch._target reads of torch.cuda, for a GPU this machine has
    not got."""

    def __init__(self, capability, sms, name):
        self.capability, self.sms, self.name = capability, sms, name

    def install(self, monkeypatch):
        # _target remembers each device's answer (a GPU does not change
        # under a process); this one is new at index 0.
        monkeypatch.setattr(_torch, "_device_targets", {})
        monkeypatch.setattr(torch.cuda, "get_device_capability",
                            lambda device=None: self.capability)
        monkeypatch.setattr(torch.cuda, "get_device_name",
                            lambda device=None: self.name)

        class Properties:
            multi_processor_count = self.sms
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda device=None: Properties())


@pytest.mark.parametrize("capability, sms, target", [
    ((9, 0), 132, "sm_90a"), ((10, 0), 148, "sm_100a"),
    ((10, 3), 148, "sm_103a")])
def test_target_follows_the_gpu(monkeypatch, capability, sms, target):
    _FakeCuda(capability, sms, "a GPU").install(monkeypatch)
    assert _torch._target(torch.device("cuda", 0)) == (target, sms)


def test_cpu_tensors_take_the_emulators_target():
    assert _torch._target(torch.device("cpu")) == ("sm_100a", 0)


def test_other_gpus_are_refused(monkeypatch):
    _FakeCuda((8, 0), 108, "NVIDIA A100").install(monkeypatch)
    with pytest.raises(fa4.LaunchError, match=r"NVIDIA A100 is sm_80; fa4 "
                       r"compiles for sm_100a \(Blackwell, compute capability "
                       r"10\.0\), sm_103a \(Blackwell, compute capability "
                       r"10\.3\), sm_90a \(Hopper, compute capability 9\.0\)"):
        _torch._target(torch.device("cuda", 0))


def test_b300_kernel_runs_in_the_emulator():
    """sm_103a: the FA4 schedule with every exponential on MUFU by default
    (the polynomial only when asked for), its PTX retargeted from the
    sm_100a code MLIR generates, run in fa4-emu."""
    assert "sm_103a" in [chip["name"] for chip in fa4._CHIPS]
    kernel = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                         dtype="bf16", lse=True, target="sm_103a")
    assert kernel.manifest["target"] == "sm_103a"
    assert kernel.manifest["grid"]["sm_count"] == 148
    assert ".target sm_103a" in kernel.ptx and "tcgen05.mma" in kernel.ptx
    assert "fma.rm.ftz.f32x2" not in kernel.ptx
    asked = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                        dtype="bf16", lse=True, target="sm_103a",
                        exp2_emulation_fraction=0.125)
    assert "fma.rm.ftz.f32x2" in asked.ptx
    default = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                          dtype="bf16", lse=True)
    assert "fma.rm.ftz.f32x2" in default.ptx
    # Naming sm_100a's own share is the default's compilation: the compile
    # cache holds it under one key.
    named = fa4.compile(head_dim=64, q_heads=4, kv_heads=2, mask="causal",
                        dtype="bf16", lse=True, exp2_emulation_fraction=0.125)
    assert named.from_cache and named.ptx == default.ptx
    # A dense head-dim-128 forward runs as CTA pairs with a share of its own
    # (24 of 128, FA4's 2-CTA one): there, naming one CTA's 16 is another
    # kernel, which the cache must not answer with the default's.
    pair = fa4.compile(head_dim=128, q_heads=2, kv_heads=2, dtype="bf16")
    pair16 = fa4.compile(head_dim=128, q_heads=2, kv_heads=2, dtype="bf16",
                         exp2_emulation_fraction=0.125)
    assert pair.manifest["grid"].get("cluster") == 2
    assert pair.ptx.count("fma.rm.ftz.f32x2") == 24
    assert pair16.ptx.count("fma.rm.ftz.f32x2") == 16
    with pytest.raises(ValueError, match="exp2_emulation_fraction"):
        fa4.compile(head_dim=64, q_heads=4, kv_heads=2, target="sm_103a",
                    exp2_emulation_fraction=-1)
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 90, 4, 64, generator=generator).to(torch.bfloat16)
    k, v = (torch.randn(1, 90, 2, 64, generator=generator).to(torch.bfloat16)
            for _ in range(2))
    for compiled in (kernel, asked):
        _check_causal_gqa(compiled, q, k, v, 2e-2)


def test_cta_pairs():
    """Blackwell's 2-CTA forward from Python: two_cta picks it (auto: dense
    hd128 without a causal mask), the manifest says the cluster, and the
    pair kernel runs in the emulator (its clusters launched two CTAs each)."""
    auto = fa4.compile(head_dim=128, q_heads=4, kv_heads=2, dtype="bf16",
                       target="sm_100a")
    assert auto.manifest["grid"]["cluster"] == 2
    assert ".reqnctapercluster 2" in auto.ptx
    off = fa4.compile(head_dim=128, q_heads=4, kv_heads=2, dtype="bf16",
                      target="sm_100a", two_cta="off")
    assert "cluster" not in off.manifest["grid"]
    causal = fa4.compile(head_dim=128, q_heads=4, kv_heads=2, mask="causal",
                         dtype="bf16", target="sm_100a")
    assert "cluster" not in causal.manifest["grid"]
    paired = fa4.compile(head_dim=128, q_heads=4, kv_heads=2, mask="causal",
                         dtype="bf16", target="sm_100a", two_cta="on")
    assert paired.manifest["grid"]["cluster"] == 2
    with pytest.raises(fa4.CompileError, match="cannot run as CTA pairs"):
        fa4.compile(head_dim=64, q_heads=4, kv_heads=2, target="sm_100a",
                    two_cta="on")
    with pytest.raises(fa4.CompileError, match="two-cta=on"):
        fa4.compile(head_dim=128, q_heads=4, kv_heads=2, target="sm_90a",
                    two_cta="on")
    with pytest.raises(ValueError, match="two_cta must be auto, on or off"):
        fa4.compile(head_dim=128, q_heads=4, kv_heads=2, two_cta="yes")
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(1, 300, 4, 128, generator=generator).to(torch.bfloat16)
    k, v = (torch.randn(1, 170, 2, 128, generator=generator).to(torch.bfloat16)
            for _ in range(2))
    for compiled, mask in ((auto, False), (paired, True)):
        o = torch.full_like(q, float("nan"))
        compiled(q, k, v, o)
        kk, vv = (t.repeat_interleave(2, dim=2).float() for t in (k, v))
        scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kk) / 128 ** 0.5
        if mask:
            # Bottom-right aligned: query i sees keys up to i + 170 - 300.
            visible = torch.ones(300, 170, dtype=torch.bool).tril(170 - 300)
            scores = scores.masked_fill(~visible, float("-inf"))
        want = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1).nan_to_num(), vv)
        assert (o.float() - want).abs().max().item() < 2e-2
