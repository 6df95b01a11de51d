// Q, K, V and O stored [batch, heads, seq, head_dim] (what torch-mlir and
// most front ends produce), seen as fa4's [batch, seq, heads, head_dim]:
// the seq stride is head_dim, the heads stride seq·head_dim (dynamic).
func.func @attention(%q: memref<?x?x8x64xf16, strided<[?, 64, ?, 1]>>,
                     %k: memref<?x?x4x64xf16, strided<[?, 64, ?, 1]>>,
                     %v: memref<?x?x4x64xf16, strided<[?, 64, ?, 1]>>,
                     %o: memref<?x?x8x64xf16, strided<[?, 64, ?, 1]>>,
                     %lse: memref<?x8x?xf32>) {
  fa4.attention %q, %k, %v -> %o, lse %lse {mask = #fa4.mask<causal>}
      : memref<?x?x8x64xf16, strided<[?, 64, ?, 1]>>, memref<?x?x4x64xf16, strided<[?, 64, ?, 1]>>,
        memref<?x?x4x64xf16, strided<[?, 64, ?, 1]>>
      -> memref<?x?x8x64xf16, strided<[?, 64, ?, 1]>>, memref<?x8x?xf32>
  return
}
