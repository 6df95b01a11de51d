// A learned relative-position bias (T5 style, without T5's log buckets): each
// query head owns a table of 2R + 1 = 129 biases, one per key offset j - i in
// [-R, R] with R = 64; keys further away than R share the bias at the edge.
// The table is an extra, [q_heads, 2R + 1] f32, and the score_mod clamps the
// offset with arith.maxsi / arith.minsi on index and shifts it by R to get a
// column that is always in bounds, then adds the entry to the scaled score.
// Bidirectional (no mask): an encoder layer. bf16, head dim 64, 8 query heads
// over 8 K/V heads.
//
// i and j are top-left positions, so with seq_q != seq_k the offset is the
// plain difference of positions, whatever the lengths.
func.func @attention(%q: memref<?x?x8x64xbf16>, %k: memref<?x?x8x64xbf16>,
                     %v: memref<?x?x8x64xbf16>, %o: memref<?x?x8x64xbf16>,
                     %bias: memref<8x129xf32>) {
  fa4.attention %q, %k, %v -> %o extras(%bias : memref<8x129xf32>)
      : memref<?x?x8x64xbf16>, memref<?x?x8x64xbf16>, memref<?x?x8x64xbf16>
      -> memref<?x?x8x64xbf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %table: memref<8x129xf32>):
    %radius = arith.constant 64 : index
    %minus_radius = arith.constant -64 : index
    %offset = arith.subi %j, %i : index
    %above = arith.maxsi %offset, %minus_radius : index
    %clamped = arith.minsi %above, %radius : index
    %column = arith.addi %clamped, %radius : index
    %entry = memref.load %table[%h, %column] : memref<8x129xf32>
    %biased = arith.addf %s, %entry : f32
    fa4.yield %biased : f32
  }
  return
}
