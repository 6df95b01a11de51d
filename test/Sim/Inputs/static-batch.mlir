func.func @attention(%q: memref<2x?x4x64xf16>, %k: memref<2x?x2x64xf16>,
                     %v: memref<2x?x2x64xf16>, %o: memref<2x?x4x64xf16>) {
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<causal>}
      : memref<2x?x4x64xf16>, memref<2x?x2x64xf16>, memref<2x?x2x64xf16>
      -> memref<2x?x4x64xf16>
  return
}
