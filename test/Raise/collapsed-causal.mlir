// Causal attention over collapsed [batch·heads, seq, head_dim] tensors: Q·Kᵀ a 3-D linalg.generic contraction in
// f32, the mask built from linalg.index comparisons choosing -inf, one
// linalg.softmax over the last dimension, P·V a mixed-precision
// linalg.batch_matmul. [6, 40, 128] bf16 (6 = batch 3 x 2 heads).
//
// REQUIRES: mlir-runner
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: %[[Q:.*]] = tensor.expand_shape %arg0 {{\[\[}}0], [1], [2, 3]] output_shape [6, 40, 1, 128] : tensor<6x40x128xbf16> into tensor<6x40x1x128xbf16>
// CHECK: fa4.attention %[[Q]], %{{.*}}, %{{.*}} -> %{{.*}} {scale = 0.0883883461 : f32} : tensor<6x40x1x128xbf16>, tensor<6x40x1x128xbf16>, tensor<6x40x1x128xbf16> -> tensor<6x40x1x128xbf16> mask_mod {
// CHECK-NEXT: ^bb0(%[[B:.*]]: index, %[[H:.*]]: index, %[[I:.*]]: index, %[[J:.*]]: index):
// CHECK-NEXT: %[[C:.*]] = arith.cmpi ugt, %[[J]], %[[I]] : index
// CHECK: tensor.collapse_shape
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTXAS --input-file %t.cubin.json
// PTXAS: "spill_store_bytes": 0
//
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// RUN: %reference_attention --dir %t.d --layout bhsd --q-shape 1,6,40,128 --causal --result %t.d/result0.bin
// RUN: fa4-sim %t.mlir --batch 6 --seq-q 40 --seq-k 40 --inputs %t.d --expect %t.d/result0.bin --expect-atol 3e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
//
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 6 --seq-q 40 --seq-k 40 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

#q = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#k = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#s = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @attention(%arg0: tensor<6x40x128xbf16>, %arg1: tensor<6x40x128xbf16>, %arg2: tensor<6x40x128xbf16>) -> tensor<6x40x128xbf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0.0883883461 : f32
    %cst_1 = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<6x40x40xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<6x40x40xf32>) -> tensor<6x40x40xf32>
    %2 = linalg.generic {indexing_maps = [#q, #k, #s], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<6x40x128xbf16>, tensor<6x40x128xbf16>) outs(%1 : tensor<6x40x40xf32>) {
    ^bb0(%in: bf16, %in_2: bf16, %out: f32):
      %20 = arith.extf %in : bf16 to f32
      %21 = arith.extf %in_2 : bf16 to f32
      %22 = arith.mulf %20, %21 : f32
      %23 = arith.addf %out, %22 : f32
      linalg.yield %23 : f32
    } -> tensor<6x40x40xf32>
    %3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%2 : tensor<6x40x40xf32>) outs(%0 : tensor<6x40x40xf32>) {
    ^bb0(%in: f32, %out: f32):
      %20 = arith.mulf %in, %cst_0 : f32
      %i = linalg.index 1 : index
      %j = linalg.index 2 : index
      %later = arith.cmpi ugt, %j, %i : index
      %21 = arith.select %later, %cst_1, %20 : f32
      linalg.yield %21 : f32
    } -> tensor<6x40x40xf32>
    %4 = linalg.softmax dimension(2) ins(%3 : tensor<6x40x40xf32>) outs(%0 : tensor<6x40x40xf32>) -> tensor<6x40x40xf32>
    %5 = tensor.empty() : tensor<6x40x40xbf16>
    %6 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%4 : tensor<6x40x40xf32>) outs(%5 : tensor<6x40x40xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %20 = arith.truncf %in : f32 to bf16
      linalg.yield %20 : bf16
    } -> tensor<6x40x40xbf16>
    %7 = tensor.empty() : tensor<6x40x128xf32>
    %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<6x40x128xf32>) -> tensor<6x40x128xf32>
    %9 = linalg.batch_matmul ins(%6, %arg2 : tensor<6x40x40xbf16>, tensor<6x40x128xbf16>) outs(%8 : tensor<6x40x128xf32>) -> tensor<6x40x128xf32>
    %10 = tensor.empty() : tensor<6x40x128xbf16>
    %11 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%9 : tensor<6x40x128xf32>) outs(%10 : tensor<6x40x128xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %20 = arith.truncf %in : f32 to bf16
      linalg.yield %20 : bf16
    } -> tensor<6x40x128xbf16>
    return %11 : tensor<6x40x128xbf16>
  }
}
