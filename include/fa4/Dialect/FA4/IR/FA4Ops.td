//===- FA4Ops.td - fa4 operations --------------------------*- tablegen -*-===//

#ifndef FA4_DIALECT_FA4_IR_FA4OPS_TD
#define FA4_DIALECT_FA4_IR_FA4OPS_TD

include "fa4/Dialect/FA4/IR/FA4Dialect.td"
include "fa4/Dialect/FA4/IR/FA4Attrs.td"
include "mlir/Interfaces/DestinationStyleOpInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonTypeConstraints.td"

def FA4_Tile : RankedTensorOf<[F16, BF16, F8E4M3FN, F32]>;
// fa4.attention's operands: all memrefs, or all ranked tensors.
def FA4_RankedTensorOrMemRef : Type<
    Or<[IsMemRefTypePred, And<[IsTensorTypePred, HasRankPred]>]>,
    "ranked tensor or memref", "::mlir::ShapedType">;

def FA4_FloatPositive : AttrConstraint<
    CPred<"::llvm::cast<::mlir::FloatAttr>($_self).getValue().isFiniteNonZero() && "
          "!::llvm::cast<::mlir::FloatAttr>($_self).getValue().isNegative()">,
    "whose value is positive and finite">;
def FA4_FloatNonNegative : AttrConstraint<
    CPred<"!::llvm::cast<::mlir::FloatAttr>($_self).getValue().isNegative() && "
          "!::llvm::cast<::mlir::FloatAttr>($_self).getValue().isNaN()">,
    "whose value is non-negative">;
def FA4_RowVector : 1DTensorOf<[F32]>;

//===----------------------------------------------------------------------===//
// Level A: the entry op.
//===----------------------------------------------------------------------===//

def FA4_AttentionOp : FA4_Op<"attention", [
    AttrSizedOperandSegments, IsolatedFromAbove,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>,
    DestinationStyleOpInterface]> {
  let summary = "scaled dot-product attention, stated once";
  let description = [{
    Computes `O = softmax(mask(Q·Kᵀ·scale))·V` for every batch and query head.
    Q and O are `[batch, seq_q, q_heads, head_dim]`, K and V are
    `[batch, seq_k, kv_heads, head_dim]`; batch and sequence lengths may be
    dynamic, heads and head dim are static. `q_heads / kv_heads` query heads
    share one K/V head (grouped-query attention). Q and K's head dim is 32,
    64, 96, 128, 192 or 256; V and O have V's head dim (32, 64, 96, 128 or
    256, at most Q's), Q's or their own — (192, 128) is DeepSeek-V3's
    prefill attention. Their layouts may be any
    strides a TMA tensor map expresses: contiguous along head_dim, every
    other stride a positive multiple of 16 bytes (checked here when static,
    at launch otherwise) — e.g. `[batch, heads, seq, head_dim]` storage seen
    as `[batch, seq, heads, head_dim]` by `strided<[?, ?, ?, 1]>`; the kernel
    reaches them only through the tensor maps the launch builds from the
    tensors' strides. The LSE is row-major.

    * `mask`: `none`; `causal`, aligned bottom-right (query `i` sees keys
      `j <= i + seq_k - seq_q`, identical to top-left when `seq_q == seq_k`);
      or `window`, which keeps keys `i + seq_k - seq_q - window_left <= j <=
      i + seq_k - seq_q + window_right`, where `-1` leaves that side unbounded.
    * `scale`: the softmax scale, `1/sqrt(head_dim)` (Q's) when absent.
    * `softcap`: when positive, scores become `softcap·tanh(score·scale/softcap)`
      before the softmax (and `scale` is not applied again).
    * `lse`: when present, receives the natural-log log-sum-exp of each row,
      `[batch, q_heads, seq_q]` in f32; a row that sees no key gets `-inf` and
      an all-zero output.
    * `score_mod` (a region): rewrites each scaled score before the softmax,
      as FlexAttention's `score_mod`. Its block takes `(score: f32, batch,
      q_head, q_idx, kv_idx: index)` and then the extras, and yields the new
      f32 score with `fa4.yield`. With a score_mod the softcap attribute must
      be 0 (write the cap in the region).
    * `mask_mod` (a region): `(batch, q_head, q_idx, kv_idx: index)` and the
      extras, yielding `i1`: true where the query may see the key. It is
      anded with `mask`. Its indices are plain positions (top-left aligned,
      as FlexAttention's). Where the predicate is affine in `q_idx` and
      `kv_idx` (causal, windows, prefix-LM, chunks, conjunctions of them) the
      compiler derives which KV blocks are fully masked, fully visible or
      partial; any other part is evaluated element by element.
    * `block_mask`: the position of an extra that tells, per block of 128
      queries, which KV blocks (of 128 keys) the mask_mod leaves visible
      and which it leaves whole, as FlexAttention's `BlockMask` does; the
      kernel skips the others and does not run the mask_mod in whole ones.
      It is `[batch or 1, q_heads or 1, ceil(seq_q / 128), 4]` i32: per
      entry `begin, full_begin, full_end, end` — the blocks `[begin, end)`
      may hold a visible key, every key of `[full_begin, full_end)` is
      visible to every query of the block (`begin <= full_begin <=
      full_end <= end`). It describes the mask_mod alone (the `mask`
      attribute is applied on top) and must be right: a block left out is
      never visited, and a block called whole is not masked.
    * `seqused_k`: the position of an extra, `[batch]` i32, that gives each
      sequence's number of keys (FlashAttention's `seqused_k`, a KV cache's
      `cache_seqlens`): sequence `b` attends to its first `seqused_k[b]`
      keys (clamped to `[0, seq_k]`), and its masks align bottom-right to
      that length, as if its `seq_k` were `seqused_k[b]`; the keys past it
      are never read into a score. A sequence of no key gets an all-zero
      output and an LSE of `-inf`.
    * `block_table`: the position of an extra, `[batch, max_blocks]` i32,
      that makes K and V a paged cache (vLLM's and FlashAttention's layout):
      K and V are then `[num_blocks, page_size, kv_heads, head_dim]`, the
      page size static (a power of two of at least 16), and key `j` of
      sequence `b` is row `j % page_size` of block `block_table[b][j /
      page_size]`. Each sequence has `max_blocks · page_size` keys (fewer
      with `seqused_k`, a KV cache's `cache_seqlens`). A table entry outside
      `[0, num_blocks)` reads zeros, never memory outside the cache.
    * `num_splits` and `split_workspace` (together): split-KV, as
      flash-decoding does. The KV blocks of each task are cut into
      `num_splits` (2 to 128) equal parts, each its own task on its own
      CTA; each part writes its normalized O (f32) and its LSE to the
      workspace, and the last part of a tile to finish merges them exactly
      (`lse = log Σ exp(lse_s)`, `O = Σ exp(lse_s - lse) · O_s`) into O and
      the LSE. `split_workspace` is the position of an extra, an i32 memref
      `[words]` of at least `tiles · rows · (4 · (1 + num_splits) +
      num_splits · head_dim)` words, `tiles = batch · (q_heads / g) ·
      ceil(seq_q · g / 128)` and `rows = min(128, seq_q · g)` with `g` the
      GQA packing; its first `tiles · rows · 4` words are arrival counters
      that must be zero before a launch (each launch leaves its own zero
      again, and its parts' data right behind them). No region may read
      it.
    * `cu_seqlens_q` and `cu_seqlens_k` (together): variable-length
      batches, FlashAttention's varlen layout. Each is the position of an
      extra, `[batch + 1]` i32, of cumulative lengths: sequence `b` is
      query rows `[cu_seqlens_q[b], cu_seqlens_q[b + 1])` of Q and O and
      key rows `[cu_seqlens_k[b], cu_seqlens_k[b + 1])` of K and V, which
      are packed: `[1, total, heads, head_dim]` (the batch-1 case of the
      dense layout; `total` the rows of all sequences), the LSE `[1,
      q_heads, total_q]`. The batch is the tables' entries less one. Each
      sequence's masks align bottom-right to its own lengths (with
      `seqused_k`, its keys are the first `seqused_k[b]` of its rows), the
      mods see positions within the sequence, and rows outside every
      sequence are not written. Entries are clamped to `[0, total]` and a
      sequence's end to at least its start, so no table reads outside the
      tensors. Not with `block_table`, `block_mask` or split-KV.
    * FP8: Q, K and V may be `f8E4M3FN` (e4m3, FlashAttention-3's FP8
      forward); O is then f16 or bf16 and the LSE f32. `q_descale`,
      `k_descale` and `v_descale` are each the position of an extra,
      `[batch, kv_heads]` f32, FlashAttention-3's descale factors: the
      attention is that of `q · q_descale`, `k · k_descale` and `v ·
      v_descale`, the factor of each sequence and K/V head (a per-tensor
      factor is the same value everywhere). One left out is 1. Only with
      e4m3 inputs.
    * `extras`: memrefs the regions read with `memref.load` (bias tables,
      per-head slopes, document ids), and the `seqused_k`, `block_table`
      and `cu_seqlens` tables. Regions are
      straight-line code free of side effects other than those loads, and
      capture nothing from above: an extra reaches them as a block argument.

    ```mlir
    fa4.attention %q, %k, %v -> %o, lse %lse {mask = #fa4.mask<causal>}
        : memref<?x?x32x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16>
        -> memref<?x?x32x128xf16>, memref<?x32x?xf32>
    ```

    ```mlir
    fa4.attention %q, %k, %v -> %o extras(%slopes : memref<32xf32>)
        : memref<?x?x32x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16>
        -> memref<?x?x32x128xf16>
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
         %slope_table: memref<32xf32>):
      %slope = memref.load %slope_table[%h] : memref<32xf32>
      %d = arith.subi %j, %i : index
      %di = arith.index_cast %d : index to i64
      %df = arith.sitofp %di : i64 to f32
      %bias = arith.mulf %slope, %df : f32
      %r = arith.addf %s, %bias : f32
      fa4.yield %r : f32
    }
    ```

    On tensors the op is in destination style: `%o` and `%lse` are the
    destinations (their contents are overwritten), and the op returns the
    output tensor and, with an LSE, the LSE tensor. It bufferizes with
    `one-shot-bufferize` (the pipeline's first stage) into the memref form.

    Tensors have no strides, so on tensors the unit attribute `heads_first`
    says that Q, K, V and O are `[batch, heads, seq, head_dim]` (what most
    front ends hold) rather than `[batch, seq, heads, head_dim]`.
    Bufferization turns it into transposed views of the same buffers (no
    copy), and the memref form states the layout in its strides instead.

    ```mlir
    %out, %l = fa4.attention %q, %k, %v -> %o, lse %lse
        : tensor<?x?x32x128xf16>, tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16>
        -> tensor<?x?x32x128xf16>, tensor<?x32x?xf32>
    ```
  }];
  let arguments = (ins
    FA4_RankedTensorOrMemRef:$q,
    FA4_RankedTensorOrMemRef:$k,
    FA4_RankedTensorOrMemRef:$v,
    FA4_RankedTensorOrMemRef:$out,
    Optional<FA4_RankedTensorOrMemRef>:$lse,
    Variadic<AnyMemRef>:$extras,
    DefaultValuedAttr<FA4_MaskKindAttr, "::mlir::fa4::MaskKind::none">:$mask,
    DefaultValuedAttr<I64Attr, "-1">:$window_left,
    DefaultValuedAttr<I64Attr, "-1">:$window_right,
    OptionalAttr<F32Attr>:$scale,
    DefaultValuedAttr<F32Attr, "0.0f">:$softcap,
    UnitAttr:$heads_first,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$block_mask,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$seqused_k,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$block_table,
    OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>, IntMaxValue<128>]>>:$num_splits,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$split_workspace,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$cu_seqlens_q,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$cu_seqlens_k,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$q_descale,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$k_descale,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$v_descale
  );
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region MaxSizedRegion<1>:$score_mod,
                        MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat = [{
    $q `,` $k `,` $v `->` $out (`,` `lse` $lse^)?
    (`extras` `(` $extras^ `:` type($extras) `)`)? attr-dict
    `:` type($q) `,` type($k) `,` type($v) `->` type($out) (`,` type($lse)^)?
    (`score_mod` $score_mod^)? (`mask_mod` $mask_mod^)?
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The destinations: O and, when present, the LSE.
    MutableOperandRange getDpsInitsMutable();
    /// Q and K's head dim (the scores' reduction).
    int64_t getHeadDim();
    /// V and O's head dim: Q's, or its own (192 with 128, DeepSeek-V3's).
    int64_t getValueHeadDim();
    /// Q, K, V or O's shape in the logical order [batch, seq, heads,
    /// head_dim], whatever order `heads_first` declares.
    ::llvm::SmallVector<int64_t> getLogicalShape(::mlir::Value operand);
    int64_t getNumQueryHeads();
    int64_t getNumKvHeads();
    /// Query heads that share one K/V head.
    int64_t getGqaRatio() { return getNumQueryHeads() / getNumKvHeads(); }
    /// The softmax scale in effect: the attribute, or 1/sqrt(head_dim).
    float getEffectiveScale();
    /// FP8's descale tables (part of verify()).
    ::mlir::LogicalResult verifyDescales();
  }];
}

def FA4_YieldOp : FA4_Op<"yield", [Pure, Terminator,
    ParentOneOf<["AttentionOp", "ScoreModOp", "MaskOp", "KvBlockRangeOp",
                 "TaskCoordsOp", "AttentionBackwardOp", "QBlockRangeOp",
                 "ScoreModGradOp"]>]> {
  let summary = "the value of a score_mod or mask_mod region";
  let description = [{
    Ends a `score_mod` region with the new score (f32) or a `mask_mod` region
    with whether the key is visible (i1).

    ```mlir
    fa4.yield %visible : i1
    ```
  }];
  let arguments = (ins AnyType:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

//===----------------------------------------------------------------------===//
// Level B: the tile program.
//===----------------------------------------------------------------------===//

def FA4_SequenceLengthOp : FA4_Op<"sequence_length", [Pure]> {
  let summary = "a sequence's key count from a seqused_k table";
  let description = [{
    `min(max(table[batch], 0), seq_k)`: the keys sequence `batch` uses, from
    the entry's `seqused_k` table (an i32 memref `[batch]`), clamped so that
    no key outside K and V is ever read. Level B reads it once per batch,
    each role of a level-C schedule once per task.

    ```mlir
    %n = fa4.sequence_length %seqused[%b], %seq_k : memref<?xi32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[I32], [1]>:$table, Index:$batch,
                       Index:$seq_k);
  let results = (outs Index:$result);
  let assemblyFormat =
      "$table `[` $batch `]` `,` $seq_k attr-dict `:` type($table)";
}

def FA4_SequenceSpanOp : FA4_Op<"sequence_span", [Pure]> {
  let summary = "a sequence's first row and length from a cu_seqlens table";
  let description = [{
    Varlen: sequence `batch`'s rows in a packed tensor of `total` rows,
    from a cumulative-lengths table (an i32 memref `[batch + 1]`): `offset
    = min(max(table[batch], 0), total)` and `length = min(max(table[batch +
    1], offset), total) - offset`, clamped so that no row outside the
    tensor is ever read. Level B reads it once per sequence, each role of a
    level-C schedule once per task.

    ```mlir
    %first, %rows = fa4.sequence_span %cu_seqlens_q[%b], %total_q : memref<?xi32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[I32], [1]>:$table, Index:$batch,
                       Index:$total);
  let results = (outs Index:$offset, Index:$length);
  let assemblyFormat =
      "$table `[` $batch `]` `,` $total attr-dict `:` type($table)";
}

def FA4_KvBlockRangeOp : FA4_Op<"kv_block_range", [Pure, IsolatedFromAbove,
                                                   AttrSizedOperandSegments]> {
  let summary = "the KV blocks a task visits, split by mask region";
  let description = [{
    For the task whose packed query rows are `[row_begin, row_begin + rows)`
    (packed row `r` is query position `r / gqa_ratio`), returns four KV block
    indices `begin <= full_begin <= full_end <= end`:

    * blocks in `[full_begin, full_end)` are fully visible to every row of the
      task and need no mask;
    * blocks in `[begin, full_begin)` and `[full_end, end)` straddle a mask
      boundary (the causal diagonal, a window edge, or the `seq_k` tail) and
      must be masked before the softmax;
    * blocks outside `[begin, end)` are fully masked and never visited.

    With a `mask_mod` region (the entry op's, copied) the range is narrowed
    by the bounds its affine part implies; the region is analysed, never run.
    When a part of it is not affine (it reads an extra, say), no block is
    whole: every visited block is masked element by element.

    With a `block_mask` (the entry's, an i32 memref `[batch or 1, q_heads
    or 1, query blocks, 4]`) the range is narrowed by the entries of the
    task's query blocks and heads (batch `batch`, query heads `kv_head ·
    gqa_ratio` on, `kv_head` the task's head group): visited blocks are those the entries allow, whole
    blocks those every entry and the attribute mask call whole.

    ```mlir
    %b, %fb, %fe, %e = fa4.kv_block_range %row0, %seq_q, %seq_k
        {rows = 256 : i64, block_n = 128 : i64, gqa_ratio = 4 : i64,
         mask = #fa4.mask<causal>}
    ```
  }];
  let arguments = (ins Index:$row_begin, Index:$seq_q, Index:$seq_k,
    Optional<AnyMemRef>:$block_mask, Optional<Index>:$batch,
    Optional<Index>:$kv_head,
    ConfinedAttr<I64Attr, [IntPositive]>:$rows,
    ConfinedAttr<I64Attr, [IntPositive]>:$block_n,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    FA4_MaskKindAttr:$mask,
    DefaultValuedAttr<I64Attr, "-1">:$window_left,
    DefaultValuedAttr<I64Attr, "-1">:$window_right);
  let results = (outs Index:$begin, Index:$full_begin, Index:$full_end,
                      Index:$end);
  let regions = (region MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat = [{
    $row_begin `,` $seq_q `,` $seq_k
    (`block_mask` `(` $block_mask^ `:` type($block_mask) `at` $batch `,`
     $kv_head `)`)? attr-dict (`mask_mod` $mask_mod^)?
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def FA4_LoadQTileOp : FA4_Op<"load_q_tile"> {
  let summary = "load a GQA-packed Q tile";
  let description = [{
    Loads the rows `[row, row + R)` of the packed query matrix of head group
    `head` (the `gqa_ratio` query heads a tile packs: all of a K/V head's, or
    a power-of-two part of them): packed row `p` holds query position `p / gqa_ratio` of query head
    `head * gqa_ratio + p % gqa_ratio`. Rows past `seq_q` read as zero.

    ```mlir
    %qt = fa4.load_q_tile %q[%b, %h, %row] {gqa_ratio = 4 : i64}
        : memref<?x?x32x128xf16> -> tensor<128x128xf16>
    ```
  }];
  let arguments = (ins Arg<AnyMemRef, "queries", [MemRead]>:$source,
    Index:$batch, Index:$head, Index:$row,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $source `[` $batch `,` $head `,` $row `]` attr-dict `:` type($source) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def FA4_LoadKvTileOp : FA4_Op<"load_kv_tile", [AttrSizedOperandSegments]> {
  let summary = "load a K or V tile";
  let description = [{
    Loads the sequence positions `[col, col + N)` of K/V head `head`; positions
    past `seq_k` read as zero (they are masked before they can matter).

    With a `block_table` (the entry's, `[batch, max_blocks]` i32), `source`
    is a paged cache `[num_blocks, page_size, kv_heads, head_dim]`: position
    `j` of sequence `batch` is row `j % page_size` of block
    `block_table[batch][j / page_size]`; positions past the table's blocks,
    and entries outside `[0, num_blocks)`, read as zero.

    With `clear_from` (V tiles of a kernel with `seqused_k` or varlen), the
    tile's rows from `clear_from` on read as zero whatever the memory holds:
    the keys past a sequence's count (or, varlen, its end: the next
    sequence's rows) are masked in the scores, but a NaN or an infinity in
    their V rows would still reach O through P·V (0 · NaN).

    ```mlir
    %kt = fa4.load_kv_tile %k[%b, %h, %col]
        : memref<?x?x8x128xf16> -> tensor<128x128xf16>
    %pt = fa4.load_kv_tile %k_cache[%b, %h, %col] pages(%table : memref<?x?xi32>)
        : memref<?x16x8x128xf16> -> tensor<128x128xf16>
    %vt = fa4.load_kv_tile %v[%b, %h, %col] clear_from %n
        : memref<?x?x8x128xf16> -> tensor<128x128xf16>
    ```
  }];
  let arguments = (ins Arg<AnyMemRef, "keys or values", [MemRead]>:$source,
    Index:$batch, Index:$head, Index:$col,
    Optional<MemRefRankOf<[I32], [2]>>:$block_table,
    Optional<Index>:$clear_from);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $source `[` $batch `,` $head `,` $col `]`
    (`pages` `(` $block_table^ `:` type($block_table) `)`)?
    (`clear_from` $clear_from^)? attr-dict `:`
    type($source) `->` type($result)
  }];
  let hasVerifier = 1;
}

def FA4_ScoreMmaOp : FA4_Op<"score_mma", [Pure]> {
  let summary = "S = Q·Kᵀ with fp32 accumulation";
  let description = [{
    The first MMA: raw scores of an `[M, D]` Q tile against an `[N, D]` K tile,
    accumulated in f32.

    ```mlir
    %s = fa4.score_mma %qt, %kt
        : tensor<128x128xf16>, tensor<128x128xf16> -> tensor<128x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$query, FA4_Tile:$key);
  let results = (outs FA4_Tile:$scores);
  let assemblyFormat = [{
    $query `,` $key attr-dict `:` type($query) `,` type($key) `->` type($scores)
  }];
  let hasVerifier = 1;
}

def FA4_SoftcapOp : FA4_Op<"softcap", [Pure, AllTypesMatch<["scores", "result"]>]> {
  let summary = "cap scores smoothly: cap·tanh(s·scale·factor/cap)";
  let description = [{
    Applies the softmax scale and the softcap together. The scores that leave
    this op are already scaled, so the softmax that follows uses
    `scale_log2 = log2(e)`. `factor` (1 when absent) is a run-time
    multiplier of the scale: FP8's `q_descale · k_descale`.

    ```mlir
    %c = fa4.softcap %s {cap = 30.0 : f32, scale = 0.0883883 : f32}
        : tensor<128x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$scores, Optional<F32>:$factor,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$cap,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$scale);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $scores (`factor` `(` $factor^ `)`)? attr-dict `:` type($scores)
  }];
  let hasVerifier = 1;
}

def FA4_ScoreModOp : FA4_Op<"score_mod", [RecursiveMemoryEffects,
    IsolatedFromAbove, AttrSizedOperandSegments,
    AllTypesMatch<["scores", "result"]>]> {
  let summary = "scale each score, then rewrite it with the score_mod region";
  let description = [{
    For score `s` at row `r`, column `c`: packed row `row + r` is query
    position `(row + r) / gqa_ratio` of query head `head * gqa_ratio +
    (row + r) % gqa_ratio`, column `c` is key position `col + c`; the result
    is the region applied to `s · scale · factor` (`factor` 1 when absent:
    FP8's `q_descale · k_descale`) and those indices (and the extras).
    The scores that leave are scaled, so the softmax that follows uses
    `scale_log2 = log2(e)`. Positions past `seq_q` or `seq_k` are only
    scaled: the region never sees an index outside the sequences (its loads
    stay in bounds), and those scores are masked or never stored.

    With `transposed` the tile is the scores' transpose (a backward's Sᵀ):
    row `r` is key position `col + r` and column `c` packed row `row + c`.

    ```mlir
    %m = fa4.score_mod %s, %b, %h, %row, %col, %seq_q, %seq_k
        {gqa_ratio = 4 : i64, scale = 0.0883883 : f32} : tensor<128x128xf32> {
    ^bb0(%x: f32, %bi: index, %qh: index, %i: index, %j: index):
      fa4.yield %x : f32
    }
    ```
  }];
  let arguments = (ins FA4_Tile:$scores, Index:$batch, Index:$head,
    Index:$row, Index:$col, Index:$seq_q, Index:$seq_k,
    Optional<F32>:$factor, Variadic<AnyMemRef>:$extras,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$scale,
    UnitAttr:$transposed);
  let results = (outs FA4_Tile:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $scores `,` $batch `,` $head `,` $row `,` $col `,` $seq_q `,` $seq_k
    (`factor` `(` $factor^ `)`)?
    (`extras` `(` $extras^ `:` type($extras) `)`)? attr-dict `:` type($scores)
    $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def FA4_MaskOp : FA4_Op<"mask", [RecursiveMemoryEffects, AttrSizedOperandSegments,
    IsolatedFromAbove, AllTypesMatch<["scores", "result"]>]> {
  let summary = "set the scores a query may not see to -inf";
  let description = [{
    Masks a boundary score tile before the softmax, so that neither the row
    max nor the row sum ever sees a masked column. Row `r` is packed row
    `row + r` (query position `(row + r) / gqa_ratio`), column `c` is key
    position `col + c`. Columns at or past `seq_k` are always masked; `mask`
    adds the causal or window bounds of `fa4.attention`.

    With a `mask_mod` region (and the task's `batch` and head group `head`, after
    `at`), a score is also masked where the region yields false. The affine
    part of the region is applied as bounds; the region runs per element only
    when a part of it is not affine.

    With `transposed` the tile is the scores' transpose (a backward's Sᵀ):
    row `r` is key position `col + r` and column `c` packed row `row + c`.

    ```mlir
    %m = fa4.mask %s, %row, %col, %seq_q, %seq_k
        {gqa_ratio = 4 : i64, mask = #fa4.mask<causal>} : tensor<128x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$scores, Index:$row, Index:$col,
    Index:$seq_q, Index:$seq_k, Optional<Index>:$batch, Optional<Index>:$head,
    Variadic<AnyMemRef>:$extras,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    FA4_MaskKindAttr:$mask,
    DefaultValuedAttr<I64Attr, "-1">:$window_left,
    DefaultValuedAttr<I64Attr, "-1">:$window_right,
    UnitAttr:$transposed);
  let results = (outs FA4_Tile:$result);
  let regions = (region MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat = [{
    $scores `,` $row `,` $col `,` $seq_q `,` $seq_k
    (`at` $batch^ `,` $head)?
    (`extras` `(` $extras^ `:` type($extras) `)`)? attr-dict `:` type($scores)
    (`mask_mod` $mask_mod^)?
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def FA4_OnlineSoftmaxOp : FA4_Op<"online_softmax", [Pure,
    AllTypesMatch<["row_max", "row_sum", "new_row_max", "new_row_sum",
                   "acc_scale"]>]> {
  let summary = "one block of the online softmax, with conditional rescaling";
  let description = [{
    For each row, with `m` the running max (raw score units), `l` the
    running sum and `c = scale_log2 · factor` (`factor` 1 when absent):

    * `m_cand = max(m, rowmax(scores))`; the row's max moves to `m_cand` only
      when `(m_cand - m) · c > rescale_threshold` (or `m` is `-inf`);
      otherwise the stale max is kept and the exponentials stay below
      `2^rescale_threshold` — the result is exact either way;
    * `acc_scale = exp2((m - m_new) · c)`, `1` for a kept max;
    * `probs = exp2(scores · c - m_new · c + prob_shift)`, rounded to the
      probability element type (V's) for the value MMA; a row whose max is
      `-inf` gives all-zero probabilities, never NaN;
    * `new_row_sum = row_sum · acc_scale + rowsum(exp2(...))` in f32.

    `factor` is a run-time multiplier of the scale (FP8's `q_descale ·
    k_descale`). `prob_shift` (FP8's 8, FlashAttention-3's) lifts the
    probabilities from `[0, 1]` to `[0, 2^prob_shift]`, where e4m3 keeps
    more digits; the sums carry the same factor, so `fa4.normalize`
    divides it out of O and subtracts it from the LSE.

    ```mlir
    %p, %m1, %l1, %alpha = fa4.online_softmax %s, %m0, %l0
        {scale_log2 = 0.127516 : f32, rescale_threshold = 8.0 : f32}
        : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf16>
    %p8, %m2, %l2, %beta = fa4.online_softmax %s, %m0, %l0 factor(%qk)
        {scale_log2 = 0.127516 : f32, rescale_threshold = 0.0 : f32,
         prob_shift = 8 : i64}
        : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf8E4M3FN>
    ```
  }];
  let arguments = (ins FA4_Tile:$scores, FA4_RowVector:$row_max,
    FA4_RowVector:$row_sum, Optional<F32>:$factor,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$scale_log2,
    ConfinedAttr<F32Attr, [FA4_FloatNonNegative]>:$rescale_threshold,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative, IntMaxValue<8>]>,
                      "0">:$prob_shift);
  let results = (outs FA4_Tile:$probs, FA4_RowVector:$new_row_max,
    FA4_RowVector:$new_row_sum, FA4_RowVector:$acc_scale);
  let assemblyFormat = [{
    $scores `,` $row_max `,` $row_sum (`factor` `(` $factor^ `)`)? attr-dict
    `:` type($scores) `,` type($row_max) `->` type($probs)
  }];
  let hasVerifier = 1;
}

def FA4_CorrectionOp : FA4_Op<"correction", [Pure,
    AllTypesMatch<["acc", "result"]>]> {
  let summary = "rescale the output accumulator by the softmax's acc_scale";
  let description = [{
    Multiplies row `r` of the output accumulator by `acc_scale[r]`. When every
    factor is exactly 1 (no row's max moved, or every move stayed under the
    rescale threshold) the whole rescale is skipped.

    ```mlir
    %acc1 = fa4.correction %acc0, %alpha : tensor<128x128xf32>, tensor<128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$acc, FA4_RowVector:$acc_scale);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $acc `,` $acc_scale attr-dict `:` type($acc) `,` type($acc_scale)
  }];
  let hasVerifier = 1;
}

def FA4_ValueMmaOp : FA4_Op<"value_mma", [Pure,
    AllTypesMatch<["acc", "result"]>]> {
  let summary = "O += P·V with fp32 accumulation";
  let description = [{
    The second MMA: adds the `[M, N]` probabilities (in the input dtype) times
    the `[N, D]` V tile to the `[M, D]` f32 accumulator.

    ```mlir
    %acc2 = fa4.value_mma %p, %vt, %acc1 : tensor<128x128xf16>,
        tensor<128x128xf16>, tensor<128x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$probs, FA4_Tile:$value, FA4_Tile:$acc);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $probs `,` $value `,` $acc attr-dict `:` type($probs) `,` type($value) `,`
    type($acc)
  }];
  let hasVerifier = 1;
}

def FA4_NormalizeOp : FA4_Op<"normalize", [Pure, AttrSizedOperandSegments,
    AllTypesMatch<["row_max", "row_sum", "lse"]>]> {
  let summary = "deferred normalization: O / row_sum, and the log-sum-exp";
  let description = [{
    After the last KV block: `out = acc · out_factor / row_sum` converted to
    the output element type, and `lse = (row_max · scale_log2 · factor +
    log2(row_sum) - prob_shift) · ln 2`, with `factor`, `prob_shift` those
    of the block's `fa4.online_softmax` and `out_factor` FP8's `v_descale`
    (each 1, or 0 for the shift, when absent). A row with `row_sum == 0`
    (it saw no key) gives `out = 0`, `lse = -inf`.

    ```mlir
    %o, %lse = fa4.normalize %acc, %m, %l {scale_log2 = 0.127516 : f32}
        : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf16>
    ```
  }];
  let arguments = (ins FA4_Tile:$acc, FA4_RowVector:$row_max,
    FA4_RowVector:$row_sum, Optional<F32>:$factor, Optional<F32>:$out_factor,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$scale_log2,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative, IntMaxValue<8>]>,
                      "0">:$prob_shift);
  let results = (outs FA4_Tile:$out, FA4_RowVector:$lse);
  let assemblyFormat = [{
    $acc `,` $row_max `,` $row_sum (`factor` `(` $factor^ `)`)?
    (`out_factor` `(` $out_factor^ `)`)? attr-dict `:` type($acc) `,`
    type($row_max) `->` type($out)
  }];
  let hasVerifier = 1;
}

def FA4_LoadDescaleOp : FA4_Op<"load_descale"> {
  let summary = "one FP8 descale factor of a sequence and K/V head";
  let description = [{
    Reads `table[batch, kv_head]`, an f32 of a `[batch, kv_heads]` descale
    table (`fa4.attention`'s `q_descale`, `k_descale`, `v_descale`).

    ```mlir
    %qd = fa4.load_descale %q_descale[%b, %h] : memref<?x8xf32>
    ```
  }];
  let arguments = (ins Arg<AnyMemRef, "descale table", [MemRead]>:$table,
    Index:$batch, Index:$head);
  let results = (outs F32:$result);
  let assemblyFormat = [{
    $table `[` $batch `,` $head `]` attr-dict `:` type($table)
  }];
  let hasVerifier = 1;
}

def FA4_StoreOTileOp : FA4_Op<"store_o_tile"> {
  let summary = "store a GQA-packed output tile";
  let description = [{
    The inverse of `fa4.load_q_tile`: packed row `p` goes to query position
    `p / gqa_ratio` of query head `head * gqa_ratio + p % gqa_ratio`. Rows past
    `seq_q` are not written. The tile may be the columns `[column, column +
    N)` of the output's head dim (a thread-held chunk at level C).

    Varlen: with `span(%offset, %limit)` the positions are a sequence's,
    relative to its first row `offset` in the packed tensor: position `p`
    goes to row `offset + p`, and only positions below `limit` (the
    sequence's length) are written. At level D it is a store by address
    from each thread's elements (a TMA box would write into the next
    sequence).

    ```mlir
    fa4.store_o_tile %ot, %o[%b, %h, %row] {gqa_ratio = 4 : i64}
        : tensor<128x128xf16>, memref<?x?x32x128xf16>
    fa4.store_o_tile %ot, %o[%c0, %h, %row] span(%first, %rows)
        {gqa_ratio = 1 : i64} : tensor<128x128xbf16>, memref<1x?x8x128xbf16>
    ```
  }];
  let arguments = (ins FA4_Tile:$tile,
    Arg<AnyMemRef, "output", [MemWrite]>:$dest,
    Index:$batch, Index:$head, Index:$row, Variadic<Index>:$span,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$column);
  let assemblyFormat = [{
    $tile `,` $dest `[` $batch `,` $head `,` $row `]`
    (`span` `(` $span^ `)`)? attr-dict `:` type($tile) `,` type($dest)
  }];
  let hasVerifier = 1;
}

def FA4_StorePartialOOp : FA4_Op<"store_partial_o"> {
  let summary = "write one split-KV part's normalized O to the workspace";
  let description = [{
    Split-KV: the part `split` of the task writes its O, normalized by its
    own row sums (f32), into the workspace's slot of the tile
    (`AttentionMath.h`'s SplitWorkspaceLayout), the tile's columns
    `[column, column + N)`; rows past `seq_q` are not written. `%o` gives
    the problem's sizes (its batch, sequence and heads), not a destination.
    `fa4.merge_splits` reads these back once every part has written.

    ```mlir
    fa4.store_partial_o %ot, %o, %ws[%b, %h, %row, %split]
        {gqa_ratio = 4 : i64, num_splits = 8 : i64}
        : tensor<128x128xf32>, memref<?x?x32x128xf16>, memref<?xi32>
    ```
  }];
  let arguments = (ins FA4_Tile:$tile,
    AnyMemRef:$out,
    Arg<AnyMemRef, "split-KV workspace", [MemWrite]>:$workspace,
    Index:$batch, Index:$head, Index:$row, Index:$split,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    ConfinedAttr<I64Attr, [IntMinValue<2>, IntMaxValue<128>]>:$num_splits,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$column);
  let assemblyFormat = [{
    $tile `,` $out `,` $workspace `[` $batch `,` $head `,` $row `,` $split `]`
    attr-dict `:` type($tile) `,` type($out) `,` type($workspace)
  }];
  let hasVerifier = 1;
}

def FA4_MergeSplitsOp : FA4_Op<"merge_splits"> {
  let summary = "count a split-KV part in; the last of a tile merges them all";
  let description = [{
    Split-KV: the part `split` of the task has written its O
    (`fa4.store_partial_o`); this writes its LSE `%lse` (a row vector) to
    the workspace and counts the part in, per row. The part that completes
    a row's count (the last of `num_splits` to arrive, in whatever order
    the CTAs ran) merges the row exactly, `lse = log Σ_s exp(lse_s)` and `O
    = Σ_s exp(lse_s - lse) · O_s` (parts that saw no key, LSE -inf, weigh
    nothing; a row no part saw is 0 with LSE -inf), writes it to `%out`
    (and `%lse_out`), and sets the count back to zero for the next launch.
    Rows past `seq_q` are skipped. On the GPU the count is one atomic per
    thread that holds a row's elements, with release and acquire at GPU
    scope: the last part reads what the others wrote.

    ```mlir
    fa4.merge_splits %l -> %o lse %lse workspace %ws[%b, %h, %row, %split]
        {gqa_ratio = 4 : i64, num_splits = 8 : i64}
        : tensor<128xf32>, memref<?x?x32x128xf16>, memref<?xi32>, memref<?x32x?xf32>
    ```
  }];
  let arguments = (ins FA4_RowVector:$lse,
    Arg<AnyMemRef, "output", [MemWrite]>:$out,
    Arg<Optional<AnyMemRef>, "log-sum-exp output", [MemWrite]>:$lse_out,
    Arg<AnyMemRef, "split-KV workspace", [MemRead, MemWrite]>:$workspace,
    Index:$batch, Index:$head, Index:$row, Index:$split,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    ConfinedAttr<I64Attr, [IntMinValue<2>, IntMaxValue<128>]>:$num_splits);
  let assemblyFormat = [{
    $lse `->` $out (`lse` $lse_out^)? `workspace` $workspace
    `[` $batch `,` $head `,` $row `,` $split `]`
    attr-dict `:` type($lse) `,` type($out) `,` type($workspace)
    (`,` type($lse_out)^)?
  }];
  let hasVerifier = 1;
}

def FA4_StoreLseTileOp : FA4_Op<"store_lse_tile"> {
  let summary = "store the log-sum-exp of a GQA-packed tile";
  let description = [{
    Writes `lse[r]` of packed row `row + r` to
    `dest[batch, head * gqa_ratio + p % gqa_ratio, p / gqa_ratio]`; rows past
    `seq_q` are not written. Varlen: with `span(%offset, %limit)`, position
    `p` goes to `offset + p` and only positions below `limit` are written,
    as `fa4.store_o_tile`'s.

    ```mlir
    fa4.store_lse_tile %l, %lse[%b, %h, %row] {gqa_ratio = 4 : i64}
        : tensor<128xf32>, memref<?x32x?xf32>
    ```
  }];
  let arguments = (ins FA4_RowVector:$tile,
    Arg<AnyMemRef, "log-sum-exp output", [MemWrite]>:$dest,
    Index:$batch, Index:$head, Index:$row, Variadic<Index>:$span,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio);
  let assemblyFormat = [{
    $tile `,` $dest `[` $batch `,` $head `,` $row `]`
    (`span` `(` $span^ `)`)? attr-dict `:` type($tile) `,` type($dest)
  }];
  let hasVerifier = 1;
}

include "fa4/Dialect/FA4/IR/FA4BackwardOps.td"
include "fa4/Dialect/FA4/IR/FA4ScheduleOps.td"

#endif // FA4_DIALECT_FA4_IR_FA4OPS_TD
