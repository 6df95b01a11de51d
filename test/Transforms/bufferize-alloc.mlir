// A tensor pipeline that makes its own destination (tensor.empty) and
// returns only O: one-shot-bufferize allocates O's buffer, and the memref
// form writes into it.
// RUN: fa4-opt %s --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" | FileCheck %s

// CHECK-LABEL: func.func @sdpa(
// CHECK: %[[ALLOC:.*]] = memref.alloc(%{{.*}}, %{{.*}}) {{.*}}: memref<?x?x4x128xf16>
// CHECK: fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %[[ALLOC]] : memref<?x?x4x128xf16>, memref<?x?x4x128xf16>, memref<?x?x4x128xf16> -> memref<?x?x4x128xf16>
// CHECK: return %[[ALLOC]]
func.func @sdpa(%q: tensor<?x?x4x128xf16>, %k: tensor<?x?x4x128xf16>,
                %v: tensor<?x?x4x128xf16>) -> tensor<?x?x4x128xf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = tensor.dim %q, %c0 : tensor<?x?x4x128xf16>
  %s = tensor.dim %q, %c1 : tensor<?x?x4x128xf16>
  %init = tensor.empty(%b, %s) : tensor<?x?x4x128xf16>
  %o = fa4.attention %q, %k, %v -> %init
      : tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>
      -> tensor<?x?x4x128xf16>
  return %o : tensor<?x?x4x128xf16>
}
