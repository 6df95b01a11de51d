// Imitates StableHLO lowered to linalg (stablehlo-legalize-to-linalg with
// primitive ops) of JAX grouped-query attention, non-causal:
//   k = jnp.repeat(k, 2, axis=2); v = jnp.repeat(v, 2, axis=2)
//   s = einsum('bhqd,bhkd->bhqk', q, k) / 8.0;  O = softmax(s, -1) . v
// Q [1, 32, 4, 64] (b, s, hq, d), K/V [1, 56, 2, 64] (b, s, hkv, d) f16,
// result [1, 32, 4, 64] (b, s, hq, d) f16. Query head h uses key/value head
// h / 2. The repeat is a broadcast to [b, s, hkv, 2, d] collapsed to
// [b, s, hq, d]: for K in its canonical form (linalg.broadcast +
// tensor.collapse_shape); for V as lowered before canonicalization
// (jnp.repeat's expand_dims is a tensor.expand_shape whose unit dimension the
// broadcast lowering collapses away again). The heads are moved next to the
// batch with linalg.transpose, the dot_generals are linalg.generic
// contractions in f16, the scale is an arith.divf by a splat constant tensor,
// and the softmax is decomposed (linalg.reduce max / sub+exp / linalg.reduce
// sum / div), as jax.nn.softmax computes it.
//
// REQUIRES: mlir-runner
// Raising StableHLO→linalg with grouped-query attention: [batch, seq, heads,
// head_dim] operands, K and V repeated over the query heads by expand /
// broadcast / collapse, the scale as a division.
// The raised function is one fa4.attention on the arguments, nothing else is
// left,
// it compiles to a cubin without spills, and fa4-sim on the inputs mlir-runner
// used agrees with mlir-runner's evaluation of the original linalg IR; fa4-emu
// runs the cubin against the raised op's own reference.
//
// RUN: fa4-opt --fa4-raise-attention %s -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK: fa4.attention %arg0, %arg1, %arg2 -> %{{.*}} {scale = 1.250000e-01 : f32} : tensor<1x32x4x64xf16>, tensor<1x56x2x64xf16>, tensor<1x56x2x64xf16> -> tensor<1x32x4x64xf16>{{$}}
// CHECK-NOT: linalg.
//
// RUN: fa4c %t.mlir -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTXAS --input-file %t.cubin.json
// PTXAS: "spill_store_bytes": 0
//
// RUN: rm -rf %t.d && %evaluate_linalg %s --func attention --out-dir %t.d
// The evaluation itself agrees with attention computed in float64 from the same
// files.
// RUN: %reference_attention --dir %t.d --layout bshd --q-shape 1,32,4,64 --kv-shape 1,56,2,64 --result %t.d/result0.bin
// RUN: fa4-sim %t.mlir --batch 1 --seq-q 32 --seq-k 56 --inputs %t.d --expect %t.d/result0.bin --expect-atol 1e-2 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
//
// RUN: fa4-emu %t.cubin.json --entry %t.mlir --batch 1 --seq-q 32 --seq-k 56 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#o = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module {
  func.func @attention(%arg0: tensor<1x32x4x64xf16>, %arg1: tensor<1x56x2x64xf16>, %arg2: tensor<1x56x2x64xf16>) -> tensor<1x32x4x64xf16> {
    %cst = arith.constant dense<8.000000e+00> : tensor<1x4x32x56xf16>
    %cst_0 = arith.constant 0xFC00 : f16
    %cst_1 = arith.constant 0.000000e+00 : f16
    // jnp.repeat(k, 2, axis=2)
    %0 = tensor.empty() : tensor<1x56x2x2x64xf16>
    %broadcasted = linalg.broadcast ins(%arg1 : tensor<1x56x2x64xf16>) outs(%0 : tensor<1x56x2x2x64xf16>) dimensions = [3]
    %collapsed = tensor.collapse_shape %broadcasted [[0], [1], [2, 3], [4]] : tensor<1x56x2x2x64xf16> into tensor<1x56x4x64xf16>
    // jnp.repeat(v, 2, axis=2)
    %expanded = tensor.expand_shape %arg2 [[0], [1], [2, 3], [4]] output_shape [1, 56, 2, 1, 64] : tensor<1x56x2x64xf16> into tensor<1x56x2x1x64xf16>
    %collapsed_2 = tensor.collapse_shape %expanded [[0], [1], [2, 3], [4]] : tensor<1x56x2x1x64xf16> into tensor<1x56x2x64xf16>
    %broadcasted_3 = linalg.broadcast ins(%collapsed_2 : tensor<1x56x2x64xf16>) outs(%0 : tensor<1x56x2x2x64xf16>) dimensions = [3]
    %collapsed_4 = tensor.collapse_shape %broadcasted_3 [[0], [1], [2, 3], [4]] : tensor<1x56x2x2x64xf16> into tensor<1x56x4x64xf16>
    // bshd -> bhsd
    %1 = tensor.empty() : tensor<1x4x32x64xf16>
    %transposed = linalg.transpose ins(%arg0 : tensor<1x32x4x64xf16>) outs(%1 : tensor<1x4x32x64xf16>) permutation = [0, 2, 1, 3]
    %2 = tensor.empty() : tensor<1x4x56x64xf16>
    %transposed_5 = linalg.transpose ins(%collapsed : tensor<1x56x4x64xf16>) outs(%2 : tensor<1x4x56x64xf16>) permutation = [0, 2, 1, 3]
    %transposed_6 = linalg.transpose ins(%collapsed_4 : tensor<1x56x4x64xf16>) outs(%2 : tensor<1x4x56x64xf16>) permutation = [0, 2, 1, 3]
    // einsum('bhqd,bhkd->bhqk')
    %3 = tensor.empty() : tensor<1x4x32x56xf16>
    %4 = linalg.fill ins(%cst_1 : f16) outs(%3 : tensor<1x4x32x56xf16>) -> tensor<1x4x32x56xf16>
    %5 = linalg.generic {indexing_maps = [#q, #k, #o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%transposed, %transposed_5 : tensor<1x4x32x64xf16>, tensor<1x4x56x64xf16>) outs(%4 : tensor<1x4x32x56xf16>) {
    ^bb0(%in: f16, %in_7: f16, %out: f16):
      %20 = arith.mulf %in, %in_7 : f16
      %21 = arith.addf %out, %20 : f16
      linalg.yield %21 : f16
    } -> tensor<1x4x32x56xf16>
    // / 8.0
    %6 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5, %cst : tensor<1x4x32x56xf16>, tensor<1x4x32x56xf16>) outs(%3 : tensor<1x4x32x56xf16>) {
    ^bb0(%in: f16, %in_7: f16, %out: f16):
      %20 = arith.divf %in, %in_7 : f16
      linalg.yield %20 : f16
    } -> tensor<1x4x32x56xf16>
    // jax.nn.softmax(axis=-1)
    %7 = tensor.empty() : tensor<1x4x32xf16>
    %8 = linalg.fill ins(%cst_0 : f16) outs(%7 : tensor<1x4x32xf16>) -> tensor<1x4x32xf16>
    %reduced = linalg.reduce ins(%6 : tensor<1x4x32x56xf16>) outs(%8 : tensor<1x4x32xf16>) dimensions = [3]
      (%in: f16, %init: f16) {
        %20 = arith.maximumf %in, %init : f16
        linalg.yield %20 : f16
      }
    %9 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%6, %reduced : tensor<1x4x32x56xf16>, tensor<1x4x32xf16>) outs(%3 : tensor<1x4x32x56xf16>) {
    ^bb0(%in: f16, %in_7: f16, %out: f16):
      %20 = arith.subf %in, %in_7 : f16
      %21 = math.exp %20 : f16
      linalg.yield %21 : f16
    } -> tensor<1x4x32x56xf16>
    %10 = linalg.fill ins(%cst_1 : f16) outs(%7 : tensor<1x4x32xf16>) -> tensor<1x4x32xf16>
    %reduced_8 = linalg.reduce ins(%9 : tensor<1x4x32x56xf16>) outs(%10 : tensor<1x4x32xf16>) dimensions = [3]
      (%in: f16, %init: f16) {
        %20 = arith.addf %in, %init : f16
        linalg.yield %20 : f16
      }
    %11 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9, %reduced_8 : tensor<1x4x32x56xf16>, tensor<1x4x32xf16>) outs(%3 : tensor<1x4x32x56xf16>) {
    ^bb0(%in: f16, %in_7: f16, %out: f16):
      %20 = arith.divf %in, %in_7 : f16
      linalg.yield %20 : f16
    } -> tensor<1x4x32x56xf16>
    // einsum('bhqk,bhkd->bhqd')
    %12 = linalg.fill ins(%cst_1 : f16) outs(%1 : tensor<1x4x32x64xf16>) -> tensor<1x4x32x64xf16>
    %13 = linalg.generic {indexing_maps = [#q, #v, #o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%11, %transposed_6 : tensor<1x4x32x56xf16>, tensor<1x4x56x64xf16>) outs(%12 : tensor<1x4x32x64xf16>) {
    ^bb0(%in: f16, %in_7: f16, %out: f16):
      %20 = arith.mulf %in, %in_7 : f16
      %21 = arith.addf %out, %20 : f16
      linalg.yield %21 : f16
    } -> tensor<1x4x32x64xf16>
    // bhsd -> bshd
    %14 = tensor.empty() : tensor<1x32x4x64xf16>
    %transposed_9 = linalg.transpose ins(%13 : tensor<1x4x32x64xf16>) outs(%14 : tensor<1x32x4x64xf16>) permutation = [0, 2, 1, 3]
    return %transposed_9 : tensor<1x32x4x64xf16>
  }
}
