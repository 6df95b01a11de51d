"""Writes --inputs files for examples/document-block-mask.mlir (batch 1,
seq_q = seq_k = n): Q, K, V, document ids in two documents, and a block mask
built from the ids the way FlexAttention's create_block_mask builds one
(`exact`), or one that calls every block whole (`lying`)."""
import random
import struct
import sys

out, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
heads, kv_heads, d = 8, 2, 64
rng = random.Random(5)


def write(index, values):
    with open(f"{out}/arg{index}.bin", "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values))


def tensor(seq, h):
    return [rng.randrange(-64, 64) / 32 for _ in range(seq * h * d)]


write(0, tensor(n, heads))
write(1, tensor(n, kv_heads))
write(2, tensor(n, kv_heads))
split = n // 3
ids = [0 if i < split else 1 for i in range(n)]
# The id table is [largest size, largest size] (fa4-sim's dynamic extras).
size = max(n, heads)
write(4, [float(ids[j]) if j < n else 0.0 for _ in range(size) for j in range(size)])

blocks = (n + 127) // 128
table = []
for qb in range(blocks):
    queries = range(qb * 128, min(n, qb * 128 + 128))
    seen, whole = [], []
    for kb in range(blocks):
        keys = range(kb * 128, min(n, kb * 128 + 128))
        pairs = [ids[q] == ids[k] and k <= q for q in queries for k in keys]
        # The mask_mod alone: documents and the causal diagonal it holds.
        seen.append(any(pairs))
        whole.append(all(pairs))
    if kind == "lying":
        table += [0, 0, blocks, blocks]
        continue
    visible = [kb for kb in range(blocks) if seen[kb]]
    full = [kb for kb in range(blocks) if whole[kb]]
    begin, end = (visible[0], visible[-1] + 1) if visible else (0, 0)
    full_begin = full[0] if full else begin
    full_end = full_begin
    while full_end < blocks and whole[full_end]:
        full_end += 1
    table += [begin, full_begin, full_end, end]
write(5, [float(x) for x in table])
