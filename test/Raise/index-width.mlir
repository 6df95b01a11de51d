// A mask whose index arithmetic needs linalg.index's 64 bits (otherwise
// causal-iota.mlir): key_pos > query_pos + 2^32 hides nothing in 64 bits
// (wrapped to 32 bits, 2^32 is 0 and it would be causal), and the unsigned
// remainder of a negative difference by 7 differs between 2^64 and 2^32.
// The raise moves the arithmetic into the mask_mod unchanged; fa4-sim's
// reference evaluates it in 64 bits and agrees with mlir-runner's
// evaluation of the original, and the kernel computes it in 64 bits and
// agrees with that reference (issue 24, item 3).
//
// REQUIRES: mlir-runner
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: mask_mod {
// CHECK: arith.constant 4294967296 : index
// CHECK: arith.remui %{{.*}}, %{{.*}} : index
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// RUN: fa4-sim %t.mlir --batch 1 --seq-q 48 --seq-k 48 --inputs %t.d --expect %t.d/result0.bin --expect-atol 1e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 1 --seq-q 48 --seq-k 48 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "ok":true

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
    // masked_fill(key_pos > query_pos + 2^32 | (key_pos - query_pos) % 7 == 3, -inf),
    // the remainder unsigned, of a 64-bit difference
    %4 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3 : tensor<1x2x48x48xf32>) outs(%0 : tensor<1x2x48x48xf32>) {
    ^bb0(%in: f32, %out: f32):
      %20 = linalg.index 2 : index
      %21 = linalg.index 3 : index
      %far = arith.constant 4294967296 : index
      %reach = arith.addi %20, %far : index
      %beyond = arith.cmpi ugt, %21, %reach : index
      %d = arith.subi %21, %20 : index
      %c7 = arith.constant 7 : index
      %c3 = arith.constant 3 : index
      %r = arith.remui %d, %c7 : index
      %dropped = arith.cmpi eq, %r, %c3 : index
      %22 = arith.ori %beyond, %dropped : i1
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
