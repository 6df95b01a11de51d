// RUN: fa4-opt %s -fa4-tile | FileCheck %s
// RUN: not fa4-opt %s -fa4-tile=q-tile-rows=192 2>&1 | FileCheck %s --check-prefix=FORWARD-ONLY
// RUN: not fa4-opt %s -fa4-tile=block-n=64 2>&1 | FileCheck %s --check-prefix=FORWARD-ONLY-N
// FORWARD-ONLY: fa4-tile's q-tile-rows=192 shapes the forward's tiles; the backward's are fixed
// FORWARD-ONLY-N: fa4-tile's block-n=64 shapes the forward's tiles

// The backward's tile program: GQA 2 (packed), causal, head dim 64.
// CHECK-LABEL: func.func @attention_backward
// CHECK-SAME: fa4.backward_spec = #fa4.backward_spec<mask = causal, window_left = -1, window_right = -1, scale = 1.250000e-01, softcap = 0.000000e+00, deterministic = false, arguments = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]>
// CHECK: %[[SEQ_Q:.*]] = memref.dim %arg0, %c1
// CHECK: %[[SEQ_K:.*]] = memref.dim %arg1, %c1
// 1. Preprocessing, per (batch, head group, query block): delta, and the
// accumulator cleared.
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[O:.*]] = fa4.load_q_tile %arg3
// CHECK: %[[DO:.*]] = fa4.load_q_tile %arg4
// CHECK: %[[DELTA:.*]] = fa4.row_dot %[[O]], %[[DO]]
// CHECK: fa4.store_lse_tile %[[DELTA]], %arg9
// CHECK: fa4.store_o_tile %{{.*}}, %arg10{{.*}} : tensor<128x64xf32>, memref<?x?x4x64xf32>
// 2. Per (batch, K/V head, K/V block): K and V once, the query blocks that
// see the block, masked at the edges.
// CHECK: %[[K:.*]] = fa4.load_kv_tile %arg1
// CHECK: %[[V:.*]] = fa4.load_kv_tile %arg2
// CHECK: fa4.q_block_range %{{.*}}, %[[SEQ_Q]], %[[SEQ_K]] {block_n = 128 : i64, gqa_ratio = 2 : i64, mask = #fa4.mask<causal>, rows = 128 : i64}
// CHECK: scf.for
// CHECK: fa4.load_q_tile %arg0
// CHECK: fa4.load_q_tile %arg4
// CHECK: fa4.load_row_tile %arg5
// CHECK: fa4.load_row_tile %arg9
// CHECK: %[[S:.*]] = fa4.score_mma
// CHECK: %[[M:.*]] = fa4.mask %[[S]]
// CHECK: %[[P:.*]] = fa4.probs_from_lse %[[M]], %{{.*}} {scale_log2 = 0.180336878 : f32}
// CHECK: %[[P16:.*]] = fa4.convert_tile %[[P]] : tensor<128x128xf32> -> tensor<128x128xf16>
// CHECK: fa4.transposed_mma %[[P16]], %{{.*}}, %{{.*}} : tensor<128x128xf16>, tensor<128x64xf16>, tensor<128x64xf32>
// CHECK: %[[DP:.*]] = fa4.score_mma %{{.*}}, %[[V]]
// CHECK: %[[DS:.*]] = fa4.softmax_grad %[[P]], %[[DP]]
// CHECK: %[[DS16:.*]] = fa4.convert_tile %[[DS]]
// CHECK: fa4.transposed_mma %[[DS16]]
// CHECK: %[[PART:.*]] = fa4.value_mma %[[DS16]], %[[K]]
// CHECK: fa4.accumulate_dq %[[PART]], %arg10
// CHECK: } {fa4.masked}
// The whole blocks: no mask.
// CHECK: scf.for
// CHECK-NOT: fa4.mask
// CHECK: fa4.accumulate_dq
// CHECK: }
// CHECK-NOT: fa4.masked
// CHECK: scf.for
// CHECK: fa4.mask
// CHECK: } {fa4.masked}
// dK carries the scale, dV does not.
// CHECK: fa4.convert_tile %{{.*}}#0 {scale = 1.250000e-01 : f32} : tensor<128x64xf32> -> tensor<128x64xf16>
// CHECK: fa4.convert_tile %{{.*}}#1 : tensor<128x64xf32> -> tensor<128x64xf16>
// CHECK: fa4.store_kv_tile {{.*}}, %arg7
// CHECK: fa4.store_kv_tile {{.*}}, %arg8
// 3. dQ = accumulator · scale.
// CHECK: %[[ACC:.*]] = fa4.load_q_tile %arg10{{.*}} -> tensor<128x64xf32>
// CHECK: %[[DQ:.*]] = fa4.convert_tile %[[ACC]] {scale = 1.250000e-01 : f32}
// CHECK: fa4.store_o_tile %[[DQ]], %arg6
// CHECK-NOT: fa4.attention_backward
func.func @attention_backward(
    %q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>,
    %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>,
    %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>,
    %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) {mask = #fa4.mask<causal>}
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>,
        memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32>
      -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>,
         memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}
