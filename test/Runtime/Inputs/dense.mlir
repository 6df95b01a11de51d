// The same attention over dense [batch, seq, heads, head_dim] tensors (the
// identity layout).
func.func @attention(%q: memref<?x?x8x64xf16>,
                     %k: memref<?x?x4x64xf16>,
                     %v: memref<?x?x4x64xf16>,
                     %o: memref<?x?x8x64xf16>,
                     %lse: memref<?x8x?xf32>) {
  fa4.attention %q, %k, %v -> %o, lse %lse {mask = #fa4.mask<causal>}
      : memref<?x?x8x64xf16>, memref<?x?x4x64xf16>,
        memref<?x?x4x64xf16>
      -> memref<?x?x8x64xf16>, memref<?x8x?xf32>
  return
}
