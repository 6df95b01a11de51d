// A local-attention layer: bf16, head dim 64, 16 query heads over 2 K/V heads
// (GQA ratio 8), each query sees the 1024 keys up to its own position.
func.func @attention(%q: memref<?x?x16x64xbf16>, %k: memref<?x?x2x64xbf16>,
                     %v: memref<?x?x2x64xbf16>, %o: memref<?x?x16x64xbf16>) {
  fa4.attention %q, %k, %v -> %o
      {mask = #fa4.mask<window>, window_left = 1024, window_right = 0}
      : memref<?x?x16x64xbf16>, memref<?x?x2x64xbf16>, memref<?x?x2x64xbf16>
      -> memref<?x?x16x64xbf16>
  return
}
