#!/usr/bin/env python3
"""Attention in pure Python float64, from little-endian float32 files.

  reference_attention.py --dir DIR --layout bhsd --q-shape 1,2,32,64
      --kv-shape 1,2,48,64 --scale 0.125 [--causal [--causal-align A]]
      [--bias FILE --bias-shape h,sq,sk] [--q F --k F --v F]
      [--result FILE | --write FILE] [--atol X] [--rtol Y]

Reads Q, K and V (default DIR/arg0.bin, arg1.bin, arg2.bin, as
scripts/evaluate-linalg.py writes them) in the given layout:
  bhsd  [batch, heads, seq, head_dim]
  bshd  [batch, seq, heads, head_dim]
and computes, per batch b and query head h,
  O = softmax(scale * Q K^T + bias [+ causal mask]) V
in float64.  Grouped-query attention follows from the shapes: with hq query
heads and hkv key/value heads (hq a multiple of hkv), query head h uses
key/value head h // (hq / hkv).

--causal masks key j for query i when j > i (top-left alignment, PyTorch's
is_causal) or, with --causal-align bottom-right, when j > i + sk - sq
(FlashAttention's convention); the two agree when sq == sk.

--bias FILE adds an additive bias of shape --bias-shape, broadcast against
[b, h, sq, sk] NumPy-style (right-aligned; size-1 or missing dimensions are
broadcast), e.g. h,sq,sk for a bias shared by the batch.

With --result FILE the output (in the same layout as Q) is compared with
FILE: the script prints the maximum absolute error and exits 1 when some
element has |got - want| > atol + rtol * |want|.  With --write FILE the
reference output is written as little-endian float32 instead.
"""

import argparse
import math
import os
import struct
import sys


def read_f32(path, count):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != 4 * count:
        sys.exit("reference_attention: %s holds %d float32 values, expected %d"
                 % (path, len(data) // 4, count))
    return struct.unpack("<%df" % count, data)


def shape_arg(text):
    return tuple(int(x) for x in text.split(",") if x.strip())


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Tensor4:
    """A flat row-major 4-D array read through a layout as [b, h, s, d]."""

    def __init__(self, data, shape, layout):
        self.data = data
        if layout == "bhsd":
            b, h, s, d = shape
            self.strides = (h * s * d, s * d, d, 1)
        else:  # bshd
            b, s, h, d = shape
            self.strides = (s * h * d, d, h * d, 1)
        self.b, self.h, self.s, self.d = b, h, s, d

    def row(self, b, h, s):
        o = b * self.strides[0] + h * self.strides[1] + s * self.strides[2]
        return self.data[o:o + self.d]


def bias_lookup(data, shape):
    """Returns f(b, h, i, j) for a bias broadcast NumPy-style to [b, h, sq, sk]."""
    rank = len(shape)
    if rank > 4:
        sys.exit("reference_attention: bias rank %d > 4" % rank)
    full = (1,) * (4 - rank) + tuple(shape)
    strides = [0] * 4
    acc = 1
    for k in range(3, -1, -1):
        strides[k] = 0 if full[k] == 1 else acc
        acc *= full[k]

    def f(b, h, i, j):
        return data[b * strides[0] + h * strides[1] + i * strides[2] + j * strides[3]]
    return f, full


def attention(q, k, v, scale, causal, align, bias):
    if (q.b, q.d) != (k.b, k.d) or (k.b, k.h, k.s, k.d) != (v.b, v.h, v.s, v.d):
        sys.exit("reference_attention: inconsistent Q/K/V shapes")
    if q.h % k.h:
        sys.exit("reference_attention: %d query heads are not a multiple of %d kv heads"
                 % (q.h, k.h))
    group = q.h // k.h
    sq, sk = q.s, k.s
    out = {}
    for b in range(q.b):
        for h in range(q.h):
            hk = h // group
            krows = [k.row(b, hk, j) for j in range(sk)]
            vrows = [v.row(b, hk, j) for j in range(sk)]
            for i in range(sq):
                qi = q.row(b, h, i)
                scores = []
                for j in range(sk):
                    if causal and j > i + (sk - sq if align == "bottom-right" else 0):
                        scores.append(-math.inf)
                        continue
                    s = scale * math.fsum(a * c for a, c in zip(qi, krows[j]))
                    if bias is not None:
                        s += bias(b, h, i, j)
                    scores.append(s)
                m = max(scores)
                if m == -math.inf:
                    out[(b, h, i)] = [0.0] * q.d  # fully masked row
                    continue
                p = [math.exp(s - m) for s in scores]
                denom = math.fsum(p)
                out[(b, h, i)] = [math.fsum(p[j] * vrows[j][c] for j in range(sk)) / denom
                                  for c in range(q.d)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=".", help="where arg0.bin, ... lie")
    ap.add_argument("--q"), ap.add_argument("--k"), ap.add_argument("--v")
    ap.add_argument("--layout", choices=["bhsd", "bshd"], default="bhsd")
    ap.add_argument("--q-shape", type=shape_arg, required=True, help="4 sizes in the layout's order")
    ap.add_argument("--kv-shape", type=shape_arg, help="4 sizes in the layout's order (default: Q's)")
    ap.add_argument("--scale", type=float, help="default 1/sqrt(head_dim)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--causal-align", choices=["top-left", "bottom-right"], default="top-left")
    ap.add_argument("--bias", help="float32 file of an additive bias")
    ap.add_argument("--bias-shape", type=shape_arg)
    ap.add_argument("--result", help="float32 file to compare with the reference")
    ap.add_argument("--write", help="write the reference output here")
    ap.add_argument("--atol", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=1e-2)
    opts = ap.parse_args()

    qs = opts.q_shape
    kvs = opts.kv_shape or qs
    if len(qs) != 4 or len(kvs) != 4:
        sys.exit("reference_attention: shapes must have 4 sizes")
    path = lambda p, n: p or os.path.join(opts.dir, "arg%d.bin" % n)
    q = Tensor4(read_f32(path(opts.q, 0), numel(qs)), qs, opts.layout)
    k = Tensor4(read_f32(path(opts.k, 1), numel(kvs)), kvs, opts.layout)
    v = Tensor4(read_f32(path(opts.v, 2), numel(kvs)), kvs, opts.layout)
    scale = opts.scale if opts.scale is not None else 1.0 / math.sqrt(q.d)
    bias = None
    if opts.bias:
        if not opts.bias_shape:
            sys.exit("reference_attention: --bias needs --bias-shape")
        bias, full = bias_lookup(read_f32(opts.bias, numel(opts.bias_shape)), opts.bias_shape)
        for want, have in zip((q.b, q.h, q.s, k.s), full):
            if have not in (1, want):
                sys.exit("reference_attention: bias shape %s does not broadcast to %s"
                         % (opts.bias_shape, (q.b, q.h, q.s, k.s)))

    out = attention(q, k, v, scale, opts.causal, opts.causal_align, bias)
    # Flatten in Q's layout.
    flat = [0.0] * numel(qs)
    for (b, h, i), row in out.items():
        o = b * q.strides[0] + h * q.strides[1] + i * q.strides[2]
        flat[o:o + q.d] = row

    if opts.write:
        with open(opts.write, "wb") as f:
            f.write(struct.pack("<%df" % len(flat), *flat))
    if opts.result:
        got = read_f32(opts.result, len(flat))
        worst, worst_at, bad = 0.0, 0, 0
        for n, (g, w) in enumerate(zip(got, flat)):
            err = abs(g - w) if math.isfinite(g) else math.inf
            if err > opts.atol + opts.rtol * abs(w):
                bad += 1
            if err > worst:
                worst, worst_at = err, n
        print("reference_attention: %d values, max |error| %.3g at %d (got %.6g, want %.6g), "
              "%d beyond atol %g + rtol %g"
              % (len(flat), worst, worst_at, got[worst_at], flat[worst_at], bad,
                 opts.atol, opts.rtol))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
