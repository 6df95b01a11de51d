// NEGATIVE: a bias whose broadcasting cannot be proven statically.
// Imitates IREE-style linalg-on-tensors attention (f32 scores, as in
// bias-alibi.mlir) whose additive bias arrives as a runtime-shaped 2-D
// buffer tensor<?x?xf32> holding [h * sq, sk], split into [h, sq, sk] by a
// tensor.expand_shape with dynamic sizes (tensor.dim of the argument, the
// row count divided by the 2 heads) and broadcast over the batch:
//   O = softmax((Q . K^T) * 0.125 + bias[h, i, j], dim=3) as f16 . V
// Q [1, 2, 32, 64], K/V [1, 2, 48, 64] (b, h, s, d) f16, bias ?x? f32,
// result [1, 2, 32, 64] f16.
// Unsupported: the bias's sizes and strides are only known at run time; that
// it holds h * sq rows of sk keys, i.e. that element (h, i, j) lives at
// (h * sq + i) * sk + j, cannot be proven from the IR (the expanded type
// tensor<2x?x?xf32> need not match the static [2, 32, 48] scores).
//
// A front-end-style input the pass must refuse: it keeps its linalg IR
// and gets one remark saying why.
// RUN: fa4-opt --fa4-raise-attention --mlir-print-op-on-diagnostic=false %s 2>&1 | FileCheck %s --check-prefix=BCAST
// BCAST: remark: not raised to fa4.attention: a score modification reads a tensor.expand_shape with a dynamic inner size; the regions can read only function arguments (extras)
// BCAST-NOT: remark
// BCAST-NOT: fa4.attention

#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#p = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#bias = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
module {
  func.func @attention(%arg0: tensor<1x2x32x64xf16>, %arg1: tensor<1x2x48x64xf16>, %arg2: tensor<1x2x48x64xf16>, %arg3: tensor<?x?xf32>) -> tensor<1x2x32x64xf16> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.250000e-01 : f32
    %0 = tensor.empty() : tensor<1x2x32x48xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x2x32x48xf32>) -> tensor<1x2x32x48xf32>
    %2 = linalg.generic {indexing_maps = [#q, #k, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<1x2x32x64xf16>, tensor<1x2x48x64xf16>) outs(%1 : tensor<1x2x32x48xf32>) {
    ^bb0(%in: f16, %in_1: f16, %out: f32):
      %20 = arith.extf %in : f16 to f32
      %21 = arith.extf %in_1 : f16 to f32
      %22 = arith.mulf %20, %21 : f32
      %23 = arith.addf %out, %22 : f32
      linalg.yield %23 : f32
    } -> tensor<1x2x32x48xf32>
    %3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2 : tensor<1x2x32x48xf32>) outs(%0 : tensor<1x2x32x48xf32>) {
    ^bb0(%in: f32, %out: f32):
      %20 = arith.mulf %in, %cst_0 : f32
      linalg.yield %20 : f32
    } -> tensor<1x2x32x48xf32>
    // [h * sq, sk] -> [h, sq, sk] with runtime sizes
    %dim = tensor.dim %arg3, %c0 : tensor<?x?xf32>
    %dim_1 = tensor.dim %arg3, %c1 : tensor<?x?xf32>
    %4 = arith.divui %dim, %c2 : index
    %expanded = tensor.expand_shape %arg3 [[0, 1], [2]] output_shape [2, %4, %dim_1] : tensor<?x?xf32> into tensor<2x?x?xf32>
    %5 = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3, %expanded : tensor<1x2x32x48xf32>, tensor<2x?x?xf32>) outs(%0 : tensor<1x2x32x48xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %20 = arith.addf %in, %in_1 : f32
      linalg.yield %20 : f32
    } -> tensor<1x2x32x48xf32>
    %6 = linalg.softmax dimension(3) ins(%5 : tensor<1x2x32x48xf32>) outs(%0 : tensor<1x2x32x48xf32>) -> tensor<1x2x32x48xf32>
    %7 = tensor.empty() : tensor<1x2x32x48xf16>
    %8 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%6 : tensor<1x2x32x48xf32>) outs(%7 : tensor<1x2x32x48xf16>) {
    ^bb0(%in: f32, %out: f16):
      %20 = arith.truncf %in : f32 to f16
      linalg.yield %20 : f16
    } -> tensor<1x2x32x48xf16>
    %9 = tensor.empty() : tensor<1x2x32x64xf32>
    %10 = linalg.fill ins(%cst : f32) outs(%9 : tensor<1x2x32x64xf32>) -> tensor<1x2x32x64xf32>
    %11 = linalg.generic {indexing_maps = [#p, #v, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%8, %arg2 : tensor<1x2x32x48xf16>, tensor<1x2x48x64xf16>) outs(%10 : tensor<1x2x32x64xf32>) {
    ^bb0(%in: f16, %in_1: f16, %out: f32):
      %20 = arith.extf %in : f16 to f32
      %21 = arith.extf %in_1 : f16 to f32
      %22 = arith.mulf %20, %21 : f32
      %23 = arith.addf %out, %22 : f32
      linalg.yield %23 : f32
    } -> tensor<1x2x32x64xf32>
    %12 = tensor.empty() : tensor<1x2x32x64xf16>
    %13 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%11 : tensor<1x2x32x64xf32>) outs(%12 : tensor<1x2x32x64xf16>) {
    ^bb0(%in: f32, %out: f16):
      %20 = arith.truncf %in : f32 to f16
      linalg.yield %20 : f16
    } -> tensor<1x2x32x64xf16>
    return %13 : tensor<1x2x32x64xf16>
  }
}
