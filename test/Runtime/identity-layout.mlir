// Entry IR with the identity layout asks for dense tensors: a launch of
// [batch, heads, seq, head_dim] storage is refused by name.
// RUN: fa4c %s -o %t.cubin
// RUN: not fa4-runtime-check %t.cubin.json --seq-q 150 --seq-k 200 --layout bhsd 2>&1 | FileCheck %s --check-prefix=IDENTITY
// IDENTITY: error: q: strides [76800, 64, 9600, 1] differ from the [?, 512, 64, 1] the kernel was compiled for

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
