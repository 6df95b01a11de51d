#!/usr/bin/env python3
"""Evaluate one function of a linalg-on-tensors module on the CPU.

  python3 scripts/evaluate-linalg.py FILE.mlir --func NAME --out-dir DIR
      [--seed N] [--mlir-opt PATH] [--mlir-runner PATH] [--lib-dir PATH]
      [--keep-temps]

The function's arguments must be statically shaped ranked tensors (or
scalars) of f16, bf16, f32, i32 or i64, and it must return one statically
shaped tensor (or scalar) of those types.  The script

  * draws deterministic pseudo-random inputs from the seed: floats are
    multiples of 1/32 in [-2, 2), exact in f16, bf16 and f32 alike (so one
    draw means the same thing in every float type); integers are small
    non-negative runs of equal values (0,0,0,1,1,2,...) like document ids;
  * writes argument N to DIR/argN.bin (little-endian float32, row-major in
    the declared shape; integers are written as float32 too);
  * appends a @__evaluate_linalg_main to the module that materializes every argument as an
    `arith.constant dense<"0x...">`, calls the function, widens the result
    to f32, bit-casts it to i32 and prints it with printMemrefI32 (the bits
    come back exactly; printMemrefF32 would round to six digits);
  * lowers the module with upstream mlir-opt passes only (linalg.softmax is
    first decomposed by a transform-dialect schedule preloaded from a
    separate file), runs it with mlir-runner, and writes the result to
    DIR/result0.bin (little-endian float32, row-major).

It prints one summary line; on failure it prints the failing tool's stderr
and exits non-zero.
"""

import argparse
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

DEFAULT_LLVM_BIN = "/usr/lib/llvm-22/bin"
DEFAULT_LLVM_LIB = "/usr/lib/llvm-22/lib"

DRIVER = "__evaluate_linalg_main"

FLOAT_TYPES = ("f16", "bf16", "f32")
INT_TYPES = ("i32", "i64")
ELEMENT_TYPES = FLOAT_TYPES + INT_TYPES

# The schedule that decomposes linalg.softmax into max / sub+exp / sum / div
# generics; loaded with --transform-preload-library so the input module needs
# no schedule and none has to be erased afterwards.
SOFTMAX_SCHEDULE = """\
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %softmax = transform.structured.match ops{["linalg.softmax"]} in %root
      : (!transform.any_op) -> !transform.any_op
    %generics = transform.structured.decompose_interface %softmax
      : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
"""

LOWERING = [
    "--one-shot-bufferize=bufferize-function-boundaries",
    "--buffer-deallocation-pipeline",
    "--convert-linalg-to-loops",
    "--expand-strided-metadata",
    "--lower-affine",
    "--convert-scf-to-cf",
    # No --arith-emulate-unsupported-floats: LLVM's x86 backend promotes f16
    # and bf16 arithmetic (and math.exp) to f32 and rounds after every
    # operation, as the emulation would; and in MLIR 22 the emulation leaves
    # `fastmath = #arith.fastmath<contract>` on llvm.fpext/fptrunc, which
    # mlir-runner (no arith dialect registered) cannot parse.
    "--convert-math-to-llvm",
    "--convert-math-to-libm",
    "--arith-expand",
    "--convert-arith-to-llvm",
    "--convert-index-to-llvm",
    "--finalize-memref-to-llvm",
    "--convert-func-to-llvm",
    "--convert-cf-to-llvm",
    "--reconcile-unrealized-casts",
]


class EvalError(Exception):
    pass


# --------------------------------------------------------------------------
# Signature parsing


def _strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def _split_top_level(s, sep=","):
    """Splits s at sep outside of <>, (), [] and {}."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def parse_type(text, what):
    """'tensor<2x3xf16>' -> ((2, 3), 'f16', True); 'f32' -> ((), 'f32', False)."""
    text = text.strip()
    m = re.fullmatch(r"tensor<(.*)>", text)
    if m:
        body = m.group(1).strip()
        if "," in body:
            raise EvalError("%s: tensor with an encoding is not supported: %s" % (what, text))
        dims = body.split("x")
        elem = dims[-1]
        shape = []
        for d in dims[:-1]:
            if not d.isdigit():
                raise EvalError("%s: only static shapes are supported, got %s" % (what, text))
            shape.append(int(d))
        if elem not in ELEMENT_TYPES:
            raise EvalError("%s: element type %s not supported (use one of %s)"
                            % (what, elem, ", ".join(ELEMENT_TYPES)))
        return tuple(shape), elem, True
    if text in ELEMENT_TYPES:
        return (), text, False
    raise EvalError("%s: type %s not supported (static ranked tensors or scalars of %s)"
                    % (what, text, ", ".join(ELEMENT_TYPES)))


def parse_signature(text, func):
    src = _strip_comments(text)
    m = re.search(r"func\.func\s+(?:(?:public|private|nested)\s+)?@" + re.escape(func) + r"\s*\(", src)
    if not m:
        raise EvalError("no func.func @%s in the input" % func)
    # Arguments: up to the matching ')'.
    i, depth = m.end(), 1
    while depth:
        if i >= len(src):
            raise EvalError("unterminated argument list of @%s" % func)
        if src[i] in "(<[{":
            depth += 1
        elif src[i] in ")>]}":
            depth -= 1
        i += 1
    arg_text = src[m.end():i - 1]
    args = []
    for n, a in enumerate(_split_top_level(arg_text)):
        am = re.fullmatch(r"\s*%[\w$.\-]+\s*:\s*(.*?)\s*(\{.*\})?\s*", a, re.S)
        if not am:
            raise EvalError("cannot parse argument %d of @%s: %r" % (n, func, a.strip()))
        args.append(parse_type(am.group(1), "argument %d of @%s" % (n, func)))
    # Results: '-> type' or '-> (type, ...)', up to the body's '{' or 'attributes'.
    rest = src[i:]
    rm = re.match(r"\s*->\s*", rest)
    if not rm:
        raise EvalError("@%s returns nothing; one tensor result is required" % func)
    rest = rest[rm.end():]
    if rest.startswith("("):
        j, depth = 1, 1
        while depth:
            if rest[j] in "(<[{":
                depth += 1
            elif rest[j] in ")>]}":
                depth -= 1
            j += 1
        results = _split_top_level(rest[1:j - 1])
    else:
        tm = re.match(r"(tensor<[^>]*>|\w+)", rest)
        if not tm:
            raise EvalError("cannot parse the result type of @%s" % func)
        results = [tm.group(1)]
    results = [re.sub(r"\{.*\}", "", r).strip() for r in results]
    if len(results) != 1:
        raise EvalError("@%s has %d results; exactly one is supported" % (func, len(results)))
    result = parse_type(results[0], "result of @%s" % func)
    return args, result


# --------------------------------------------------------------------------
# Inputs


def type_text(shape, elem, is_tensor):
    if not is_tensor:
        return elem
    return "tensor<%s>" % "x".join([str(d) for d in shape] + [elem])


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def generate(rng, shape, elem):
    n = numel(shape)
    if elem in FLOAT_TYPES:
        # n/32 with -64 <= n < 64: at most 6 significant bits, exact in bf16
        # (8-bit significand), f16 and f32.
        return [rng.randrange(-64, 64) / 32.0 for _ in range(n)]
    # Runs of equal small non-negative integers, restarting at every row of
    # the last dimension: 0,0,0,1,1,2,2,2,2,3,...
    row = shape[-1] if shape else 1
    vals = []
    while len(vals) < n:
        cur, left = 0, row
        while left > 0:
            run = min(left, rng.randint(1, 8))
            vals.extend([float(cur)] * run)
            left -= run
            cur += 1
    return vals[:n]


def encode(vals, elem):
    if elem == "f32":
        return struct.pack("<%df" % len(vals), *vals)
    if elem == "f16":
        return struct.pack("<%de" % len(vals), *vals)
    if elem == "bf16":
        out = bytearray()
        for v in vals:
            bits = struct.unpack("<I", struct.pack("<f", v))[0]
            if bits & 0xFFFF:
                raise EvalError("value %r is not exact in bf16" % v)
            out += struct.pack("<H", bits >> 16)
        return bytes(out)
    if elem == "i32":
        return struct.pack("<%di" % len(vals), *[int(v) for v in vals])
    if elem == "i64":
        return struct.pack("<%dq" % len(vals), *[int(v) for v in vals])
    raise EvalError("cannot encode %s" % elem)


def scalar_literal(v, elem):
    if elem in INT_TYPES:
        return "%d : %s" % (int(v), elem)
    return "%s : %s" % (repr(float(v)), elem)


# --------------------------------------------------------------------------
# Driver


def build_driver(module_text, func, args, values, result):
    rshape, relem, rtensor = result
    lines = ["", "// ---- driver added by evaluate-linalg.py ----",
             "func.func private @printMemrefI32(memref<*xi32>) attributes { llvm.emit_c_interface }",
             "func.func @" + DRIVER + "() {"]
    names = []
    for n, ((shape, elem, is_tensor), vals) in enumerate(zip(args, values)):
        if is_tensor:
            hexdata = encode(vals, elem).hex().upper()
            lines.append('  %%arg%d = arith.constant dense<"0x%s"> : %s'
                         % (n, hexdata, type_text(shape, elem, True)))
        else:
            lines.append("  %%arg%d = arith.constant %s" % (n, scalar_literal(vals[0], elem)))
        names.append("%%arg%d" % n)
    rt = type_text(rshape, relem, rtensor)
    lines.append("  %%res = call @%s(%s) : (%s) -> %s"
                 % (func, ", ".join(names),
                    ", ".join(type_text(*a) for a in args), rt))
    # Widen to f32 and bit-cast to i32, element-wise, as a tensor.
    if relem == "f32":
        conv = ["      %b = arith.bitcast %x : f32 to i32"]
    elif relem in ("f16", "bf16"):
        conv = ["      %f = arith.extf %x : " + relem + " to f32",
                "      %b = arith.bitcast %f : f32 to i32"]
    else:
        conv = ["      %f = arith.sitofp %x : " + relem + " to f32",
                "      %b = arith.bitcast %f : f32 to i32"]
    if rtensor:
        rank = len(rshape)
        dims = ", ".join("d%d" % i for i in range(rank))
        amap = "affine_map<(%s) -> (%s)>" % (dims, dims)
        it = ", ".join(['"parallel"'] * rank)
        i32t = type_text(rshape, "i32", True)
        lines += [
            "  %%init = tensor.empty() : %s" % i32t,
            "  %%bits = linalg.generic {indexing_maps = [%s, %s], iterator_types = [%s]}"
            " ins(%%res : %s) outs(%%init : %s) {" % (amap, amap, it, rt, i32t),
            "    ^bb0(%x: " + relem + ", %o: i32):",
        ] + ["  " + c for c in conv] + [
            "      linalg.yield %b : i32",
            "  } -> %s" % i32t,
        ]
    else:
        i32t = "tensor<1xi32>"
        lines.append("  %res1 = tensor.from_elements %res : tensor<1x" + relem + ">")
        # Reuse the tensor path on a 1-element tensor.
        amap = "affine_map<(d0) -> (d0)>"
        lines += [
            "  %%init = tensor.empty() : %s" % i32t,
            "  %%bits = linalg.generic {indexing_maps = [%s, %s], iterator_types = [\"parallel\"]}"
            " ins(%%res1 : tensor<1x%s>) outs(%%init : %s) {" % (amap, amap, relem, i32t),
            "    ^bb0(%x: " + relem + ", %o: i32):",
        ] + ["  " + c for c in conv] + [
            "      linalg.yield %b : i32",
            "  } -> %s" % i32t,
        ]
    mt = i32t.replace("tensor<", "memref<", 1)
    lines += [
        "  %%buf = bufferization.to_buffer %%bits : %s to %s" % (i32t, mt),
        "  %%unranked = memref.cast %%buf : %s to memref<*xi32>" % mt,
        "  call @printMemrefI32(%unranked) : (memref<*xi32>) -> ()",
        "  return",
        "}",
    ]
    driver = "\n".join(lines) + "\n"
    # Put the driver inside the module: before the last '}' when the input wraps
    # its functions in an explicit `module { ... }`, else after them.
    # Comments blanked out, so that a '}' in one is not taken for the module's.
    blanked = re.sub(r"//[^\n]*", lambda m: " " * len(m.group()), module_text)
    if re.search(r"^\s*module\b", blanked, re.M):
        k = blanked.rstrip().rfind("}")
        return module_text[:k] + driver + module_text[k:]
    return module_text + driver


# --------------------------------------------------------------------------
# Tools


def run_tool(cmd, what, stdin_text=None):
    try:
        p = subprocess.run(cmd, input=stdin_text, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True)
    except OSError as e:
        raise EvalError("%s: cannot run %s: %s" % (what, cmd[0], e))
    if p.returncode != 0:
        err = p.stderr.strip()
        if len(err) > 6000:
            err = err[:3000] + "\n...\n" + err[-3000:]
        raise EvalError("%s failed (exit %d):\n  %s\n%s"
                        % (what, p.returncode, " ".join(cmd), err))
    return p.stdout


def parse_printed(out, count):
    k = out.find("data =")
    if k < 0:
        raise EvalError("mlir-runner printed no memref (no 'data ='):\n" + out[-2000:])
    toks = re.findall(r"-?\d+", out[k + len("data ="):])
    if len(toks) != count:
        raise EvalError("mlir-runner printed %d values, expected %d" % (len(toks), count))
    return [struct.unpack("<f", struct.pack("<I", int(t) & 0xFFFFFFFF))[0] for t in toks]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help="the .mlir file")
    ap.add_argument("--func", required=True, help="the function to evaluate")
    ap.add_argument("--out-dir", required=True, help="where argN.bin and result0.bin go")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mlir-opt", default=os.path.join(DEFAULT_LLVM_BIN, "mlir-opt"))
    ap.add_argument("--mlir-runner", default=os.path.join(DEFAULT_LLVM_BIN, "mlir-runner"))
    ap.add_argument("--lib-dir", default=DEFAULT_LLVM_LIB,
                    help="holds libmlir_runner_utils.so and libmlir_c_runner_utils.so")
    ap.add_argument("--keep-temps", action="store_true",
                    help="keep the driver and lowered modules in OUT_DIR")
    opts = ap.parse_args()

    t0 = time.time()
    tmp = None
    try:
        with open(opts.input) as f:
            text = f.read()
        args, result = parse_signature(text, opts.func)
        for tool in (opts.mlir_opt, opts.mlir_runner):
            if not os.access(tool, os.X_OK):
                raise EvalError("%s is not an executable (use --mlir-opt / --mlir-runner)" % tool)
        # Diagnose a malformed input against its own file, not the driver.
        run_tool([opts.mlir_opt, opts.input, "-o", os.devnull], "mlir-opt (parsing the input)")
        os.makedirs(opts.out_dir, exist_ok=True)

        libs = []
        for name in ("libmlir_runner_utils.so", "libmlir_c_runner_utils.so"):
            path = os.path.join(opts.lib_dir, name)
            if not os.path.exists(path):
                raise EvalError("runner library %s not found (use --lib-dir)" % path)
            libs.append(path)

        rng = random.Random(opts.seed)
        values = []
        for n, (shape, elem, _) in enumerate(args):
            vals = generate(rng, shape, elem)
            values.append(vals)
            with open(os.path.join(opts.out_dir, "arg%d.bin" % n), "wb") as f:
                f.write(struct.pack("<%df" % len(vals), *vals))

        driver = build_driver(text, opts.func, args, values, result)

        tmp = opts.out_dir if opts.keep_temps else tempfile.mkdtemp(prefix="evaluate-linalg-")
        driver_path = os.path.join(tmp, "driver.mlir")
        with open(driver_path, "w") as f:
            f.write(driver)
        current = driver_path

        if re.search(r"\blinalg\.softmax\b", _strip_comments(text)):
            sched = os.path.join(tmp, "decompose-softmax.mlir")
            with open(sched, "w") as f:
                f.write(SOFTMAX_SCHEDULE)
            decomposed = os.path.join(tmp, "decomposed.mlir")
            run_tool([opts.mlir_opt, current,
                      "--transform-preload-library=transform-library-paths=" + sched,
                      "--transform-interpreter", "-o", decomposed],
                     "mlir-opt (decomposing linalg.softmax)")
            current = decomposed

        lowered = os.path.join(tmp, "lowered.mlir")
        run_tool([opts.mlir_opt, current] + LOWERING + ["-o", lowered],
                 "mlir-opt (lowering to LLVM)")
        out = run_tool([opts.mlir_runner, lowered, "-e", DRIVER, "-entry-point-result=void",
                        "-shared-libs=" + ",".join(libs)], "mlir-runner")

        rshape = result[0]
        res = parse_printed(out, numel(rshape))
        with open(os.path.join(opts.out_dir, "result0.bin"), "wb") as f:
            f.write(struct.pack("<%df" % len(res), *res))
        if not opts.keep_temps:
            shutil.rmtree(tmp, ignore_errors=True)
    except (EvalError, IOError, OSError) as e:
        sys.stderr.write("evaluate-linalg: error: %s\n" % e)
        if tmp and not opts.keep_temps:
            shutil.rmtree(tmp, ignore_errors=True)
            sys.stderr.write("evaluate-linalg: rerun with --keep-temps to keep the driver and "
                             "lowered modules in %s\n" % opts.out_dir)
        return 1

    finite = [abs(x) for x in res if math.isfinite(x)]
    nonfinite = len(res) - len(finite)
    print("evaluate-linalg: @%s(%s) -> %s: max |value| %.6g%s, %d args (seed %d) in %s, %.1f s"
          % (opts.func, ", ".join(type_text(*a) for a in args), type_text(*result),
             max(finite) if finite else float("nan"),
             (", %d non-finite" % nonfinite) if nonfinite else "",
             len(args), opts.seed, opts.out_dir, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
