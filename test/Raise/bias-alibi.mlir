// Imitates an ALiBi-style model lowered to linalg-on-tensors (IREE-style
// f32 scores): an additive bias passed in as an argument, shared by the
// batch (the add's indexing map drops the batch dimension):
//   S = (Q . K^T) * 0.125 + bias[h, i, j]  (f32),
//   O = softmax(S, dim=3) as f16 . V, f32 accumulation.
// Q [2, 2, 32, 64], K/V [2, 2, 40, 64] (b, h, s, d) f16, bias [2, 32, 40]
// (h, sq, sk) f32, result [2, 2, 32, 64] f16. The matmuls are 4-D
// linalg.generic contractions and the softmax is decomposed in f32.
//
// REQUIRES: mlir-runner
// Raising an additive f32 bias argument [heads, seq_q, seq_k] broadcast over
// the batch: a score_mod reading it as an extra.
// The raised function is one fa4.attention on the arguments, nothing else is
// left,
// it compiles to a cubin without spills, and fa4-sim on the inputs mlir-runner
// used agrees with mlir-runner's evaluation of the original linalg IR; fa4-emu
// runs the cubin against the raised op's own reference.
//
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: %[[BIAS:.*]] = bufferization.to_buffer %arg3 read_only : tensor<2x32x40xf32> to memref<2x32x40xf32>
// CHECK: fa4.attention %arg0, %arg1, %arg2 -> %{{.*}} extras(%[[BIAS]] : memref<2x32x40xf32>) {heads_first, scale = 1.250000e-01 : f32} : {{.*}} score_mod {
// CHECK-NEXT: ^bb0(%[[S:.*]]: f32, %[[B:.*]]: index, %[[H:.*]]: index, %[[Q:.*]]: index, %[[K:.*]]: index, %[[T:.*]]: memref<2x32x40xf32>):
// CHECK-NEXT: %[[X:.*]] = memref.load %[[T]][%[[H]], %[[Q]], %[[K]]]
// CHECK-NEXT: %[[R:.*]] = arith.addf %[[S]], %[[X]] : f32
// CHECK-NEXT: fa4.yield %[[R]] : f32
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTXAS --input-file %t.cubin.json
// PTXAS: "spill_store_bytes": 0
//
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// The evaluation itself agrees with attention computed in float64 from the same
// files.
// RUN: %reference_attention --dir %t.d --layout bhsd --q-shape 2,2,32,64 --kv-shape 2,2,40,64 --bias %t.d/arg3.bin --bias-shape 2,32,40 --result %t.d/result0.bin
// RUN: fa4-sim %t.mlir --batch 2 --seq-q 32 --seq-k 40 --inputs %t.d --expect %t.d/result0.bin --expect-atol 1e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
//
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 2 --seq-q 32 --seq-k 40 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#bias = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module {
  func.func @attention(%arg0: tensor<2x2x32x64xf16>, %arg1: tensor<2x2x40x64xf16>, %arg2: tensor<2x2x40x64xf16>, %arg3: tensor<2x32x40xf32>) -> tensor<2x2x32x64xf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.250000e-01 : f32
    %cst_1 = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<2x2x32x40xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x2x32x40xf32>) -> tensor<2x2x32x40xf32>
    %2 = linalg.generic {indexing_maps = [#q, #k, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x2x32x64xf16>, tensor<2x2x40x64xf16>) outs(%1 : tensor<2x2x32x40xf32>) {
    ^bb0(%in: f16, %in_2: f16, %out: f32):
      %20 = arith.extf %in : f16 to f32
      %21 = arith.extf %in_2 : f16 to f32
      %22 = arith.mulf %20, %21 : f32
      %23 = arith.addf %out, %22 : f32
      linalg.yield %23 : f32
    } -> tensor<2x2x32x40xf32>
    // * scale
    %3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2 : tensor<2x2x32x40xf32>) outs(%0 : tensor<2x2x32x40xf32>) {
    ^bb0(%in: f32, %out: f32):
      %20 = arith.mulf %in, %cst_0 : f32
      linalg.yield %20 : f32
    } -> tensor<2x2x32x40xf32>
    // + bias, broadcast over the batch
    %4 = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3, %arg3 : tensor<2x2x32x40xf32>, tensor<2x32x40xf32>) outs(%0 : tensor<2x2x32x40xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %20 = arith.addf %in, %in_2 : f32
      linalg.yield %20 : f32
    } -> tensor<2x2x32x40xf32>
    // softmax(dim=3)
    %5 = tensor.empty() : tensor<2x2x32xf32>
    %6 = linalg.fill ins(%cst_1 : f32) outs(%5 : tensor<2x2x32xf32>) -> tensor<2x2x32xf32>
    %7 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%4 : tensor<2x2x32x40xf32>) outs(%6 : tensor<2x2x32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %20 = arith.maximumf %in, %out : f32
      linalg.yield %20 : f32
    } -> tensor<2x2x32xf32>
    %8 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%4, %7 : tensor<2x2x32x40xf32>, tensor<2x2x32xf32>) outs(%0 : tensor<2x2x32x40xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %20 = arith.subf %in, %in_2 : f32
      %21 = math.exp %20 : f32
      linalg.yield %21 : f32
    } -> tensor<2x2x32x40xf32>
    %9 = linalg.fill ins(%cst : f32) outs(%5 : tensor<2x2x32xf32>) -> tensor<2x2x32xf32>
    %10 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%8 : tensor<2x2x32x40xf32>) outs(%9 : tensor<2x2x32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %20 = arith.addf %in, %out : f32
      linalg.yield %20 : f32
    } -> tensor<2x2x32xf32>
    // divide and round P to f16
    %11 = tensor.empty() : tensor<2x2x32x40xf16>
    %12 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%8, %10 : tensor<2x2x32x40xf32>, tensor<2x2x32xf32>) outs(%11 : tensor<2x2x32x40xf16>) {
    ^bb0(%in: f32, %in_2: f32, %out: f16):
      %20 = arith.divf %in, %in_2 : f32
      %21 = arith.truncf %20 : f32 to f16
      linalg.yield %21 : f16
    } -> tensor<2x2x32x40xf16>
    // P . V
    %13 = tensor.empty() : tensor<2x2x32x64xf32>
    %14 = linalg.fill ins(%cst : f32) outs(%13 : tensor<2x2x32x64xf32>) -> tensor<2x2x32x64xf32>
    %15 = linalg.generic {indexing_maps = [#q, #v, #s], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%12, %arg2 : tensor<2x2x32x40xf16>, tensor<2x2x40x64xf16>) outs(%14 : tensor<2x2x32x64xf32>) {
    ^bb0(%in: f16, %in_2: f16, %out: f32):
      %20 = arith.extf %in : f16 to f32
      %21 = arith.extf %in_2 : f16 to f32
      %22 = arith.mulf %20, %21 : f32
      %23 = arith.addf %out, %22 : f32
      linalg.yield %23 : f32
    } -> tensor<2x2x32x64xf32>
    %16 = tensor.empty() : tensor<2x2x32x64xf16>
    %17 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%15 : tensor<2x2x32x64xf32>) outs(%16 : tensor<2x2x32x64xf16>) {
    ^bb0(%in: f32, %out: f16):
      %20 = arith.truncf %in : f32 to f16
      linalg.yield %20 : f16
    } -> tensor<2x2x32x64xf16>
    return %17 : tensor<2x2x32x64xf16>
  }
}
