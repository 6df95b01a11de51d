// Imitates IREE's linalg-on-tensors form of attention (as its global
// optimization sees it before forming iree_linalg_ext.attention): the two
// matmuls are 4-D linalg.generic contractions with f32 accumulation
// (arith.extf in the body; Q . K^T reads K through its indexing map, no
// transpose), the scale is a separate generic, and the softmax is one
// linalg.softmax on f32:
//   O = truncf(softmax((Q . K^T) * 0.125, dim=3) as f16 . V, f32 accumulation)
// Q [2, 2, 24, 64], K/V [2, 2, 80, 64] (b, h, s, d) f16, result [2, 2, 24, 64]
// f16.
//
// REQUIRES: mlir-runner
// Raising IREE's style: 4-D linalg.generic contractions accumulating in f32,
// linalg.softmax.
// The raised function is one fa4.attention on the arguments, nothing else is
// left,
// it compiles to a cubin without spills, and fa4-sim on the inputs mlir-runner
// used agrees with mlir-runner's evaluation of the original linalg IR; fa4-emu
// runs the cubin against the raised op's own reference.
//
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: fa4.attention %arg0, %arg1, %arg2 -> %{{.*}} {heads_first, scale = 1.250000e-01 : f32} : tensor<2x2x24x64xf16>, tensor<2x2x80x64xf16>, tensor<2x2x80x64xf16> -> tensor<2x2x24x64xf16>{{$}}
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTXAS --input-file %t.cubin.json
// PTXAS: "spill_store_bytes": 0
//
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// RUN: fa4-sim %t.mlir --batch 2 --seq-q 24 --seq-k 80 --inputs %t.d --expect %t.d/result0.bin --expect-atol 1e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
//
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 2 --seq-q 24 --seq-k 80 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#p = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @attention(%arg0: tensor<2x2x24x64xf16>, %arg1: tensor<2x2x80x64xf16>, %arg2: tensor<2x2x80x64xf16>) -> tensor<2x2x24x64xf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.250000e-01 : f32
    // S = Q . K^T, f32
    %0 = tensor.empty() : tensor<2x2x24x80xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x2x24x80xf32>) -> tensor<2x2x24x80xf32>
    %2 = linalg.generic {indexing_maps = [#q, #k, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x2x24x64xf16>, tensor<2x2x80x64xf16>) outs(%1 : tensor<2x2x24x80xf32>) {
    ^bb0(%in: f16, %in_1: f16, %out: f32):
      %10 = arith.extf %in : f16 to f32
      %11 = arith.extf %in_1 : f16 to f32
      %12 = arith.mulf %10, %11 : f32
      %13 = arith.addf %out, %12 : f32
      linalg.yield %13 : f32
    } -> tensor<2x2x24x80xf32>
    // * scale
    %3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2 : tensor<2x2x24x80xf32>) outs(%0 : tensor<2x2x24x80xf32>) {
    ^bb0(%in: f32, %out: f32):
      %10 = arith.mulf %in, %cst_0 : f32
      linalg.yield %10 : f32
    } -> tensor<2x2x24x80xf32>
    // softmax over the keys
    %4 = linalg.softmax dimension(3) ins(%3 : tensor<2x2x24x80xf32>) outs(%0 : tensor<2x2x24x80xf32>) -> tensor<2x2x24x80xf32>
    // P as f16
    %5 = tensor.empty() : tensor<2x2x24x80xf16>
    %6 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%4 : tensor<2x2x24x80xf32>) outs(%5 : tensor<2x2x24x80xf16>) {
    ^bb0(%in: f32, %out: f16):
      %10 = arith.truncf %in : f32 to f16
      linalg.yield %10 : f16
    } -> tensor<2x2x24x80xf16>
    // O = P . V, f32
    %7 = tensor.empty() : tensor<2x2x24x64xf32>
    %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<2x2x24x64xf32>) -> tensor<2x2x24x64xf32>
    %9 = linalg.generic {indexing_maps = [#p, #v, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%6, %arg2 : tensor<2x2x24x80xf16>, tensor<2x2x80x64xf16>) outs(%8 : tensor<2x2x24x64xf32>) {
    ^bb0(%in: f16, %in_1: f16, %out: f32):
      %10 = arith.extf %in : f16 to f32
      %11 = arith.extf %in_1 : f16 to f32
      %12 = arith.mulf %10, %11 : f32
      %13 = arith.addf %out, %12 : f32
      linalg.yield %13 : f32
    } -> tensor<2x2x24x64xf32>
    %10 = tensor.empty() : tensor<2x2x24x64xf16>
    %11 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9 : tensor<2x2x24x64xf32>) outs(%10 : tensor<2x2x24x64xf16>) {
    ^bb0(%in: f32, %out: f16):
      %12 = arith.truncf %in : f32 to f16
      linalg.yield %12 : f16
    } -> tensor<2x2x24x64xf16>
    return %11 : tensor<2x2x24x64xf16>
  }
}
