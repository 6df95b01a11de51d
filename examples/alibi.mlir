// ALiBi (attention with linear biases): no position embedding; instead each
// query head h adds slope[h] * (j - i) to its score, a penalty that grows
// linearly with the distance to the key. The slopes are an extra, one f32 per
// query head (not per K/V head: the 16 query heads share 4 K/V heads, GQA 4,
// yet each keeps its own slope), so the caller chooses them: ALiBi's
// geometric sequence 2^(-8(h+1)/16), or any other. The score_mod sees the
// already-scaled score and the query head, so the bias is added after the
// softmax scale, as ALiBi defines it. Causal masking stays the `mask`
// attribute, so the compiler still skips the blocks above the diagonal.
// fp16, head dim 128.
//
// The region's i and j are top-left positions; when seq_q != seq_k the
// causal attribute aligns bottom-right, but j - i then differs from the
// bottom-right distance by seq_k - seq_q, the same for the whole row, and a
// per-row constant leaves the softmax's output unchanged (an LSE would move
// by it).
func.func @attention(%q: memref<?x?x16x128xf16>, %k: memref<?x?x4x128xf16>,
                     %v: memref<?x?x4x128xf16>, %o: memref<?x?x16x128xf16>,
                     %slopes: memref<16xf32>) {
  fa4.attention %q, %k, %v -> %o extras(%slopes : memref<16xf32>)
      {mask = #fa4.mask<causal>}
      : memref<?x?x16x128xf16>, memref<?x?x4x128xf16>, memref<?x?x4x128xf16>
      -> memref<?x?x16x128xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %slope_of: memref<16xf32>):
    %slope = memref.load %slope_of[%h] : memref<16xf32>
    %distance = arith.subi %j, %i : index
    %distance_i64 = arith.index_cast %distance : index to i64
    %distance_f32 = arith.sitofp %distance_i64 : i64 to f32
    %bias = arith.mulf %slope, %distance_f32 : f32
    %biased = arith.addf %s, %bias : f32
    fa4.yield %biased : f32
  }
  return
}
