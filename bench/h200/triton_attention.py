"""A fused attention forward pass in Triton: bench.py's Triton baseline.

The FlashAttention-2 algorithm as Triton programs express it, written for
this repository: one program per (128-query block, batch x query head)
keeps its Q tile in registers, streams K and V in blocks of BLOCK_N keys
and keeps the online softmax (a running row maximum and row sum, in log2
units so that exp2 does the exponentials) and the output accumulator in
float32; the output is divided by the row sum once at the end.

Key blocks come in two kinds, each a loop of its own so that the common one
carries no masking: blocks every row of the query block sees whole, and the
blocks along the causal diagonal or past seq_k, which are masked per
element. The causal mask is aligned to the bottom-right corner (query i
sees keys j <= i + seq_k - seq_q), as fa4 and FlashAttention; a row that
sees no key gets O = 0. GQA: query head h reads kv head h // (q_heads /
kv_heads). Tensors are [batch, seq, heads, head_dim] with any strides whose
head_dim is contiguous.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _attend_blocks(acc, row_max, row_sum, q, k_base, v_base, k_seq_stride,
                   v_seq_stride, rows, first_key, end_key, seq_k, diagonal,
                   scale_log2, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                   MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    dims = tl.arange(0, HEAD_DIM)
    for block_start in range(first_key, end_key, BLOCK_N):
        keys = block_start + tl.arange(0, BLOCK_N)
        k_ptrs = k_base + keys[:, None] * k_seq_stride + dims[None, :]
        v_ptrs = v_base + keys[:, None] * v_seq_stride + dims[None, :]
        if MASKED:
            in_range = keys < seq_k
            k_tile = tl.load(k_ptrs, mask=in_range[:, None], other=0.0)
        else:
            k_tile = tl.load(k_ptrs)
        scores = tl.dot(q, tl.trans(k_tile)) * scale_log2
        if MASKED:
            seen = in_range[None, :]
            if CAUSAL:
                seen = seen & (keys[None, :] <= rows[:, None] + diagonal)
            scores = tl.where(seen, scores, float("-inf"))
        block_max = tl.maximum(row_max, tl.max(scores, 1))
        # A row that has seen no key yet keeps a maximum of -inf: subtract 0
        # instead, so its probabilities are exp2(-inf) = 0, not NaN.
        shift = tl.where(block_max == float("-inf"), 0.0, block_max)
        probabilities = tl.math.exp2(scores - shift[:, None])
        rescale = tl.math.exp2(row_max - shift)
        row_sum = row_sum * rescale + tl.sum(probabilities, 1)
        if MASKED:
            v_tile = tl.load(v_ptrs, mask=in_range[:, None], other=0.0)
        else:
            v_tile = tl.load(v_ptrs)
        acc = acc * rescale[:, None]
        acc = tl.dot(probabilities.to(v_tile.dtype), v_tile, acc)
        row_max = block_max
    return acc, row_max, row_sum


@triton.jit
def _attention_forward(Q, K, V, O,
                       q_batch_stride, q_seq_stride, q_head_stride,
                       k_batch_stride, k_seq_stride, k_head_stride,
                       v_batch_stride, v_seq_stride, v_head_stride,
                       o_batch_stride, o_seq_stride, o_head_stride,
                       seq_q, seq_k, q_heads, group, scale_log2,
                       HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    query_block = tl.program_id(0)
    batch_head = tl.program_id(1)
    batch = batch_head // q_heads
    head = batch_head % q_heads
    kv_head = head // group

    first_row = query_block * BLOCK_M
    rows = first_row + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q_ptrs = (Q + batch.to(tl.int64) * q_batch_stride + head * q_head_stride +
              rows[:, None] * q_seq_stride + dims[None, :])
    q = tl.load(q_ptrs, mask=(rows < seq_q)[:, None], other=0.0)
    k_base = K + batch.to(tl.int64) * k_batch_stride + kv_head * k_head_stride
    v_base = V + batch.to(tl.int64) * v_batch_stride + kv_head * v_head_stride

    # Keys [0, whole_end) are seen by every row of the block (and lie below
    # seq_k); [whole_end, end) need the element mask.
    diagonal = seq_k - seq_q
    if CAUSAL:
        end = tl.minimum(seq_k, first_row + BLOCK_M + diagonal)
        whole_end = tl.maximum(tl.minimum(first_row + diagonal + 1, seq_k), 0)
    else:
        end = seq_k
        whole_end = seq_k
    whole_end = (whole_end // BLOCK_N) * BLOCK_N

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc, row_max, row_sum = _attend_blocks(
        acc, row_max, row_sum, q, k_base, v_base, k_seq_stride, v_seq_stride,
        rows, 0, whole_end, seq_k, diagonal, scale_log2, HEAD_DIM, BLOCK_N,
        False, CAUSAL)
    acc, row_max, row_sum = _attend_blocks(
        acc, row_max, row_sum, q, k_base, v_base, k_seq_stride, v_seq_stride,
        rows, whole_end, end, seq_k, diagonal, scale_log2, HEAD_DIM, BLOCK_N,
        True, CAUSAL)

    out = acc / tl.where(row_sum == 0.0, 1.0, row_sum)[:, None]
    o_ptrs = (O + batch.to(tl.int64) * o_batch_stride + head * o_head_stride +
              rows[:, None] * o_seq_stride + dims[None, :])
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(rows < seq_q)[:, None])


# The tile shapes bench.py chooses among on the GPU, per head dim, causality
# and sizes (the first launch of each times them all).
CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=4),
]
_attention_tuned = triton.autotune(
    configs=CONFIGS, key=["HEAD_DIM", "CAUSAL", "seq_q", "seq_k"])(_attention_forward)


def attention(q, k, v, causal=False, scale=None, out=None, config=None):
    """O of q [batch, seq_q, q_heads, head_dim], k and v [batch, seq_k,
    kv_heads, head_dim] (fp16 or bf16, head_dim a power of two, contiguous),
    written into `out` (a new tensor like q by default). `config`: one
    triton.Config to launch with instead of the autotuned choice among
    CONFIGS (the only way under TRITON_INTERPRET, which cannot time)."""
    batch, seq_q, q_heads, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    if q_heads % kv_heads:
        raise ValueError(f"q_heads {q_heads} is not a multiple of kv_heads {kv_heads}")
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("head_dim must be contiguous")
    o = torch.empty_like(q) if out is None else out
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale

    def grid(meta):
        return (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * q_heads)

    if config is None:
        kernel, options = _attention_tuned, {}
    else:
        kernel = _attention_forward
        options = dict(config.kwargs, num_warps=config.num_warps,
                       num_stages=config.num_stages)
    kernel[grid](
        q, k, v, o,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        seq_q, seq_k, q_heads, q_heads // kv_heads, scale * math.log2(math.e),
        HEAD_DIM=head_dim, CAUSAL=causal, **options)
    return o
