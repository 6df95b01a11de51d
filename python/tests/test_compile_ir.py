"""fa4.compile_ir: variants written as IR (regions reading extras) compiled
from their text and launched with their extras, on CPU tensors (the
emulator), against a float64 computation of the same mathematics."""

import math
import pathlib

import pytest
import torch

import fa4

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def alibi_reference(q, k, v, slopes):
    """examples/alibi.mlir: causal (bottom-right), score + slope[h]·(j - i)."""
    batch, seq_q, q_heads, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    group = q_heads // kv_heads
    qd = q.double().transpose(1, 2)
    kd = k.double().transpose(1, 2).repeat_interleave(group, dim=1)
    vd = v.double().transpose(1, 2).repeat_interleave(group, dim=1)
    scores = qd @ kd.transpose(-1, -2) / math.sqrt(head_dim)
    i = torch.arange(seq_q).view(-1, 1)
    j = torch.arange(seq_k).view(1, -1)
    scores = scores + slopes.double().view(1, -1, 1, 1) * (j - i)
    scores = scores.masked_fill(j > i + seq_k - seq_q, -math.inf)
    return (scores.softmax(-1) @ vd).transpose(1, 2)


def test_alibi_from_its_ir():
    kernel = fa4.compile_ir((EXAMPLES / "alibi.mlir").read_text())
    assert kernel.manifest["attention"]["score_mod"] is True
    assert kernel.manifest["extras"][0]["dtype"] == "f32"
    assert kernel.manifest["extras"][0]["shape"] == [16]
    assert "fa4.score_mod" in kernel.ir("tile")
    # The same text is compiled once per process.
    assert fa4.compile_ir((EXAMPLES / "alibi.mlir").read_text()) is kernel

    torch.manual_seed(3)
    batch, seq_q, seq_k = 1, 130, 200
    q = torch.randn(batch, seq_q, 16, 128, dtype=torch.float16)
    k = torch.randn(batch, seq_k, 4, 128, dtype=torch.float16)
    v = torch.randn(batch, seq_k, 4, 128, dtype=torch.float16)
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / 16) for h in range(16)])
    o = torch.empty_like(q)
    kernel(q, k, v, o, extras=[slopes])
    error = (o.double() - alibi_reference(q, k, v, slopes)).abs().max().item()
    assert error <= 1e-2
    # The slopes are read: without them the answer differs.
    kernel(q, k, v, o, extras=[torch.zeros(16)])
    assert (o.double() - alibi_reference(q, k, v, slopes)).abs().max().item() > 0.05


def test_extras_are_checked():
    kernel = fa4.compile_ir((EXAMPLES / "alibi.mlir").read_text())
    q = torch.randn(1, 128, 16, 128, dtype=torch.float16)
    k = torch.randn(1, 128, 4, 128, dtype=torch.float16)
    o = torch.empty_like(q)
    with pytest.raises(fa4.LaunchError, match="reads 1 extra tensors"):
        kernel(q, k, k.clone(), o)
    with pytest.raises(fa4.LaunchError, match="expected dtype f32, got f64"):
        kernel(q, k, k.clone(), o, extras=[torch.zeros(16, dtype=torch.float64)])
    with pytest.raises(fa4.LaunchError, match="dimension 0 is 8, expected 16"):
        kernel(q, k, k.clone(), o, extras=[torch.zeros(8)])
    # On CPU tensors as on the GPU: an extra inside O is refused.
    with pytest.raises(fa4.LaunchError, match="extra0: shares memory with an output"):
        kernel(q, k, k.clone(), o, extras=[o.view(torch.float32).flatten()[:16]])


def test_bad_ir_is_a_compile_error():
    with pytest.raises(fa4.CompileError, match="does not parse"):
        fa4.compile_ir("func.func @attention(")
    text = (EXAMPLES / "alibi.mlir").read_text().replace("memref<16xf32>", "memref<16xi32>")
    with pytest.raises(fa4.CompileError):
        fa4.compile_ir(text)
    with pytest.raises(TypeError, match="ir must be a str"):
        fa4.compile_ir(b"func.func")


def test_one_kernel_per_module():
    text = (EXAMPLES / "attention.mlir").read_text()
    with pytest.raises(fa4.CompileError, match="holds 2 attention kernels"):
        fa4.compile_ir(text + text.replace("@attention", "@attention2"))
    with pytest.raises(fa4.CompileError, match="holds no attention kernel"):
        fa4.compile_ir("func.func @f() { return }")


def test_a_refusal_before_parsing_keeps_its_reason():
    """The parse refusals of fa4's own (IR the MLIR parser would crash on)
    come back in the error, with their place, as the parser's do."""
    text = "func.func @f() attributes {x = array<index: 1>} { return }"
    with pytest.raises(fa4.CompileError,
                       match=r"entry\":1:32\): error: dense arrays of `index` are not accepted"):
        fa4.compile_ir(text)


def _on_a_small_stack(call):
    """Runs `call` on a Python thread with a 256 KiB stack (as an embedding
    application's worker may have) and returns what it raised."""
    import threading
    raised = []

    def run():
        try:
            call()
        except Exception as error:  # noqa: BLE001 - handed to the test
            raised.append(error)

    threading.stack_size(256 << 10)
    try:
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(0)
    return raised[0] if raised else None


def _deep_entry(kind, window):
    """An attention entry beside IR nested deep without brackets."""
    depth = 300000 if kind == "chain" else 50000
    location, extra = "", ""
    if kind == "chain":
        prefix = "#m = affine_map<(d0) -> (" + " + ".join(["d0"] * depth) + ")>\n"
    elif kind == "callsite":
        prefix = '#l0 = loc("deep":1:1)\n' + "".join(
            f'#l{i} = loc(callsite(#l{i - 1} at "deep":{i}:1))\n'
            for i in range(1, depth))
        location = f" loc(#l{depth - 1})"
    else:
        prefix = "!t0 = i32\n" + "".join(f"!t{i} = tuple<!t{i - 1}>\n"
                                         for i in range(1, depth))
        extra = f"func.func private @deep(!t{depth - 1})\n"
    return (prefix + extra +
            "func.func @attention(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>,\n"
            "    %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>) {\n"
            "  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<causal>" + window + "}\n"
            "      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>\n"
            "      -> memref<?x?x4x64xf16>" + location + "\n"
            "  return\n}\n")


@pytest.mark.parametrize("kind", ["chain", "callsite"])
def test_deep_ir_parses_on_a_stack_sized_to_it(kind):
    """IR nested deep without brackets (an affine `+` chain, a location
    through aliases) overflowed the caller's stack in the parser,
    verifier or diagnostics (the process died of SIGSEGV); compile_ir now
    parses and walks it on a thread with a stack sized to the text, here
    from a thread whose own stack is small."""
    text = _deep_entry(kind, ", window_left = -7 : i64")
    error = _on_a_small_stack(lambda: fa4.compile_ir(text, cache=False))
    assert isinstance(error, fa4.CompileError)
    assert "window_left must be -1 (unbounded) or in [0, 2^31), got -7" in str(error)


def test_a_deep_type_compiles():
    """A type nested 50 000 deep through aliases: the pipeline's passes walk
    it (they died of SIGSEGV on a worker thread's stack before)."""
    text = _deep_entry("type", "")
    kernels = []
    error = _on_a_small_stack(
        lambda: kernels.append(fa4.compile_ir(text, cache=False)))
    assert error is None
    assert "fa4.spec" in kernels[0].ir("tile")


def test_a_run_of_minus_signs_is_refused():
    text = ("#m = affine_map<(d0) -> (" + "-" * 10000 + "d0)>\n"
            "func.func @f() { return }\n")
    error = _on_a_small_stack(lambda: fa4.compile_ir(text, cache=False))
    assert isinstance(error, fa4.CompileError)
    assert "more than 16 minus signs in a row" in str(error)


@pytest.mark.parametrize("spelling", ["array< // a comment\n index: 1>",
                                      "array<!ix: 1>"])
def test_an_index_array_is_refused_however_spelled(spelling):
    text = ("!ix = index\nfunc.func @f() attributes {x = " + spelling +
            "} { return }\n")
    with pytest.raises(fa4.CompileError,
                       match="dense arrays of `index` are not accepted"):
        fa4.compile_ir(text)
