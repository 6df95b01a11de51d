// Q, K, V and O as [batch, heads, seq, head_dim] (heads_first), bf16, 4
// query heads over 2 K/V heads, head dim 64, no mask.
//
// Also an input of inputs.test. On its own: seeded inputs at level A and
// level C, and the cubin in fa4-emu: the heads-first tensors reach the
// kernel as transposed views (strided parameters), not copies.
// RUN: fa4-sim %s --batch 2 --seq-q 70 --seq-k 130 | FileCheck %s
// RUN: fa4c %s --emit=mlir --sm-count 2 | fa4-sim --batch 2 --seq-q 129 --seq-k 333 --interleavings 2 | FileCheck %s
// CHECK: "ok":true
// RUN: fa4c %s --emit=mlir --stop-after=bufferize | FileCheck %s --check-prefix=VIEWS
// VIEWS: func.func @attention(%arg0: memref<?x?x4x64xbf16, strided<[?, 64, ?, 1]>>, %arg1: memref<?x?x2x64xbf16, strided<[?, 64, ?, 1]>>, %arg2: memref<?x?x2x64xbf16, strided<[?, 64, ?, 1]>>, %arg3: memref<?x?x4x64xbf16, strided<[?, 64, ?, 1]>>)
// VIEWS-NOT: memref.transpose
// RUN: fa4c %s -o %t.cubin
// RUN: fa4-emu %t.cubin.json --batch 2 --seq-q 333 --seq-k 129 --interleavings 2 --workers 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

func.func @attention(%q: tensor<?x4x?x64xbf16>, %k: tensor<?x2x?x64xbf16>,
                     %v: tensor<?x2x?x64xbf16>) -> tensor<?x4x?x64xbf16> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %batch = tensor.dim %q, %c0 : tensor<?x4x?x64xbf16>
  %seq = tensor.dim %q, %c2 : tensor<?x4x?x64xbf16>
  %init = tensor.empty(%batch, %seq) : tensor<?x4x?x64xbf16>
  %o = fa4.attention %q, %k, %v -> %init {heads_first}
      : tensor<?x4x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16>
      -> tensor<?x4x?x64xbf16>
  return %o : tensor<?x4x?x64xbf16>
}
