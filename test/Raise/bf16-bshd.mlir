// Imitates torch-mlir's lowering of a hand-written PyTorch attention in
// bf16 on [b, s, h, d] tensors that normalizes after P . V (as
// memory-efficient reference implementations do):
//   q, k, v = (t.transpose(1, 2) for t in (q, k, v))
//   s = (q @ k.transpose(-2, -1)) * 0.125            # f32 accumulation
//   e = torch.exp(s.float() - s.float().amax(-1, keepdim=True))
//   o = (e.bfloat16() @ v).float() / e.sum(-1, keepdim=True)
//   return o.bfloat16().transpose(1, 2)
// i.e. O = (sum_j exp(s_j - m) V_j) / (sum_j exp(s_j - m)), non-causal.
// Q [1, 24, 4, 64], K/V [1, 72, 4, 64] (b, s, h, d) bf16, result
// [1, 24, 4, 64] (b, s, h, d) bf16. The matmuls are linalg.batch_matmul on
// [b*h, ...] with f32 accumulators truncated to bf16 (torch-mlir's default
// accumulator type for bf16), the max and sum are keepdim reductions
// (indexing map (d0, d1, d2, 0)), and the division is the last generic.
//
// REQUIRES: mlir-runner
// Raising torch-mlir style on [batch, seq, heads, head_dim] bf16 operands
// transposed to heads-first and back, with the softmax's division after P·V.
// The raised function is one fa4.attention on the arguments, nothing else is
// left,
// it compiles to a cubin without spills, and fa4-sim on the inputs mlir-runner
// used agrees with mlir-runner's evaluation of the original linalg IR; fa4-emu
// runs the cubin against the raised op's own reference.
//
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: fa4.attention %arg0, %arg1, %arg2 -> %{{.*}} {scale = 1.250000e-01 : f32} : tensor<1x24x4x64xbf16>, tensor<1x72x4x64xbf16>, tensor<1x72x4x64xbf16> -> tensor<1x24x4x64xbf16>{{$}}
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTXAS --input-file %t.cubin.json
// PTXAS: "spill_store_bytes": 0
//
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// RUN: fa4-sim %t.mlir --batch 1 --seq-q 24 --seq-k 72 --inputs %t.d --expect %t.d/result0.bin --expect-atol 2e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
//
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 1 --seq-q 24 --seq-k 72 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#keep = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @attention(%arg0: tensor<1x24x4x64xbf16>, %arg1: tensor<1x72x4x64xbf16>, %arg2: tensor<1x72x4x64xbf16>) -> tensor<1x24x4x64xbf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.250000e-01 : bf16
    %cst_1 = arith.constant 0xFF800000 : f32
    // transpose(1, 2)
    %0 = tensor.empty() : tensor<1x4x24x64xbf16>
    %transposed = linalg.transpose ins(%arg0 : tensor<1x24x4x64xbf16>) outs(%0 : tensor<1x4x24x64xbf16>) permutation = [0, 2, 1, 3]
    %1 = tensor.empty() : tensor<1x4x72x64xbf16>
    %transposed_2 = linalg.transpose ins(%arg1 : tensor<1x72x4x64xbf16>) outs(%1 : tensor<1x4x72x64xbf16>) permutation = [0, 2, 1, 3]
    %transposed_3 = linalg.transpose ins(%arg2 : tensor<1x72x4x64xbf16>) outs(%1 : tensor<1x4x72x64xbf16>) permutation = [0, 2, 1, 3]
    // k.transpose(-2, -1)
    %2 = tensor.empty() : tensor<1x4x64x72xbf16>
    %transposed_4 = linalg.transpose ins(%transposed_2 : tensor<1x4x72x64xbf16>) outs(%2 : tensor<1x4x64x72xbf16>) permutation = [0, 1, 3, 2]
    // q @ k^T, f32 accumulator truncated to bf16
    %collapsed = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x4x24x64xbf16> into tensor<4x24x64xbf16>
    %collapsed_5 = tensor.collapse_shape %transposed_4 [[0, 1], [2], [3]] : tensor<1x4x64x72xbf16> into tensor<4x64x72xbf16>
    %3 = tensor.empty() : tensor<4x24x72xf32>
    %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<4x24x72xf32>) -> tensor<4x24x72xf32>
    %5 = linalg.batch_matmul ins(%collapsed, %collapsed_5 : tensor<4x24x64xbf16>, tensor<4x64x72xbf16>) outs(%4 : tensor<4x24x72xf32>) -> tensor<4x24x72xf32>
    %6 = tensor.empty() : tensor<4x24x72xbf16>
    %7 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5 : tensor<4x24x72xf32>) outs(%6 : tensor<4x24x72xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %30 = arith.truncf %in : f32 to bf16
      linalg.yield %30 : bf16
    } -> tensor<4x24x72xbf16>
    %expanded = tensor.expand_shape %7 [[0, 1], [2], [3]] output_shape [1, 4, 24, 72] : tensor<4x24x72xbf16> into tensor<1x4x24x72xbf16>
    // * 0.125, then .float()
    %8 = tensor.empty() : tensor<1x4x24x72xf32>
    %9 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x4x24x72xbf16>) outs(%8 : tensor<1x4x24x72xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %30 = arith.mulf %in, %cst_0 : bf16
      %31 = arith.extf %30 : bf16 to f32
      linalg.yield %31 : f32
    } -> tensor<1x4x24x72xf32>
    // amax(-1, keepdim=True)
    %10 = tensor.empty() : tensor<1x4x24x1xf32>
    %11 = linalg.fill ins(%cst_1 : f32) outs(%10 : tensor<1x4x24x1xf32>) -> tensor<1x4x24x1xf32>
    %12 = linalg.generic {indexing_maps = [#id, #keep], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%9 : tensor<1x4x24x72xf32>) outs(%11 : tensor<1x4x24x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %30 = arith.maximumf %in, %out : f32
      linalg.yield %30 : f32
    } -> tensor<1x4x24x1xf32>
    // exp(s - m)
    %13 = linalg.generic {indexing_maps = [#id, #keep, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9, %12 : tensor<1x4x24x72xf32>, tensor<1x4x24x1xf32>) outs(%8 : tensor<1x4x24x72xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %30 = arith.subf %in, %in_6 : f32
      %31 = math.exp %30 : f32
      linalg.yield %31 : f32
    } -> tensor<1x4x24x72xf32>
    // sum(-1, keepdim=True)
    %14 = linalg.fill ins(%cst : f32) outs(%10 : tensor<1x4x24x1xf32>) -> tensor<1x4x24x1xf32>
    %15 = linalg.generic {indexing_maps = [#id, #keep], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%13 : tensor<1x4x24x72xf32>) outs(%14 : tensor<1x4x24x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %30 = arith.addf %in, %out : f32
      linalg.yield %30 : f32
    } -> tensor<1x4x24x1xf32>
    // e.bfloat16() @ v, f32 accumulator truncated to bf16
    %16 = tensor.empty() : tensor<1x4x24x72xbf16>
    %17 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%13 : tensor<1x4x24x72xf32>) outs(%16 : tensor<1x4x24x72xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %30 = arith.truncf %in : f32 to bf16
      linalg.yield %30 : bf16
    } -> tensor<1x4x24x72xbf16>
    %collapsed_7 = tensor.collapse_shape %17 [[0, 1], [2], [3]] : tensor<1x4x24x72xbf16> into tensor<4x24x72xbf16>
    %collapsed_8 = tensor.collapse_shape %transposed_3 [[0, 1], [2], [3]] : tensor<1x4x72x64xbf16> into tensor<4x72x64xbf16>
    %18 = tensor.empty() : tensor<4x24x64xf32>
    %19 = linalg.fill ins(%cst : f32) outs(%18 : tensor<4x24x64xf32>) -> tensor<4x24x64xf32>
    %20 = linalg.batch_matmul ins(%collapsed_7, %collapsed_8 : tensor<4x24x72xbf16>, tensor<4x72x64xbf16>) outs(%19 : tensor<4x24x64xf32>) -> tensor<4x24x64xf32>
    %21 = tensor.empty() : tensor<4x24x64xbf16>
    %22 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%20 : tensor<4x24x64xf32>) outs(%21 : tensor<4x24x64xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %30 = arith.truncf %in : f32 to bf16
      linalg.yield %30 : bf16
    } -> tensor<4x24x64xbf16>
    %expanded_9 = tensor.expand_shape %22 [[0, 1], [2], [3]] output_shape [1, 4, 24, 64] : tensor<4x24x64xbf16> into tensor<1x4x24x64xbf16>
    // .float() / l, .bfloat16()
    %23 = linalg.generic {indexing_maps = [#id, #keep, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_9, %15 : tensor<1x4x24x64xbf16>, tensor<1x4x24x1xf32>) outs(%0 : tensor<1x4x24x64xbf16>) {
    ^bb0(%in: bf16, %in_6: f32, %out: bf16):
      %30 = arith.extf %in : bf16 to f32
      %31 = arith.divf %30, %in_6 : f32
      %32 = arith.truncf %31 : f32 to bf16
      linalg.yield %32 : bf16
    } -> tensor<1x4x24x64xbf16>
    // transpose(1, 2)
    %24 = tensor.empty() : tensor<1x24x4x64xbf16>
    %transposed_10 = linalg.transpose ins(%23 : tensor<1x4x24x64xbf16>) outs(%24 : tensor<1x24x4x64xbf16>) permutation = [0, 2, 1, 3]
    return %transposed_10 : tensor<1x24x4x64xbf16>
  }
}
