// Attention over collapsed [batch·heads, seq, head_dim] tensors end to end,
// as torch-mlir's SDPA decomposition before its reshapes are folded (and
// ONNX-derived graphs) write it: the arguments and the result rank 3,
// linalg.batch_matmul for Q·Kᵀ (K transposed by linalg.transpose) and P·V,
// the scale a multiply, the softmax decomposed into max / sub+exp / sum /
// div generics over the last dimension.
// Q [4, 32, 64], K/V [4, 48, 64] f16 (4 = batch 2 x 2 heads), result
// [4, 32, 64] f16.
//
// REQUIRES: mlir-runner
// The raised function holds fa4.attention on [batch·heads, seq, 1, head_dim]
// views of the arguments (one head per batch entry) and O collapsed back;
// nothing else is left. It compiles (the views become the kernel's
// parameters, no copy), and fa4-sim on the inputs mlir-runner used agrees
// with mlir-runner's evaluation of the original; fa4-emu runs the cubin.
//
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: %[[Q:.*]] = tensor.expand_shape %arg0 {{\[\[}}0], [1], [2, 3]] output_shape [4, 32, 1, 64] : tensor<4x32x64xf16> into tensor<4x32x1x64xf16>
// CHECK: %[[K:.*]] = tensor.expand_shape %arg1
// CHECK: %[[V:.*]] = tensor.expand_shape %arg2
// CHECK: %[[O:.*]] = fa4.attention %[[Q]], %[[K]], %[[V]] -> %{{.*}} {scale = 1.250000e-01 : f32} : tensor<4x32x1x64xf16>, tensor<4x48x1x64xf16>, tensor<4x48x1x64xf16> -> tensor<4x32x1x64xf16>{{$}}
// CHECK: %[[C:.*]] = tensor.collapse_shape %[[O]] {{\[\[}}0], [1], [2, 3]] : tensor<4x32x1x64xf16> into tensor<4x32x64xf16>
// CHECK: return %[[C]]
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir --stop-after=bufferize | FileCheck %s --check-prefix=PARAMS
// PARAMS: func.func @attention(%arg0: memref<4x32x1x64xf16>, %arg1: memref<4x48x1x64xf16>, %arg2: memref<4x48x1x64xf16>, %arg3: memref<4x32x1x64xf16>) {
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTXAS --input-file %t.cubin.json
// PTXAS: "spill_store_bytes": 0
//
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// RUN: %reference_attention --dir %t.d --layout bhsd --q-shape 1,4,32,64 --kv-shape 1,4,48,64 --result %t.d/result0.bin
// RUN: fa4-sim %t.mlir --batch 4 --seq-q 32 --seq-k 48 --inputs %t.d --expect %t.d/result0.bin --expect-atol 1e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
//
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 4 --seq-q 32 --seq-k 48 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
module {
  func.func @attention(%q: tensor<4x32x64xf16>, %k: tensor<4x48x64xf16>, %v: tensor<4x48x64xf16>) -> tensor<4x32x64xf16> {
    %cst = arith.constant 0.000000e+00 : f16
    %cst_0 = arith.constant 1.250000e-01 : f16
    %cst_1 = arith.constant 0xFC00 : f16
    %0 = tensor.empty() : tensor<4x64x48xf16>
    %kt = linalg.transpose ins(%k : tensor<4x48x64xf16>) outs(%0 : tensor<4x64x48xf16>) permutation = [0, 2, 1]
    %1 = tensor.empty() : tensor<4x32x48xf16>
    %2 = linalg.fill ins(%cst : f16) outs(%1 : tensor<4x32x48xf16>) -> tensor<4x32x48xf16>
    %3 = linalg.batch_matmul ins(%q, %kt : tensor<4x32x64xf16>, tensor<4x64x48xf16>) outs(%2 : tensor<4x32x48xf16>) -> tensor<4x32x48xf16>
    %4 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<4x32x48xf16>) outs(%1 : tensor<4x32x48xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.mulf %in, %cst_0 : f16
      linalg.yield %20 : f16
    } -> tensor<4x32x48xf16>
    %5 = tensor.empty() : tensor<4x32x1xf16>
    %6 = linalg.fill ins(%cst_1 : f16) outs(%5 : tensor<4x32x1xf16>) -> tensor<4x32x1xf16>
    %7 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%4 : tensor<4x32x48xf16>) outs(%6 : tensor<4x32x1xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.maximumf %in, %out : f16
      linalg.yield %20 : f16
    } -> tensor<4x32x1xf16>
    %8 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%4, %7 : tensor<4x32x48xf16>, tensor<4x32x1xf16>) outs(%1 : tensor<4x32x48xf16>) {
    ^bb0(%in: f16, %in_3: f16, %out: f16):
      %20 = arith.subf %in, %in_3 : f16
      %21 = math.exp %20 : f16
      linalg.yield %21 : f16
    } -> tensor<4x32x48xf16>
    %9 = linalg.fill ins(%cst : f16) outs(%5 : tensor<4x32x1xf16>) -> tensor<4x32x1xf16>
    %10 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%8 : tensor<4x32x48xf16>) outs(%9 : tensor<4x32x1xf16>) {
    ^bb0(%in: f16, %out: f16):
      %20 = arith.addf %in, %out : f16
      linalg.yield %20 : f16
    } -> tensor<4x32x1xf16>
    %11 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%8, %10 : tensor<4x32x48xf16>, tensor<4x32x1xf16>) outs(%1 : tensor<4x32x48xf16>) {
    ^bb0(%in: f16, %in_3: f16, %out: f16):
      %20 = arith.divf %in, %in_3 : f16
      linalg.yield %20 : f16
    } -> tensor<4x32x48xf16>
    %12 = tensor.empty() : tensor<4x32x64xf16>
    %13 = linalg.fill ins(%cst : f16) outs(%12 : tensor<4x32x64xf16>) -> tensor<4x32x64xf16>
    %14 = linalg.batch_matmul ins(%11, %v : tensor<4x32x48xf16>, tensor<4x48x64xf16>) outs(%13 : tensor<4x32x64xf16>) -> tensor<4x32x64xf16>
    return %14 : tensor<4x32x64xf16>
  }
}
