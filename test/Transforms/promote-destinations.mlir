// RUN: fa4-opt %s --split-input-file --fa4-promote-destinations --verify-diagnostics | FileCheck %s

// An allocation used for anything else than the op and the return stays.
// CHECK-LABEL: func.func @also_read(
// CHECK: memref.alloc
// CHECK: fa4.attention
func.func @also_read(%q: memref<1x128x4x128xf16>) -> (memref<1x128x4x128xf16>, f16) {
  %o = memref.alloc() : memref<1x128x4x128xf16>
  fa4.attention %q, %q, %q -> %o
      : memref<1x128x4x128xf16>, memref<1x128x4x128xf16>, memref<1x128x4x128xf16> -> memref<1x128x4x128xf16>
  %c0 = arith.constant 0 : index
  %x = memref.load %o[%c0, %c0, %c0, %c0] : memref<1x128x4x128xf16>
  return %o, %x : memref<1x128x4x128xf16>, f16
}

// -----

// A function something calls keeps its signature.
// CHECK-LABEL: func.func private @called(
// CHECK: memref.alloc
func.func private @called(%q: memref<1x128x4x128xf16>) -> memref<1x128x4x128xf16> {
  %o = memref.alloc() : memref<1x128x4x128xf16>
  fa4.attention %q, %q, %q -> %o
      : memref<1x128x4x128xf16>, memref<1x128x4x128xf16>, memref<1x128x4x128xf16> -> memref<1x128x4x128xf16>
  return %o : memref<1x128x4x128xf16>
}
func.func @caller(%q: memref<1x128x4x128xf16>) -> memref<1x128x4x128xf16> {
  %o = func.call @called(%q) : (memref<1x128x4x128xf16>) -> memref<1x128x4x128xf16>
  return %o : memref<1x128x4x128xf16>
}

// -----

// The LSE's allocation too, after O's; the function's other result stays.
// CHECK-LABEL: func.func @both(
// CHECK-SAME: %[[Q:[^:]*]]: memref<1x128x4x128xf16>, %[[X:[^:]*]]: index, %[[O:[^:]*]]: memref<1x128x4x128xf16>, %[[L:[^:]*]]: memref<1x4x128xf32>) -> index {
// CHECK-NEXT: fa4.attention %[[Q]], %[[Q]], %[[Q]] -> %[[O]], lse %[[L]]
// CHECK-NEXT: return %[[X]] : index
func.func @both(%q: memref<1x128x4x128xf16>, %x: index) -> (memref<1x128x4x128xf16>, index, memref<1x4x128xf32>) {
  %o = memref.alloc() : memref<1x128x4x128xf16>
  %l = memref.alloc() : memref<1x4x128xf32>
  fa4.attention %q, %q, %q -> %o, lse %l
      : memref<1x128x4x128xf16>, memref<1x128x4x128xf16>, memref<1x128x4x128xf16> -> memref<1x128x4x128xf16>, memref<1x4x128xf32>
  return %o, %x, %l : memref<1x128x4x128xf16>, index, memref<1x4x128xf32>
}
