// NEGATIVE: not attention as fa4.attention computes it.
// Imitates torch-mlir's lowering of scaled dot-product attention written by
// hand with the softmax over the wrong axis, softmax(dim=-2):
//   O = softmax((Q . K^T) * 0.125, dim=2) . V
// The max, sum and division run over the query dimension (d2) of the
// [b, h, sq, sk] scores instead of the key dimension (d3), so every column,
// not every row, of P sums to one. seq_q == seq_k == 40 so that the shapes
// alone do not give the dimension away.
// Q/K/V [1, 2, 40, 64] (b, h, s, d) f16, result [1, 2, 40, 64] f16;
// linalg.transpose + linalg.batch_matmul as in torch-sdpa.mlir.
//
// A front-end-style input the pass must refuse: it keeps its linalg IR
// and gets one remark saying why.
// RUN: fa4-opt --fa4-raise-attention --mlir-print-op-on-diagnostic=false %s 2>&1 | FileCheck %s --check-prefix=DIM
// DIM: remark: not raised to fa4.attention: the softmax's shift varies along the keys P·V sums over: it is not a softmax over the keys
// DIM-NOT: remark
// DIM-NOT: fa4.attention

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
module {
  func.func @attention(%q: tensor<1x2x40x64xf16>, %k: tensor<1x2x40x64xf16>, %v: tensor<1x2x40x64xf16>) -> tensor<1x2x40x64xf16> {
    %cst = arith.constant 0.000000e+00 : f16
    %cst_0 = arith.constant 1.250000e-01 : f16
    %cst_1 = arith.constant 0xFC00 : f16
    %0 = tensor.empty() : tensor<1x2x64x40xf16>
    %transposed = linalg.transpose ins(%k : tensor<1x2x40x64xf16>) outs(%0 : tensor<1x2x64x40xf16>) permutation = [0, 1, 3, 2]
    %collapsed = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x2x40x64xf16> into tensor<2x40x64xf16>
    %collapsed_2 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x40xf16> into tensor<2x64x40xf16>
    %1 = tensor.empty() : tensor<2x40x40xf16>
    %2 = linalg.fill ins(%cst : f16) outs(%1 : tensor<2x40x40xf16>) -> tensor<2x40x40xf16>
    %3 = linalg.batch_matmul ins(%collapsed, %collapsed_2 : tensor<2x40x64xf16>, tensor<2x64x40xf16>) outs(%2 : tensor<2x40x40xf16>) -> tensor<2x40x40xf16>
    %expanded = tensor.expand_shape %3 [[0, 1], [2], [3]] output_shape [1, 2, 40, 40] : tensor<2x40x40xf16> into tensor<1x2x40x40xf16>
    %4 = tensor.empty() : tensor<1x2x40x40xf16>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x40x40xf16>) outs(%4 : tensor<1x2x40x40xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.mulf %in, %cst_0 : f16
      linalg.yield %20 : f16
    } -> tensor<1x2x40x40xf16>
    // softmax(dim=-2): reductions over d2, the queries
    %6 = tensor.empty() : tensor<1x2x1x40xf16>
    %7 = linalg.fill ins(%cst_1 : f16) outs(%6 : tensor<1x2x1x40xf16>) -> tensor<1x2x1x40xf16>
    %8 = linalg.generic {indexing_maps = [#map, #col], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%5 : tensor<1x2x40x40xf16>) outs(%7 : tensor<1x2x1x40xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.maximumf %in, %out : f16
      linalg.yield %20 : f16
    } -> tensor<1x2x1x40xf16>
    %9 = linalg.generic {indexing_maps = [#map, #col, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5, %8 : tensor<1x2x40x40xf16>, tensor<1x2x1x40xf16>) outs(%4 : tensor<1x2x40x40xf16>) {
    ^bb0(%in: f16, %in_3: f16, %out: f16):
      %20 = arith.subf %in, %in_3 : f16
      %21 = math.exp %20 : f16
      linalg.yield %21 : f16
    } -> tensor<1x2x40x40xf16>
    %10 = linalg.fill ins(%cst : f16) outs(%6 : tensor<1x2x1x40xf16>) -> tensor<1x2x1x40xf16>
    %11 = linalg.generic {indexing_maps = [#map, #col], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%9 : tensor<1x2x40x40xf16>) outs(%10 : tensor<1x2x1x40xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.addf %in, %out : f16
      linalg.yield %20 : f16
    } -> tensor<1x2x1x40xf16>
    %12 = linalg.generic {indexing_maps = [#map, #col, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9, %11 : tensor<1x2x40x40xf16>, tensor<1x2x1x40xf16>) outs(%4 : tensor<1x2x40x40xf16>) {
    ^bb0(%in: f16, %in_3: f16, %out: f16):
      %20 = arith.divf %in, %in_3 : f16
      linalg.yield %20 : f16
    } -> tensor<1x2x40x40xf16>
    %collapsed_4 = tensor.collapse_shape %12 [[0, 1], [2], [3]] : tensor<1x2x40x40xf16> into tensor<2x40x40xf16>
    %collapsed_5 = tensor.collapse_shape %v [[0, 1], [2], [3]] : tensor<1x2x40x64xf16> into tensor<2x40x64xf16>
    %13 = tensor.empty() : tensor<2x40x64xf16>
    %14 = linalg.fill ins(%cst : f16) outs(%13 : tensor<2x40x64xf16>) -> tensor<2x40x64xf16>
    %15 = linalg.batch_matmul ins(%collapsed_4, %collapsed_5 : tensor<2x40x40xf16>, tensor<2x40x64xf16>) outs(%14 : tensor<2x40x64xf16>) -> tensor<2x40x64xf16>
    %expanded_6 = tensor.expand_shape %15 [[0, 1], [2], [3]] output_shape [1, 2, 40, 64] : tensor<2x40x64xf16> into tensor<1x2x40x64xf16>
    return %expanded_6 : tensor<1x2x40x64xf16>
  }
}
