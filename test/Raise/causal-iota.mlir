// Imitates a front end's causal attention (as torch-mlir lowers
//   scores.masked_fill(key_pos > query_pos, -inf)
// with the positions an iota, i.e. linalg.index, inside the generic):
//   S = (Q . K^T) * 0.08838834764831845 (1/sqrt(128)) in f32,
//   S[b, h, i, j] = -inf where j > i,
//   O = softmax(S, dim=3) as f16 . V, f32 accumulation.
// Q/K/V [1, 2, 48, 128] (b, h, s, d) f16, result [1, 2, 48, 128] f16;
// seq_q == seq_k, so top-left and bottom-right alignment agree.
// Q . K^T is a 4-D linalg.generic contraction, the mask a linalg.generic
// comparing linalg.index 2 and 3 with arith.cmpi and choosing -inf with
// arith.select, the softmax one linalg.softmax, and P . V a mixed-precision
// linalg.batch_matmul (f16 operands, f32 accumulator) on [b*h, ...].
//
// REQUIRES: mlir-runner
// Raising a causal mask built from linalg.index comparisons and a select of
// -inf, head dim 128.
// The raised function is one fa4.attention on the arguments, nothing else is
// left,
// it compiles to a cubin without spills, and fa4-sim on the inputs mlir-runner
// used agrees with mlir-runner's evaluation of the original linalg IR; fa4-emu
// runs the cubin against the raised op's own reference.
//
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: fa4.attention %arg0, %arg1, %arg2 -> %{{.*}} {heads_first, scale = 0.0883883461 : f32} : {{.*}} mask_mod {
// CHECK-NEXT: ^bb0(%[[B:.*]]: index, %[[H:.*]]: index, %[[Q:.*]]: index, %[[K:.*]]: index):
// CHECK-NEXT: %[[C:.*]] = arith.cmpi ugt, %[[K]], %[[Q]] : index
// CHECK: %[[M:.*]] = arith.xori %[[C]]
// CHECK-NEXT: fa4.yield %[[M]] : i1
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTXAS --input-file %t.cubin.json
// PTXAS: "spill_store_bytes": 0
//
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// The evaluation itself agrees with attention computed in float64 from the same
// files.
// RUN: %reference_attention --dir %t.d --layout bhsd --q-shape 1,2,48,128 --causal --result %t.d/result0.bin
// RUN: fa4-sim %t.mlir --batch 1 --seq-q 48 --seq-k 48 --inputs %t.d --expect %t.d/result0.bin --expect-atol 1e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
//
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 1 --seq-q 48 --seq-k 48 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @attention(%arg0: tensor<1x2x48x128xf16>, %arg1: tensor<1x2x48x128xf16>, %arg2: tensor<1x2x48x128xf16>) -> tensor<1x2x48x128xf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0.0883883461 : f32
    %cst_1 = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<1x2x48x48xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x2x48x48xf32>) -> tensor<1x2x48x48xf32>
    %2 = linalg.generic {indexing_maps = [#q, #k, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<1x2x48x128xf16>, tensor<1x2x48x128xf16>) outs(%1 : tensor<1x2x48x48xf32>) {
    ^bb0(%in: f16, %in_2: f16, %out: f32):
      %20 = arith.extf %in : f16 to f32
      %21 = arith.extf %in_2 : f16 to f32
      %22 = arith.mulf %20, %21 : f32
      %23 = arith.addf %out, %22 : f32
      linalg.yield %23 : f32
    } -> tensor<1x2x48x48xf32>
    %3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2 : tensor<1x2x48x48xf32>) outs(%0 : tensor<1x2x48x48xf32>) {
    ^bb0(%in: f32, %out: f32):
      %20 = arith.mulf %in, %cst_0 : f32
      linalg.yield %20 : f32
    } -> tensor<1x2x48x48xf32>
    // masked_fill(key_pos > query_pos, -inf)
    %4 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3 : tensor<1x2x48x48xf32>) outs(%0 : tensor<1x2x48x48xf32>) {
    ^bb0(%in: f32, %out: f32):
      %20 = linalg.index 2 : index
      %21 = linalg.index 3 : index
      %22 = arith.cmpi ugt, %21, %20 : index
      %23 = arith.select %22, %cst_1, %in : f32
      linalg.yield %23 : f32
    } -> tensor<1x2x48x48xf32>
    %5 = linalg.softmax dimension(3) ins(%4 : tensor<1x2x48x48xf32>) outs(%0 : tensor<1x2x48x48xf32>) -> tensor<1x2x48x48xf32>
    %6 = tensor.empty() : tensor<1x2x48x48xf16>
    %7 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5 : tensor<1x2x48x48xf32>) outs(%6 : tensor<1x2x48x48xf16>) {
    ^bb0(%in: f32, %out: f16):
      %20 = arith.truncf %in : f32 to f16
      linalg.yield %20 : f16
    } -> tensor<1x2x48x48xf16>
    // P . V as a batch matmul over b*h
    %collapsed = tensor.collapse_shape %7 [[0, 1], [2], [3]] : tensor<1x2x48x48xf16> into tensor<2x48x48xf16>
    %collapsed_3 = tensor.collapse_shape %arg2 [[0, 1], [2], [3]] : tensor<1x2x48x128xf16> into tensor<2x48x128xf16>
    %8 = tensor.empty() : tensor<2x48x128xf32>
    %9 = linalg.fill ins(%cst : f32) outs(%8 : tensor<2x48x128xf32>) -> tensor<2x48x128xf32>
    %10 = linalg.batch_matmul ins(%collapsed, %collapsed_3 : tensor<2x48x48xf16>, tensor<2x48x128xf16>) outs(%9 : tensor<2x48x128xf32>) -> tensor<2x48x128xf32>
    %expanded = tensor.expand_shape %10 [[0, 1], [2], [3]] output_shape [1, 2, 48, 128] : tensor<2x48x128xf32> into tensor<1x2x48x128xf32>
    %11 = tensor.empty() : tensor<1x2x48x128xf16>
    %12 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x48x128xf32>) outs(%11 : tensor<1x2x48x128xf16>) {
    ^bb0(%in: f32, %out: f16):
      %20 = arith.truncf %in : f32 to f16
      linalg.yield %20 : f16
    } -> tensor<1x2x48x128xf16>
    return %12 : tensor<1x2x48x128xf16>
  }
}
