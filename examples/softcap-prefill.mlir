// Bidirectional attention with a softcap of 50 and an explicit scale, fp16,
// head dim 96, no GQA, with the log-sum-exp for a later merge of partial
// results.
func.func @attention(%q: memref<?x?x8x96xf16>, %k: memref<?x?x8x96xf16>,
                     %v: memref<?x?x8x96xf16>, %o: memref<?x?x8x96xf16>,
                     %lse: memref<?x8x?xf32>) {
  fa4.attention %q, %k, %v -> %o, lse %lse {scale = 0.1 : f32, softcap = 50.0 : f32}
      : memref<?x?x8x96xf16>, memref<?x?x8x96xf16>, memref<?x?x8x96xf16>
      -> memref<?x?x8x96xf16>, memref<?x8x?xf32>
  return
}
