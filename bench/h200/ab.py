#!/usr/bin/env python3
"""Two or more builds of bench.py's kernels timed alternately on the H200.

A change to the kernels lands with its before/after figures; single runs of
bench.py move by a few per cent from one run to the next, so the builds are
timed in one process, on the same inputs, in alternating rounds. Each
LABEL=DIR names a directory of bench kernels (as scripts/hopper-kernels.sh
or a loop of fa4c calls writes them, libfa4rt.so beside them or --lib):

  python3 bench/h200/ab.py before=dist-a after=dist-b [--only REGEX] \\
      [--rounds 3] [--cudnn] [--out F.json]

Per configuration of bench/h200/variants.py's bench_configs (the ones
--only matches in bench.py's description) a child process, with a time
limit, loads every build's kernel, checks its O against a float32
reference on the first batch's first two heads (a mismatch fails the
case), then runs ROUNDS rounds, each timing every build once (and cuDNN
with --cudnn) with bench.py's timer (Triton's do_bench: median of the
repetitions, L2 flushed between them), the builds' order turned every
round. It prints each build's median over the rounds in TFLOP/s and its
ratio to the first build.
"""

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import variants  # noqa: E402

TIMEOUT_S = 240
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}


def one(spec):
    """Runs one configuration (in the child): its JSON on stdout."""
    import torch
    from bench import describe, flops, make_inputs, reference_slice, sdpa, timer
    from common import load_capi
    builds, config, rounds, cudnn, lib = spec
    try:
        import triton  # noqa: F401
    except Exception:
        triton = None
    measure = timer(triton)
    capi = load_capi()
    c = config
    q, k, v = make_inputs(c)
    want = reference_slice(q, k, v, c["causal"])
    timed, errors = {}, {}
    for label, directory in builds:
        library = lib or os.path.join(directory, "libfa4rt.so")
        kernel = capi.load_kernel(os.path.join(directory, c["kernel"] + ".cubin.json"),
                                  library=library)
        out = torch.full_like(q, math.nan)
        bound = kernel.bind(q, k, v, out)
        bound()
        torch.cuda.synchronize()
        got = out[0, :, :want.shape[1]].float()
        errors[label] = float((got - want).abs().max())
        timed[label] = bound
    if cudnn:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        out = torch.empty_like(q)
        _, sdpa_timed, _ = sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, c["causal"], out)

        def run_cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                sdpa_timed()
        timed["cuDNN"] = run_cudnn
    labels = list(timed)
    times = {label: [] for label in labels}
    for r in range(rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        for label in order:
            times[label].append(measure(timed[label])[0])
    result = {"configuration": describe(c), "flops": flops(c), "errors": errors,
              "ok": all(e <= TOLERANCE[c["dtype"]] for e in errors.values()),
              "ms": {}, "tflops": {}}
    for label in labels:
        median = sorted(times[label])[len(times[label]) // 2]
        result["ms"][label] = times[label]
        result["tflops"][label] = flops(c) / (median * 1e-3) / 1e12
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="*", help="LABEL=DIR, two or more")
    parser.add_argument("--only", help="configurations whose description matches")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cudnn", action="store_true", help="time cuDNN beside")
    parser.add_argument("--lib", help="libfa4rt.so (default: each DIR's)")
    parser.add_argument("--out", help="write the results here as JSON")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.one:
        print(json.dumps(one(json.loads(args.one))), flush=True)
        return 0
    from common import parse_builds
    builds = parse_builds(parser, args.builds)
    from bench import describe
    results, failed = [], 0
    first = builds[0][0]
    for c in variants.bench_configs():
        if args.only and not re.search(args.only, describe(c)):
            continue
        spec = [builds, c, args.rounds, args.cudnn, args.lib]
        try:
            done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)],
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
            lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
            result = (json.loads(lines[-1]) if lines else
                      {"ok": False, "error": (done.stderr or "no output")[-600:]})
        except subprocess.TimeoutExpired:
            result = {"ok": False, "error": f"timed out after {TIMEOUT_S} s"}
        result.setdefault("configuration", describe(c))
        results.append(result)
        failed += not result.get("ok")
        rates = result.get("tflops", {})
        cells = "  ".join(
            f"{label} {rate:.0f}" + (f" ({rate / rates[first]:.3f})"
                                     if label != first and rates.get(first) else "")
            for label, rate in rates.items())
        print(f"{result['configuration']:<36} "
              + (cells if rates else "FAILED " + result.get("error", ""))
              + ("" if result.get("ok") else f"  errors {result.get('errors')}"),
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"),
                       "builds": dict(builds), "rounds": args.rounds,
                       "results": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
