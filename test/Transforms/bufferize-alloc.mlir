// A tensor pipeline that makes its own destination (tensor.empty) and
// returns O: one-shot-bufferize allocates O's buffer, and
// fa4-promote-destinations makes that buffer a new parameter of the kernel
// (no longer returned), dropping the size computations the allocation took.
// RUN: fa4-opt %s --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" | FileCheck %s --check-prefix=ALLOC
// RUN: fa4-opt %s --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" --fa4-promote-destinations | FileCheck %s
// RUN: fa4-opt %s --fa4-pipeline=stop-after=bufferize | FileCheck %s
// RUN: fa4-sim %s --batch 2 --seq-q 130 --seq-k 100 | FileCheck %s --check-prefix=SIM

// ALLOC-LABEL: func.func @sdpa(
// ALLOC: %[[ALLOC:.*]] = memref.alloc(%{{.*}}, %{{.*}}) {{.*}}: memref<?x?x4x128xf16>
// ALLOC: fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %[[ALLOC]]
// ALLOC: return %[[ALLOC]]

// CHECK-LABEL: func.func @sdpa(
// CHECK-SAME: %{{.*}}: memref<?x?x4x128xf16>, %{{.*}}: memref<?x?x4x128xf16>, %{{.*}}: memref<?x?x4x128xf16>, %[[O:.*]]: memref<?x?x4x128xf16>) {
// CHECK-NEXT: fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %[[O]] : memref<?x?x4x128xf16>, memref<?x?x4x128xf16>, memref<?x?x4x128xf16> -> memref<?x?x4x128xf16>
// CHECK-NEXT: return{{$}}
// SIM: "ok":true
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
