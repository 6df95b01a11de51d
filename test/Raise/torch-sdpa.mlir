// Imitates torch-mlir's lowering (torch -> linalg-on-tensors) of
// torch.nn.functional.scaled_dot_product_attention, non-causal, no mask:
//   O = softmax((Q . K^T) * 0.125, dim=-1) . V
// Q [1, 2, 32, 64], K/V [1, 2, 48, 64] (b, h, s, d) f16, result [1, 2, 32, 64]
// f16. K is transposed with linalg.transpose, the matmuls run as 3-D
// linalg.batch_matmul on [b*h, ...] collapsed tensors with f16 accumulators,
// and the softmax is decomposed into max / sub+exp / sum / div generics.
//
// REQUIRES: mlir-runner
// Raising torch-mlir's SDPA lowering: [batch, heads, seq, head_dim] f16, K
// transposed by linalg.transpose, batch_matmul over collapsed batch·heads, the
// scale as a multiply, a decomposed softmax.
// The raised function is one fa4.attention on the arguments, nothing else is
// left,
// it compiles to a cubin without spills, and fa4-sim on the inputs mlir-runner
// used agrees with mlir-runner's evaluation of the original linalg IR; fa4-emu
// runs the cubin against the raised op's own reference.
//
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: fa4.attention %arg0, %arg1, %arg2 -> %{{.*}} {heads_first, scale = 1.250000e-01 : f32} : tensor<1x2x32x64xf16>, tensor<1x2x48x64xf16>, tensor<1x2x48x64xf16> -> tensor<1x2x32x64xf16>{{$}}
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTXAS --input-file %t.cubin.json
// PTXAS: "spill_store_bytes": 0
//
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// The evaluation itself agrees with attention computed in float64 from the same
// files.
// RUN: %reference_attention --dir %t.d --layout bhsd --q-shape 1,2,32,64 --kv-shape 1,2,48,64 --result %t.d/result0.bin
// RUN: fa4-sim %t.mlir --batch 1 --seq-q 32 --seq-k 48 --inputs %t.d --expect %t.d/result0.bin --expect-atol 1e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
//
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 1 --seq-q 32 --seq-k 48 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module {
  func.func @attention(%q: tensor<1x2x32x64xf16>, %k: tensor<1x2x48x64xf16>, %v: tensor<1x2x48x64xf16>) -> tensor<1x2x32x64xf16> {
    %cst = arith.constant 0.000000e+00 : f16
    %cst_0 = arith.constant 1.250000e-01 : f16
    %cst_1 = arith.constant 0xFC00 : f16
    // K^T
    %0 = tensor.empty() : tensor<1x2x64x48xf16>
    %transposed = linalg.transpose ins(%k : tensor<1x2x48x64xf16>) outs(%0 : tensor<1x2x64x48xf16>) permutation = [0, 1, 3, 2]
    // Q . K^T as a batch matmul over b*h
    %collapsed = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x2x32x64xf16> into tensor<2x32x64xf16>
    %collapsed_2 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x48xf16> into tensor<2x64x48xf16>
    %1 = tensor.empty() : tensor<2x32x48xf16>
    %2 = linalg.fill ins(%cst : f16) outs(%1 : tensor<2x32x48xf16>) -> tensor<2x32x48xf16>
    %3 = linalg.batch_matmul ins(%collapsed, %collapsed_2 : tensor<2x32x64xf16>, tensor<2x64x48xf16>) outs(%2 : tensor<2x32x48xf16>) -> tensor<2x32x48xf16>
    %expanded = tensor.expand_shape %3 [[0, 1], [2], [3]] output_shape [1, 2, 32, 48] : tensor<2x32x48xf16> into tensor<1x2x32x48xf16>
    // * scale
    %4 = tensor.empty() : tensor<1x2x32x48xf16>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x32x48xf16>) outs(%4 : tensor<1x2x32x48xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.mulf %in, %cst_0 : f16
      linalg.yield %20 : f16
    } -> tensor<1x2x32x48xf16>
    // softmax(dim=-1): max
    %6 = tensor.empty() : tensor<1x2x32x1xf16>
    %7 = linalg.fill ins(%cst_1 : f16) outs(%6 : tensor<1x2x32x1xf16>) -> tensor<1x2x32x1xf16>
    %8 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%5 : tensor<1x2x32x48xf16>) outs(%7 : tensor<1x2x32x1xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.maximumf %in, %out : f16
      linalg.yield %20 : f16
    } -> tensor<1x2x32x1xf16>
    // exp(x - max)
    %9 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5, %8 : tensor<1x2x32x48xf16>, tensor<1x2x32x1xf16>) outs(%4 : tensor<1x2x32x48xf16>) {
    ^bb0(%in: f16, %in_3: f16, %out: f16):
      %20 = arith.subf %in, %in_3 : f16
      %21 = math.exp %20 : f16
      linalg.yield %21 : f16
    } -> tensor<1x2x32x48xf16>
    // sum
    %10 = linalg.fill ins(%cst : f16) outs(%6 : tensor<1x2x32x1xf16>) -> tensor<1x2x32x1xf16>
    %11 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%9 : tensor<1x2x32x48xf16>) outs(%10 : tensor<1x2x32x1xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.addf %in, %out : f16
      linalg.yield %20 : f16
    } -> tensor<1x2x32x1xf16>
    // divide
    %12 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9, %11 : tensor<1x2x32x48xf16>, tensor<1x2x32x1xf16>) outs(%4 : tensor<1x2x32x48xf16>) {
    ^bb0(%in: f16, %in_3: f16, %out: f16):
      %20 = arith.divf %in, %in_3 : f16
      linalg.yield %20 : f16
    } -> tensor<1x2x32x48xf16>
    // P . V
    %collapsed_4 = tensor.collapse_shape %12 [[0, 1], [2], [3]] : tensor<1x2x32x48xf16> into tensor<2x32x48xf16>
    %collapsed_5 = tensor.collapse_shape %v [[0, 1], [2], [3]] : tensor<1x2x48x64xf16> into tensor<2x48x64xf16>
    %13 = tensor.empty() : tensor<2x32x64xf16>
    %14 = linalg.fill ins(%cst : f16) outs(%13 : tensor<2x32x64xf16>) -> tensor<2x32x64xf16>
    %15 = linalg.batch_matmul ins(%collapsed_4, %collapsed_5 : tensor<2x32x48xf16>, tensor<2x48x64xf16>) outs(%14 : tensor<2x32x64xf16>) -> tensor<2x32x64xf16>
    %expanded_6 = tensor.expand_shape %15 [[0, 1], [2], [3]] output_shape [1, 2, 32, 64] : tensor<2x32x64xf16> into tensor<1x2x32x64xf16>
    return %expanded_6 : tensor<1x2x32x64xf16>
  }
}
