#!/usr/bin/env python3
"""Kernels with score_mod / mask_mod regions on the GPU, judged here.

The GPU machine has no fa4-sim and torch cannot run a region, so the check
is split: on the GPU, `run` launches each kernel of a directory (compiled
here from examples/*.mlir) on inputs it draws, and writes the inputs and the
O it got as fa4-sim reads them (float32, row-major in each argument's
declared shape, `argN.bin` for the entry function's argument N); here,
`judge` runs fa4-sim on the entry IR with those inputs and that O
(`--inputs DIR --expect DIR/o.bin`): the kernel's O against fa4-sim's
level-A run of the same regions and both against the float64 reference.

  scripts: for f in alibi document ...; do
             fa4c examples/$f.mlir --target sm_90a -o dist-mods/$f.cubin; done
           cp build/lib/libfa4rt.so dist-mods/
  GPU:     python3 bench/h200/mods.py run dist-mods --out OUT
           (then `tar czf $OUT/mods.tgz -C OUT .`: the per-case folders are
           deeper than the device's transfer brings back)
  here:    python3 bench/h200/mods.py judge OUT --fa4-sim build/bin/fa4-sim

With `run --outputs-only` the GPU writes O alone (o.raw16, in its own
16-bit type; a few MB where the inputs would be a hundred), and `judge
--kernels dist-mods` draws the inputs again here from the run's seed (on
the CPU, as the GPU machine drew them) before fa4-sim reads them.

Each launch runs in a child process with a timeout (a hang is a failed case,
not a lost session). The draws follow fa4-sim's: Q, K, V standard normal,
float extras uniform in [-1, 1), integer extras non-decreasing runs along
the last dimension (a few documents per sequence); an extra's dynamic
dimension takes the largest of batch, seq_q, seq_k and q_heads. A block
mask (the manifest's `block_mask`) is the table right for every mask_mod:
every KV block visited, none whole; its skipping is proven in fa4-emu, the
table then computed from the mask_mod.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time

SHAPES = ["1x333x517", "2x129x1100", "1x700x700"]
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def parse_shape(text):
    batch, seq_q, seq_k = (int(x) for x in text.split("x"))
    return batch, seq_q, seq_k


def draw(manifest, shape, seed):
    """The inputs of one case, drawn on the CPU from `seed` (the same on
    any machine): q, k, v and the extras, and the LSE's presence."""
    import torch
    attention = manifest["attention"]
    batch, seq_q, seq_k = parse_shape(shape)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, DTYPES[attention["dtype"]])
    hq, hkv = attention["q_heads"], attention["kv_heads"]
    d, dv = attention["head_dim"], attention["v_head_dim"]

    def normal(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    q, k, v = normal(batch, seq_q, hq, d), normal(batch, seq_k, hkv, d), \
        normal(batch, seq_k, hkv, dv)
    dynamic = max(batch, seq_q, seq_k, hq)
    extras = []
    block_mask = attention.get("block_mask")
    for index, extra in enumerate(manifest.get("extras", [])):
        sizes = [dynamic if s < 0 else s for s in extra["shape"]]
        if block_mask is not None and index == block_mask:
            # Whoever launches computes the table from the mask_mod, which
            # only the IR knows; the one table right for every mask_mod
            # visits every KV block and holds none whole (begin 0,
            # full_begin = full_end = 0, end the KV block count). fa4-sim
            # reads the same table, so the judge compares like with like.
            sizes = [batch if extra["shape"][0] < 0 else extra["shape"][0],
                     hq if extra["shape"][1] < 0 else extra["shape"][1],
                     -(-seq_q // 128), 4]
            table = torch.zeros(*sizes, dtype=torch.int64)
            table[..., 3] = -(-seq_k // 128)
            extras.append(table.to(torch.int32 if extra["dtype"] == "i32"
                                   else torch.int64))
            continue
        if extra["dtype"] in ("i32", "i64"):
            steps = (torch.rand(*sizes, generator=generator) < 0.01).to(torch.int64)
            values = torch.cumsum(steps, dim=-1)
            extras.append(values.to(torch.int32 if extra["dtype"] == "i32"
                                    else torch.int64))
        else:
            extras.append((torch.rand(*sizes, generator=generator) * 2 - 1)
                          .to(getattr(torch, {"f32": "float32", "f16": "float16",
                                              "bf16": "bfloat16"}[extra["dtype"]])))
    return q, k, v, extras


def write_inputs(manifest, q, k, v, extras, out_dir):
    """The entry's arguments as fa4-sim reads them: Q, K, V, O, (the LSE),
    the extras, argN.bin in float32."""
    import torch
    first_extra = 5 if manifest["attention"].get("lse") else 4
    files = {0: q, 1: k, 2: v}
    for i, e in enumerate(extras):
        files[first_extra + i] = e
    os.makedirs(out_dir, exist_ok=True)
    for n, tensor in files.items():
        tensor.to(torch.float32).contiguous().numpy().tofile(
            os.path.join(out_dir, f"arg{n}.bin"))


def case(manifest_path, library, shape, out_dir, seed, outputs_only=False):
    """One launch (in a child process): draw, launch, write the files (with
    `outputs_only`, O alone, in its own 16-bit type: o.raw16, which judge
    takes with inputs it draws again from the seed)."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import load_capi

    capi = load_capi()
    kernel = capi.load_kernel(manifest_path, library=library)
    attention = kernel.manifest["attention"]
    batch, seq_q, _ = parse_shape(shape)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    q, k, v, extras = draw(kernel.manifest, shape, seed)
    hq, dv = attention["q_heads"], attention["v_head_dim"]
    o = torch.empty(batch, seq_q, hq, dv, dtype=q.dtype, device=device)
    lse = (torch.empty(batch, hq, seq_q, dtype=torch.float32, device=device)
           if attention.get("lse") else None)
    kernel(q.to(device), k.to(device), v.to(device), o, lse,
           extras=[e.to(device) for e in extras])
    if device.type == "cuda":
        torch.cuda.synchronize()
    os.makedirs(out_dir, exist_ok=True)
    if outputs_only:
        o.cpu().contiguous().view(torch.int16).numpy().tofile(
            os.path.join(out_dir, "o.raw16"))
    else:
        write_inputs(kernel.manifest, q, k, v, extras, out_dir)
        o.to(torch.float32).cpu().contiguous().numpy().tofile(
            os.path.join(out_dir, "o.bin"))
    finite = bool(torch.isfinite(o.float()).all())
    return {"finite": finite}


def run(args):
    results = []
    manifests = sorted(glob.glob(os.path.join(args.kernels, "*.cubin.json")))
    library = os.path.join(args.kernels, "libfa4rt.so")
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    for manifest in manifests:
        name = os.path.basename(manifest)[:-len(".cubin.json")]
        for shape in args.shapes.split(","):
            out_dir = os.path.join(args.out, name, shape)
            command = [sys.executable, os.path.abspath(__file__), "case",
                       manifest, library, shape, out_dir, str(args.seed),
                       "1" if args.outputs_only else "0"]
            result = {"kernel": name, "shape": shape}
            try:
                done = subprocess.run(command, capture_output=True, text=True,
                                      timeout=args.timeout)
                result["launched"] = done.returncode == 0
                if done.returncode == 0:
                    result.update(json.loads(done.stdout.strip().splitlines()[-1]))
                else:
                    result["error"] = (done.stderr or done.stdout)[-800:]
            except subprocess.TimeoutExpired:
                result.update(launched=False, timed_out=True)
            print(json.dumps(result), flush=True)
            results.append(result)
    with open(os.path.join(args.out, "run.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S"),
                   "seconds": round(time.time() - started, 1),
                   "seed": args.seed, "outputs_only": args.outputs_only,
                   "results": results}, f, indent=1)
    return 0 if all(r.get("launched") for r in results) else 1


def restore_inputs(directory, manifest_path, shape, seed):
    """A case run with --outputs-only: its inputs drawn again here from the
    seed and O widened to float32, as a full case writes them."""
    import torch
    with open(manifest_path) as f:
        manifest = json.load(f)
    q, k, v, extras = draw(manifest, shape, seed)
    write_inputs(manifest, q, k, v, extras, directory)
    raw = torch.from_file(os.path.join(directory, "o.raw16"), shared=False,
                          size=os.path.getsize(os.path.join(directory,
                                                            "o.raw16")) // 2,
                          dtype=torch.int16)
    raw.view(q.dtype).to(torch.float32).numpy().tofile(
        os.path.join(directory, "o.bin"))


def judge(args):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    verdicts = []
    seed = args.seed
    if os.path.exists(os.path.join(args.out, "run.json")):
        with open(os.path.join(args.out, "run.json")) as f:
            seed = json.load(f).get("seed", seed)
    for name in sorted(os.listdir(args.out)):
        entry = os.path.join(root, "examples", name + ".mlir")
        if not os.path.isdir(os.path.join(args.out, name)):
            continue
        for shape in sorted(os.listdir(os.path.join(args.out, name))):
            directory = os.path.join(args.out, name, shape)
            verdict = {"kernel": name, "shape": shape}
            if os.path.exists(os.path.join(directory, "o.raw16")) and \
                    not os.path.exists(os.path.join(directory, "o.bin")):
                restore_inputs(directory, os.path.join(
                    args.kernels, name + ".cubin.json"), shape, seed)
            if not os.path.exists(os.path.join(directory, "o.bin")):
                verdict.update(ok=False, why="no O from the GPU")
            else:
                batch, seq_q, seq_k = parse_shape(shape)
                done = subprocess.run(
                    [args.fa4_sim, entry, "--inputs", directory, "--expect",
                     os.path.join(directory, "o.bin"), "--batch", str(batch),
                     "--seq-q", str(seq_q), "--seq-k", str(seq_k)],
                    capture_output=True, text=True)
                try:
                    report = json.loads(done.stdout)
                    verdict.update(ok=bool(report.get("ok")),
                                   expect_max_abs_err=report.get("expect_max_abs_err"),
                                   max_abs_err=report.get("max_abs_err"))
                except json.JSONDecodeError:
                    verdict.update(ok=False, why=(done.stderr or done.stdout)[-400:])
            print(json.dumps(verdict), flush=True)
            verdicts.append(verdict)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(verdicts, f, indent=1)
    passed = sum(v["ok"] for v in verdicts)
    print(f"{passed} of {len(verdicts)} within tolerance")
    return 0 if verdicts and passed == len(verdicts) else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "case":
        print(json.dumps(case(*sys.argv[2:6], int(sys.argv[6]),
                              sys.argv[7:8] == ["1"])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="on the GPU: launch every kernel of a directory")
    p.add_argument("kernels")
    p.add_argument("--out", required=True)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--outputs-only", action="store_true",
                   help="write O alone (o.raw16, its 16-bit type): judge "
                        "draws the inputs again from the seed (what the "
                        "device's transfer limits leave room for)")
    p = sub.add_parser("judge", help="here: fa4-sim on what the GPU wrote")
    p.add_argument("out")
    p.add_argument("--fa4-sim", default="build/bin/fa4-sim")
    p.add_argument("--json", default="")
    p.add_argument("--kernels", default="dist-mods",
                   help="the kernels' directory (their manifests): the "
                        "inputs of --outputs-only cases are drawn from them")
    p.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    return run(args) if args.command == "run" else judge(args)


if __name__ == "__main__":
    sys.exit(main())
