// The seed's configuration: batch and sequence lengths dynamic, 32 query heads
// sharing 8 K/V heads (GQA ratio 4), head dim 128, fp16, causal, with LSE.
func.func @attention(%q: memref<?x?x32x128xf16>, %k: memref<?x?x8x128xf16>,
                     %v: memref<?x?x8x128xf16>, %o: memref<?x?x32x128xf16>,
                     %lse: memref<?x32x?xf32>) {
  fa4.attention %q, %k, %v -> %o, lse %lse {mask = #fa4.mask<causal>}
      : memref<?x?x32x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16>
      -> memref<?x?x32x128xf16>, memref<?x32x?xf32>
  return
}
