// NEGATIVE: the scale is not a compile-time constant.
// Imitates IREE-style linalg-on-tensors attention (as in iree-softmax.mlir)
// exported with the softmax scale as a runtime scalar argument:
//   O = softmax((Q . K^T) * scale, dim=3) as f16 . V, f32 accumulation
// Q [1, 2, 32, 64], K/V [1, 2, 48, 64] (b, h, s, d) f16, scale f32 (%arg3),
// result [1, 2, 32, 64] f16. fa4.attention takes its scale as an attribute,
// so a scale only known at run time (a block argument of the function,
// captured by the scaling generic's body) cannot be raised.
//
// A front-end-style input the pass must refuse: it keeps its linalg IR
// and gets one remark saying why.
// RUN: fa4-opt --fa4-raise-attention --mlir-print-op-on-diagnostic=false %s 2>&1 | FileCheck %s --check-prefix=SCALE
// SCALE: remark: not raised to fa4.attention: the scale of Q·Kᵀ is not a compile-time constant (it is argument #3)
// SCALE-NOT: remark
// SCALE-NOT: fa4.attention

#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#p = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @attention(%arg0: tensor<1x2x32x64xf16>, %arg1: tensor<1x2x48x64xf16>, %arg2: tensor<1x2x48x64xf16>, %arg3: f32) -> tensor<1x2x32x64xf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<1x2x32x48xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x2x32x48xf32>) -> tensor<1x2x32x48xf32>
    %2 = linalg.generic {indexing_maps = [#q, #k, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<1x2x32x64xf16>, tensor<1x2x48x64xf16>) outs(%1 : tensor<1x2x32x48xf32>) {
    ^bb0(%in: f16, %in_1: f16, %out: f32):
      %10 = arith.extf %in : f16 to f32
      %11 = arith.extf %in_1 : f16 to f32
      %12 = arith.mulf %10, %11 : f32
      %13 = arith.addf %out, %12 : f32
      linalg.yield %13 : f32
    } -> tensor<1x2x32x48xf32>
    // * scale, a function argument
    %3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2 : tensor<1x2x32x48xf32>) outs(%0 : tensor<1x2x32x48xf32>) {
    ^bb0(%in: f32, %out: f32):
      %10 = arith.mulf %in, %arg3 : f32
      linalg.yield %10 : f32
    } -> tensor<1x2x32x48xf32>
    %4 = linalg.softmax dimension(3) ins(%3 : tensor<1x2x32x48xf32>) outs(%0 : tensor<1x2x32x48xf32>) -> tensor<1x2x32x48xf32>
    %5 = tensor.empty() : tensor<1x2x32x48xf16>
    %6 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%4 : tensor<1x2x32x48xf32>) outs(%5 : tensor<1x2x32x48xf16>) {
    ^bb0(%in: f32, %out: f16):
      %10 = arith.truncf %in : f32 to f16
      linalg.yield %10 : f16
    } -> tensor<1x2x32x48xf16>
    %7 = tensor.empty() : tensor<1x2x32x64xf32>
    %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<1x2x32x64xf32>) -> tensor<1x2x32x64xf32>
    %9 = linalg.generic {indexing_maps = [#p, #v, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%6, %arg2 : tensor<1x2x32x48xf16>, tensor<1x2x48x64xf16>) outs(%8 : tensor<1x2x32x64xf32>) {
    ^bb0(%in: f16, %in_1: f16, %out: f32):
      %10 = arith.extf %in : f16 to f32
      %11 = arith.extf %in_1 : f16 to f32
      %12 = arith.mulf %10, %11 : f32
      %13 = arith.addf %out, %12 : f32
      linalg.yield %13 : f32
    } -> tensor<1x2x32x64xf32>
    %10 = tensor.empty() : tensor<1x2x32x64xf16>
    %11 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9 : tensor<1x2x32x64xf32>) outs(%10 : tensor<1x2x32x64xf16>) {
    ^bb0(%in: f32, %out: f16):
      %12 = arith.truncf %in : f32 to f16
      linalg.yield %12 : f16
    } -> tensor<1x2x32x64xf16>
    return %11 : tensor<1x2x32x64xf16>
  }
}
