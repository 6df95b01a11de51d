"""Writes fa4-sim's --inputs files and the O they should give, computed in
float64 from the definition of attention alone (bottom-right causal mask,
optional ALiBi slopes as examples/alibi.mlir adds them):

  attention.py DIR --sizes B SQ SK HQ HKV D --args Q K V [SLOPES]
               [--heads-first] [--causal]

DIR/argN.bin gets the entry argument N (Q, K, V, the slopes), DIR/expected.bin
O; every file float32 little-endian, row-major, Q, K, V and O as
[batch, seq, heads, head_dim] or, with --heads-first, [batch, heads, seq,
head_dim]. Values are multiples of 1/8 or 1/16 with few significant bits, so
fp16 and bf16 hold them exactly."""
import argparse
import math
import os
import random
import struct

parser = argparse.ArgumentParser()
parser.add_argument("dir")
parser.add_argument("--sizes", type=int, nargs=6, required=True)
parser.add_argument("--args", type=int, nargs="+", required=True)
parser.add_argument("--heads-first", action="store_true")
parser.add_argument("--causal", action="store_true")
options = parser.parse_args()
batch, seq_q, seq_k, q_heads, kv_heads, head_dim = options.sizes
random.seed(1)


def draw(seq, heads):
    return [[[[random.randint(-16, 16) / 8 for _ in range(head_dim)]
              for _ in range(heads)] for _ in range(seq)] for _ in range(batch)]


def write(number, values):
    with open(os.path.join(options.dir, number), "wb") as f:
        f.write(struct.pack("<%df" % len(values), *values))


def flat(tensor, seq, heads):
    """[batch, seq, heads, head_dim] nested lists in the declared order."""
    if options.heads_first:
        return [x for b in tensor for h in range(heads) for s in range(seq)
                for x in b[s][h]]
    return [x for b in tensor for row in b for head in row for x in head]


q, k, v = draw(seq_q, q_heads), draw(seq_k, kv_heads), draw(seq_k, kv_heads)
slopes = [random.randint(-8, 8) / 16 for _ in range(q_heads)]
os.makedirs(options.dir, exist_ok=True)
write("arg%d.bin" % options.args[0], flat(q, seq_q, q_heads))
write("arg%d.bin" % options.args[1], flat(k, seq_k, kv_heads))
write("arg%d.bin" % options.args[2], flat(v, seq_k, kv_heads))
if len(options.args) > 3:
    write("arg%d.bin" % options.args[3], slopes)

scale = 1 / math.sqrt(head_dim)
out = [[[None] * q_heads for _ in range(seq_q)] for _ in range(batch)]
for b in range(batch):
    for h in range(q_heads):
        kv = h // (q_heads // kv_heads)
        for i in range(seq_q):
            keys = [j for j in range(seq_k)
                    if not options.causal or j <= i + seq_k - seq_q]
            scores = []
            for j in keys:
                s = scale * sum(x * y for x, y in zip(q[b][i][h], k[b][j][kv]))
                if len(options.args) > 3:
                    s += slopes[h] * (j - i)
                scores.append(s)
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            out[b][i][h] = [sum(w * v[b][j][kv][d] for w, j in zip(weights, keys))
                            / total for d in range(head_dim)]
write("expected.bin", flat(out, seq_q, q_heads))
