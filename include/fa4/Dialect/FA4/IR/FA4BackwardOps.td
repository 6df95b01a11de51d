//===- FA4BackwardOps.td - the backward pass -------------*- tablegen -*-===//
//
// The gradients of fa4.attention: the entry op (level A) and the ops of the
// FlashAttention-2/3 backward tile program (level B). Included from
// FA4Ops.td, whose constraints it uses.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_DIALECT_FA4_IR_FA4BACKWARDOPS_TD
#define FA4_DIALECT_FA4_IR_FA4BACKWARDOPS_TD

//===----------------------------------------------------------------------===//
// Level A
//===----------------------------------------------------------------------===//

def FA4_AttentionBackwardOp : FA4_Op<"attention_backward", [
    IsolatedFromAbove,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "the gradients of fa4.attention: dQ, dK and dV from dO";
  let description = [{
    For the attention `O = softmax(mask(f(Q·Kᵀ)))·V` that an `fa4.attention`
    with the same attributes and regions computes, and the gradient `dO` of
    a loss with respect to O, writes the gradients of that loss with respect
    to Q, K and V:

    * `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `dS = P ∘ (dP − rowsum(dO ∘ O))`,
      `dQ = dS'·K`, `dK = dS'ᵀ·Q`, where `P` is recomputed from the forward's
      LSE and `dS'` is `dS` through the derivative of the scale, the softcap
      (`scale·(1 − tanh²)`) or the `score_mod` region, which the compiler
      differentiates (forward mode) for the arith and math ops a region may
      hold; a region whose score flows through an op without a derivative
      rule is refused, naming the op;
    * with grouped-query attention, dK and dV of a K/V head sum the
      contributions of every query head that shares it;
    * a masked score (the `mask`, the `mask_mod`, keys past `seq_k`) has no
      gradient; a row that saw no key (LSE `-inf`) contributes nothing.

    Operands, all memrefs: Q, O, dO and dQ `[batch, seq_q, q_heads,
    head_dim]`, K, V, dK and dV `[batch, seq_k, kv_heads, head_dim]`, of one
    element type (f16 or bf16), any strides TMA expresses (as fa4.attention's);
    the forward's LSE `[batch, q_heads, seq_q]` f32 (natural log, as
    fa4.attention writes it). `workspace(%delta, %dq_accum)` is the kernel's
    scratch: `delta` `[batch, q_heads, seq_q]` f32 receives `rowsum(dO ∘ O)`,
    `dq_accum` `[batch, seq_q, q_heads, head_dim]` f32 accumulates dQ before
    it is scaled and rounded (the kernel clears both itself; their contents
    on entry do not matter). Attributes and regions are fa4.attention's:
    `mask`, `window_left`, `window_right`, `scale`, `softcap`, `score_mod`,
    `mask_mod` and `extras`. `deterministic` asks for dQ to be accumulated
    in a fixed order (the same bits on every run), where the default lets
    the K/V blocks of a query block add in whatever order they finish.

    Not (yet) with `block_mask`, `seqused_k`, a paged cache, split-KV or
    varlen tables, and only on memrefs.

    ```mlir
    fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
        workspace(%delta, %dq_accum) {mask = #fa4.mask<causal>}
        : memref<?x?x16x128xbf16>, memref<?x?x4x128xbf16>,
          memref<?x?x4x128xbf16>, memref<?x?x16x128xbf16>,
          memref<?x?x16x128xbf16>, memref<?x16x?xf32>
        -> memref<?x?x16x128xbf16>, memref<?x?x4x128xbf16>,
           memref<?x?x4x128xbf16>, memref<?x16x?xf32>,
           memref<?x?x16x128xf32>
    ```
  }];
  let arguments = (ins
    AnyMemRef:$q, AnyMemRef:$k, AnyMemRef:$v, AnyMemRef:$out,
    AnyMemRef:$dout, AnyMemRef:$lse,
    AnyMemRef:$dq, AnyMemRef:$dk, AnyMemRef:$dv,
    AnyMemRef:$delta, AnyMemRef:$dq_accum,
    Variadic<AnyMemRef>:$extras,
    DefaultValuedAttr<FA4_MaskKindAttr, "::mlir::fa4::MaskKind::none">:$mask,
    DefaultValuedAttr<I64Attr, "-1">:$window_left,
    DefaultValuedAttr<I64Attr, "-1">:$window_right,
    OptionalAttr<F32Attr>:$scale,
    DefaultValuedAttr<F32Attr, "0.0f">:$softcap,
    UnitAttr:$deterministic
  );
  let regions = (region MaxSizedRegion<1>:$score_mod,
                        MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $dout `,` $lse `->` $dq `,` $dk `,` $dv
    `workspace` `(` $delta `,` $dq_accum `)`
    (`extras` `(` $extras^ `:` type($extras) `)`)? attr-dict
    `:` type($q) `,` type($k) `,` type($v) `,` type($out) `,` type($dout) `,`
    type($lse) `->` type($dq) `,` type($dk) `,` type($dv) `,` type($delta)
    `,` type($dq_accum)
    (`score_mod` $score_mod^)? (`mask_mod` $mask_mod^)?
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getHeadDim();
    int64_t getNumQueryHeads();
    int64_t getNumKvHeads();
    int64_t getGqaRatio() { return getNumQueryHeads() / getNumKvHeads(); }
    /// The softmax scale in effect: the attribute, or 1/sqrt(head_dim).
    float getEffectiveScale();
  }];
}

//===----------------------------------------------------------------------===//
// Level B
//===----------------------------------------------------------------------===//

def FA4_QBlockRangeOp : FA4_Op<"q_block_range", [Pure, IsolatedFromAbove]> {
  let summary = "the query blocks a K/V block's backward task visits";
  let description = [{
    The transpose of `fa4.kv_block_range`: for the keys `[col, col +
    block_n)`, returns four indices of blocks of `rows` packed query rows
    (packed row `r` is query position `r / gqa_ratio`), `begin <= full_begin
    <= full_end <= end`: blocks in `[full_begin, full_end)` see every key of
    the K/V block and need no mask, blocks in `[begin, full_begin)` and
    `[full_end, end)` are masked element by element, blocks outside `[begin,
    end)` see none of its keys and are never visited. A query block is
    visited exactly when `fa4.kv_block_range` of that block (same
    attributes and region) contains this K/V block, and whole exactly when
    that range calls it whole.

    ```mlir
    %b, %fb, %fe, %e = fa4.q_block_range %col, %seq_q, %seq_k
        {rows = 128 : i64, block_n = 128 : i64, gqa_ratio = 4 : i64,
         mask = #fa4.mask<causal>}
    ```
  }];
  let arguments = (ins Index:$col, Index:$seq_q, Index:$seq_k,
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
    $col `,` $seq_q `,` $seq_k attr-dict (`mask_mod` $mask_mod^)?
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def FA4_LoadRowTileOp : FA4_Op<"load_row_tile"> {
  let summary = "load one f32 per packed row (the LSE, delta)";
  let description = [{
    The inverse of `fa4.store_lse_tile`: element `r` is
    `source[batch, head * gqa_ratio + p % gqa_ratio, p / gqa_ratio]` for
    packed row `p = row + r`; rows past `seq_q` read as 0. With
    `transposed` the vector is read by transposed tiles' ops (keys ×
    packed rows): the same values, held along such a tile's columns.

    ```mlir
    %l = fa4.load_row_tile %lse[%b, %h, %row] {gqa_ratio = 4 : i64}
        : memref<?x32x?xf32> -> tensor<128xf32>
    ```
  }];
  let arguments = (ins Arg<AnyMemRef, "per-row statistics", [MemRead]>:$source,
    Index:$batch, Index:$head, Index:$row,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    UnitAttr:$transposed);
  let results = (outs FA4_RowVector:$result);
  let assemblyFormat = [{
    $source `[` $batch `,` $head `,` $row `]` attr-dict `:` type($source) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def FA4_RowDotOp : FA4_Op<"row_dot", [Pure, AllTypesMatch<["lhs", "rhs"]>]> {
  let summary = "delta = rowsum(a ∘ b) in f32";
  let description = [{
    The backward's preprocessing: for each row, the dot product of the two
    tiles' rows (O and dO), accumulated in f32.

    ```mlir
    %d = fa4.row_dot %ot, %dot : tensor<128x128xbf16> -> tensor<128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$lhs, FA4_Tile:$rhs);
  let results = (outs FA4_RowVector:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)";
  let hasVerifier = 1;
}

def FA4_ProbsFromLseOp : FA4_Op<"probs_from_lse", [Pure,
    AllTypesMatch<["scores", "result"]>]> {
  let summary = "recompute P from the scores and the forward's LSE";
  let description = [{
    `P = exp2(s · scale_log2 − lse · log2(e))`, the forward's probabilities
    without its running max: the LSE is the natural-log log-sum-exp
    fa4.attention wrote. A masked score (`-inf`) gives 0, and so does every
    score of a row whose LSE is `-inf` (it saw no key). With `transposed`
    the tile is the scores' transpose (keys × packed rows, level C's Sᵀ on
    Hopper) and `lse` runs along its columns.

    ```mlir
    %p = fa4.probs_from_lse %s, %lse {scale_log2 = 0.127516 : f32}
        : tensor<128x128xf32>, tensor<128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$scores, FA4_RowVector:$lse,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$scale_log2,
    UnitAttr:$transposed);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $scores `,` $lse attr-dict `:` type($scores) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def FA4_SoftmaxGradOp : FA4_Op<"softmax_grad", [Pure,
    AllTypesMatch<["probs", "dprobs", "result"]>]> {
  let summary = "dS = P ∘ (dP − delta)";
  let description = [{
    The softmax's backward for one tile: with `delta` the row's
    `rowsum(dO ∘ O)`, the gradient with respect to the scores the softmax
    read. With `transposed` the tiles are transposes (keys × packed rows)
    and `delta` runs along their columns.

    ```mlir
    %ds = fa4.softmax_grad %p, %dp, %delta
        : tensor<128x128xf32>, tensor<128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$probs, FA4_Tile:$dprobs, FA4_RowVector:$delta,
    UnitAttr:$transposed);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $probs `,` $dprobs `,` $delta attr-dict `:` type($probs) `,` type($delta)
  }];
  let hasVerifier = 1;
}

def FA4_SoftcapGradOp : FA4_Op<"softcap_grad", [Pure,
    AllTypesMatch<["grad", "capped", "result"]>]> {
  let summary = "through the softcap: dS · (1 − (capped / cap)²)";
  let description = [{
    `capped` is the softcap's result `cap · tanh(s · scale / cap)`; its
    derivative with respect to `s · scale` is `1 − tanh²`. (The scale itself
    is applied once, to dQ and dK.)

    ```mlir
    %g = fa4.softcap_grad %ds, %capped {cap = 30.0 : f32} : tensor<128x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$grad, FA4_Tile:$capped,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$cap);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = "$grad `,` $capped attr-dict `:` type($grad)";
  let hasVerifier = 1;
}

def FA4_ScoreModGradOp : FA4_Op<"score_mod_grad", [RecursiveMemoryEffects,
    IsolatedFromAbove, AllTypesMatch<["grad", "scores", "result"]>]> {
  let summary = "through the score_mod: dS · f'(s · scale)";
  let description = [{
    `body` is the derivative of a score_mod region with respect to its
    score (fa4-tile writes it, differentiating the entry's region): same
    arguments, yielding `f'`. Each element of `grad` is multiplied by the
    body applied to the raw score times `scale` and the element's indices
    (as `fa4.score_mod` gives them). Positions past `seq_q` or `seq_k` get 0
    and the body never sees them, nor does an element whose gradient is 0
    (a masked score): it stays 0 whatever the derivative would be there.
    (The scale itself is applied once, to dQ and dK.) With `transposed` the
    tiles are transposes, as `fa4.score_mod`'s.

    ```mlir
    %g = fa4.score_mod_grad %ds, %s, %b, %h, %row, %col, %seq_q, %seq_k
        {gqa_ratio = 4 : i64, scale = 0.0883883 : f32} : tensor<128x128xf32> {
    ^bb0(%x: f32, %bi: index, %qh: index, %i: index, %j: index):
      %one = arith.constant 1.0 : f32
      fa4.yield %one : f32
    }
    ```
  }];
  let arguments = (ins FA4_Tile:$grad, FA4_Tile:$scores, Index:$batch,
    Index:$head, Index:$row, Index:$col, Index:$seq_q, Index:$seq_k,
    Variadic<AnyMemRef>:$extras,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$scale,
    UnitAttr:$transposed);
  let results = (outs FA4_Tile:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $grad `,` $scores `,` $batch `,` $head `,` $row `,` $col `,` $seq_q `,`
    $seq_k (`extras` `(` $extras^ `:` type($extras) `)`)? attr-dict `:`
    type($grad) $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def FA4_ConvertTileOp : FA4_Op<"convert_tile", [Pure]> {
  let summary = "scale a tile and round it to another element type";
  let description = [{
    `result = round(tile · scale)`, the result's element type f16, bf16 or
    f32: P and dS rounded to the input type for the MMAs, dK and dQ scaled
    by the softmax scale and rounded for their stores.

    ```mlir
    %p16 = fa4.convert_tile %p : tensor<128x128xf32> -> tensor<128x128xbf16>
    %dk16 = fa4.convert_tile %dk {scale = 0.088 : f32}
        : tensor<128x128xf32> -> tensor<128x128xbf16>
    ```
  }];
  let arguments = (ins FA4_Tile:$tile,
    DefaultValuedAttr<F32Attr, "1.0f">:$scale);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = "$tile attr-dict `:` type($tile) `->` type($result)";
  let hasVerifier = 1;
}

def FA4_TransposedMmaOp : FA4_Op<"transposed_mma", [Pure,
    AllTypesMatch<["acc", "result"]>]> {
  let summary = "acc += lhsᵀ·rhs with fp32 accumulation (dV, dK)";
  let description = [{
    The backward's products onto a K/V block: `[M, N]` lhs (P or dS, in the
    input type) transposed, times the `[M, D]` rhs (dO or Q), added to the
    `[N, D]` f32 accumulator: `dV += Pᵀ·dO`, `dK += dSᵀ·Q`.

    ```mlir
    %dv1 = fa4.transposed_mma %p, %dot, %dv0 : tensor<128x128xbf16>,
        tensor<128x128xbf16>, tensor<128x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$lhs, FA4_Tile:$rhs, FA4_Tile:$acc);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $acc attr-dict `:` type($lhs) `,` type($rhs) `,`
    type($acc)
  }];
  let hasVerifier = 1;
}

def FA4_AccumulateDqOp : FA4_Op<"accumulate_dq"> {
  let summary = "add a dQ part to the f32 accumulator";
  let description = [{
    Adds the `[M, D]` f32 tile (`dS·K` of one K/V block) to the dQ
    accumulator `[batch, seq_q, q_heads, head_dim]` f32 at the packed rows
    `[row, row + M)` of head group `head` (packed as `fa4.load_q_tile`'s);
    rows past `seq_q` are skipped. On the GPU each element is an f32 atomic
    add (reduction), the K/V blocks of a query block adding in any order.
    The tile may be the head dim's columns `[column, column + N)` only (a
    Hopper consumer adds dQ 64 columns at a time).

    ```mlir
    fa4.accumulate_dq %part, %dq_accum[%b, %h, %row] {gqa_ratio = 4 : i64}
        : tensor<128x128xf32>, memref<?x?x32x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$tile,
    Arg<AnyMemRef, "dQ accumulator", [MemRead, MemWrite]>:$dest,
    Index:$batch, Index:$head, Index:$row,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$column);
  let assemblyFormat = [{
    $tile `,` $dest `[` $batch `,` $head `,` $row `]` attr-dict `:`
    type($tile) `,` type($dest)
  }];
  let hasVerifier = 1;
}

def FA4_StoreKvTileOp : FA4_Op<"store_kv_tile"> {
  let summary = "store a dK or dV tile";
  let description = [{
    The inverse of `fa4.load_kv_tile` on a dense tensor: row `r` of the tile
    goes to position `col + r` of K/V head `head`; rows past `seq_k` are not
    written.

    ```mlir
    fa4.store_kv_tile %dkt, %dk[%b, %h, %col]
        : tensor<128x128xbf16>, memref<?x?x8x128xbf16>
    ```
  }];
  let arguments = (ins FA4_Tile:$tile,
    Arg<AnyMemRef, "dK or dV", [MemWrite]>:$dest,
    Index:$batch, Index:$head, Index:$col);
  let assemblyFormat = [{
    $tile `,` $dest `[` $batch `,` $head `,` $col `]` attr-dict `:`
    type($tile) `,` type($dest)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Level C: the backward's grid-wide steps around its warp-specialized kernel
//===----------------------------------------------------------------------===//

def FA4_PrepareBackwardOp : FA4_Op<"prepare_backward"> {
  let summary = "the backward's first kernel: delta = rowsum(O ∘ dO), dQ accumulator cleared";
  let description = [{
    A kernel of its own, run over the whole grid before the main one: for
    every query row of every head, `delta[b, h, q] = Σ_d O[b, q, h, d] ·
    dO[b, q, h, d]` (products of the stored elements, summed in f32), and
    `dq_accum` (Q's shape, f32) set to 0. Level B's preprocessing loop,
    as one step.

    ```mlir
    fa4.prepare_backward %o, %do -> %delta, %dq_accum
        : memref<?x?x8x128xbf16>, memref<?x?x8x128xbf16>,
          memref<?x8x?xf32>, memref<?x?x8x128xf32>
    ```
  }];
  let arguments = (ins Arg<AnyMemRef, "O", [MemRead]>:$out,
    Arg<AnyMemRef, "dO", [MemRead]>:$dout,
    Arg<AnyMemRef, "delta", [MemWrite]>:$delta,
    Arg<AnyMemRef, "dQ accumulator", [MemWrite]>:$dq_accum);
  let assemblyFormat = [{
    $out `,` $dout `->` $delta `,` $dq_accum attr-dict `:` type($out) `,`
    type($dout) `,` type($delta) `,` type($dq_accum)
  }];
  let hasVerifier = 1;
}

def FA4_FinishDqOp : FA4_Op<"finish_dq"> {
  let summary = "the backward's last kernel: dQ = round(dq_accum · scale)";
  let description = [{
    A kernel of its own, run over the whole grid after the main one: every
    element of the f32 accumulator times `scale` (the softmax scale, which
    the main loop leaves out), rounded to dQ's element type. Level B's
    post-processing loop, as one step.

    ```mlir
    fa4.finish_dq %dq_accum -> %dq {scale = 0.0883883 : f32}
        : memref<?x?x8x128xf32>, memref<?x?x8x128xbf16>
    ```
  }];
  let arguments = (ins Arg<AnyMemRef, "dQ accumulator", [MemRead]>:$dq_accum,
    Arg<AnyMemRef, "dQ", [MemWrite]>:$dq,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$scale);
  let assemblyFormat = [{
    $dq_accum `->` $dq attr-dict `:` type($dq_accum) `,` type($dq)
  }];
  let hasVerifier = 1;
}

#endif // FA4_DIALECT_FA4_IR_FA4BACKWARDOPS_TD
