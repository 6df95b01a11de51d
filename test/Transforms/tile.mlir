// RUN: fa4-opt %s -split-input-file -fa4-tile -verify-diagnostics | FileCheck %s
// RUN: fa4-opt %s -split-input-file -fa4-tile=rescale-threshold=0 -verify-diagnostics | FileCheck %s --check-prefix=ALWAYS

// The seed's configuration: GQA ratio 4, head dim 128, causal, LSE.
// CHECK-LABEL: func.func @seed
// CHECK-SAME: fa4.spec = #fa4.spec<mask = causal, window_left = -1, window_right = -1, scale = 0.0883883461, softcap = 0.000000e+00, lse = true, arguments = [0, 1, 2, 3, 4]>
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK-DAG: %[[C128:.*]] = arith.constant 128 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[NEG_INF:.*]] = arith.constant dense<0xFF800000> : tensor<128xf32>
// CHECK: %[[SEQ_Q:.*]] = memref.dim %arg0, %c1
// CHECK: %[[SEQ_K:.*]] = memref.dim %arg1, %c1
// 256 packed rows per task: ceil(seq_q * 4 / 256) m_blocks.
// CHECK: %[[ROWS:.*]] = arith.muli %[[SEQ_Q]], %[[C4]]
// CHECK: %[[M_BLOCKS:.*]] = arith.ceildivui %[[ROWS]], %[[C256]]
// CHECK: scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// CHECK: scf.for %[[H:.*]] = %{{.*}} to %[[C8]] step
// CHECK: scf.for %[[M:.*]] = %{{.*}} to %[[M_BLOCKS]] step
// CHECK: %[[ROW0:.*]] = arith.muli %[[M]], %[[C256]]
// CHECK: %[[Q0:.*]] = fa4.load_q_tile %arg0[%[[B]], %[[H]], %[[ROW0]]] {gqa_ratio = 4 : i64} : memref<?x?x32x128xf16> -> tensor<128x128xf16>
// CHECK: %[[ROW1:.*]] = arith.addi %[[ROW0]], %[[C128]]
// CHECK: %[[Q1:.*]] = fa4.load_q_tile %arg0[%[[B]], %[[H]], %[[ROW1]]] {gqa_ratio = 4 : i64}
// CHECK: %[[BEGIN:.*]], %[[FULL_BEGIN:.*]], %[[FULL_END:.*]], %[[END:.*]] = fa4.kv_block_range %[[ROW0]], %[[SEQ_Q]], %[[SEQ_K]] {block_n = 128 : i64, gqa_ratio = 4 : i64, mask = #fa4.mask<causal>, rows = 256 : i64}
//
// First loop: the masked blocks at the high end [full_end, end), last to first.
// CHECK: %[[N1:.*]] = arith.subi %[[END]], %[[FULL_END]]
// CHECK: %[[LAST1:.*]] = arith.subi %[[END]], %[[C1]]
// CHECK: %[[R1:.*]]:6 = scf.for %[[I:.*]] = %{{.*}} to %[[N1]] step %[[C1]] iter_args(%{{.*}} = %[[NEG_INF]], %{{.*}}, %{{.*}}, %{{.*}} = %[[NEG_INF]], %{{.*}}, %{{.*}})
// CHECK: %[[BLOCK:.*]] = arith.subi %[[LAST1]], %[[I]]
// CHECK: %[[COL:.*]] = arith.muli %[[BLOCK]], %[[C128]]
// CHECK: %[[K:.*]] = fa4.load_kv_tile %arg1[%[[B]], %[[H]], %[[COL]]]
// CHECK: %[[V:.*]] = fa4.load_kv_tile %arg2[%[[B]], %[[H]], %[[COL]]]
// Q tile 0, then Q tile 1, against the same K and V tiles.
// CHECK: %[[S0:.*]] = fa4.score_mma %[[Q0]], %[[K]]
// CHECK: %[[MASKED0:.*]] = fa4.mask %[[S0]], %[[ROW0]], %[[COL]], %[[SEQ_Q]], %[[SEQ_K]] {gqa_ratio = 4 : i64, mask = #fa4.mask<causal>}
// CHECK: %[[P0:.*]], %{{.*}}, %{{.*}}, %[[ALPHA0:.*]] = fa4.online_softmax %[[MASKED0]], {{.*}} {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.127517432 : f32}
// ALWAYS: fa4.online_softmax {{.*}} {rescale_threshold = 0.000000e+00 : f32, scale_log2 = 0.127517432 : f32}
// CHECK: %[[ACC0:.*]] = fa4.correction %{{.*}}, %[[ALPHA0]]
// CHECK: fa4.value_mma %[[P0]], %[[V]], %[[ACC0]]
// CHECK: %[[S1:.*]] = fa4.score_mma %[[Q1]], %[[K]]
// CHECK: fa4.mask %[[S1]], %[[ROW1]], %[[COL]]
// CHECK: fa4.value_mma %{{.*}}, %[[V]], %{{.*}}
// CHECK: scf.yield
// CHECK-NEXT: } {fa4.masked}
//
// Second loop: the fully visible blocks [full_begin, full_end), no mask work.
// CHECK: %[[N2:.*]] = arith.subi %[[FULL_END]], %[[FULL_BEGIN]]
// CHECK: %[[LAST2:.*]] = arith.subi %[[FULL_END]], %[[C1]]
// CHECK: %[[R2:.*]]:6 = scf.for %[[J:.*]] = %{{.*}} to %[[N2]] step %[[C1]] iter_args(%{{.*}} = %[[R1]]#0, %{{.*}} = %[[R1]]#1, %{{.*}} = %[[R1]]#2, %{{.*}} = %[[R1]]#3, %{{.*}} = %[[R1]]#4, %{{.*}} = %[[R1]]#5)
// CHECK: arith.subi %[[LAST2]], %[[J]]
// CHECK-NOT: fa4.mask
// CHECK: scf.yield
// CHECK-NEXT: }{{$}}
//
// Third loop: the masked blocks at the low end [begin, full_begin).
// CHECK: %[[N3:.*]] = arith.subi %[[FULL_BEGIN]], %[[BEGIN]]
// CHECK: %[[R3:.*]]:6 = scf.for %{{.*}} = %{{.*}} to %[[N3]] step %[[C1]] iter_args(%{{.*}} = %[[R2]]#0
// CHECK: fa4.mask
// CHECK: } {fa4.masked}
//
// Deferred normalization, then the stores of O and the LSE for each Q tile.
// CHECK: %[[OUT0:.*]], %[[LSE0:.*]] = fa4.normalize %[[R3]]#2, %[[R3]]#0, %[[R3]]#1 {scale_log2 = 0.127517432 : f32}
// CHECK: fa4.store_o_tile %[[OUT0]], %arg3[%[[B]], %[[H]], %[[ROW0]]] {gqa_ratio = 4 : i64}
// CHECK: fa4.store_lse_tile %[[LSE0]], %arg4[%[[B]], %[[H]], %[[ROW0]]] {gqa_ratio = 4 : i64}
// CHECK: %[[OUT1:.*]], %[[LSE1:.*]] = fa4.normalize %[[R3]]#5, %[[R3]]#3, %[[R3]]#4
// CHECK: fa4.store_o_tile %[[OUT1]], %arg3[%[[B]], %[[H]], %[[ROW1]]]
// CHECK: fa4.store_lse_tile %[[LSE1]], %arg4[%[[B]], %[[H]], %[[ROW1]]]
// CHECK-NOT: fa4.attention
func.func @seed(%q: memref<?x?x32x128xf16>, %k: memref<?x?x8x128xf16>,
                %v: memref<?x?x8x128xf16>, %o: memref<?x?x32x128xf16>,
                %lse: memref<?x32x?xf32>) {
  fa4.attention %q, %k, %v -> %o, lse %lse {mask = #fa4.mask<causal>}
      : memref<?x?x32x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16>
      -> memref<?x?x32x128xf16>, memref<?x32x?xf32>
  return
}

// -----

// No GQA, head dim 64, bf16, sliding window, no LSE: the window bounds reach
// the block range and the masks; 1/sqrt(64) folds to 0.125 * log2(e).
// CHECK-LABEL: func.func @window_bf16
// CHECK: arith.constant 8 : index
// CHECK: fa4.load_q_tile %arg0[{{.*}}] {gqa_ratio = 1 : i64} : memref<?x?x8x64xbf16> -> tensor<128x64xbf16>
// CHECK: fa4.kv_block_range {{.*}} {block_n = 128 : i64, gqa_ratio = 1 : i64, mask = #fa4.mask<window>, rows = 256 : i64, window_left = 200 : i64, window_right = 10 : i64}
// CHECK: fa4.mask {{.*}} {gqa_ratio = 1 : i64, mask = #fa4.mask<window>, window_left = 200 : i64, window_right = 10 : i64} : tensor<128x128xf32>
// CHECK: fa4.online_softmax {{.*}} {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xbf16>
// CHECK: fa4.value_mma {{.*}} : tensor<128x128xbf16>, tensor<128x64xbf16>, tensor<128x64xf32>
// CHECK: fa4.store_o_tile
// CHECK-NOT: fa4.store_lse_tile
// CHECK: return
func.func @window_bf16(%q: memref<?x?x8x64xbf16>, %k: memref<?x?x8x64xbf16>,
                       %v: memref<?x?x8x64xbf16>, %o: memref<?x?x8x64xbf16>) {
  fa4.attention %q, %k, %v -> %o
      {mask = #fa4.mask<window>, window_left = 200, window_right = 10}
      : memref<?x?x8x64xbf16>, memref<?x?x8x64xbf16>, memref<?x?x8x64xbf16>
      -> memref<?x?x8x64xbf16>
  return
}

// -----

// A softcap applies the scale inside the cap; the softmax then uses log2(e).
// CHECK-LABEL: func.func @softcap
// CHECK: %[[S:.*]] = fa4.score_mma
// CHECK: %[[C:.*]] = fa4.softcap %[[S]] {cap = 3.000000e+01 : f32, scale = 5.000000e-01 : f32}
// CHECK: fa4.mask %[[C]]
// CHECK: fa4.online_softmax {{.*}} scale_log2 = 1.44269502 : f32
func.func @softcap(%q: memref<1x?x16x96xf16>, %k: memref<1x?x1x96xf16>,
                   %v: memref<1x?x1x96xf16>, %o: memref<1x?x16x96xf16>) {
  fa4.attention %q, %k, %v -> %o {scale = 0.5 : f32, softcap = 30.0 : f32}
      : memref<1x?x16x96xf16>, memref<1x?x1x96xf16>, memref<1x?x1x96xf16>
      -> memref<1x?x16x96xf16>
  return
}

// -----

func.func @two_kernels(%q: memref<?x?x8x64xf16>, %o: memref<?x?x8x64xf16>) {
  fa4.attention %q, %q, %q -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>
      -> memref<?x?x8x64xf16>
  // expected-error @+1 {{a function holds one attention kernel, found 2 fa4.attention ops in @two_kernels}}
  fa4.attention %q, %q, %q -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>
      -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @local_buffer(%q: memref<?x?x8x64xf16>, %n: index) {
  %o = memref.alloc(%n, %n) : memref<?x?x8x64xf16>
  // expected-error @+1 {{operand #3 must be an argument of @local_buffer (the kernel's memrefs are its parameters)}}
  fa4.attention %q, %q, %q -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>
      -> memref<?x?x8x64xf16>
  return
}

// -----

// Q, K and V one argument: the launch binds three tensors.
func.func @one_argument(%x: memref<?x?x8x64xf16>, %o: memref<?x?x8x64xf16>) {
  // expected-error @+1 {{operands #0 and #1 are the same argument of @one_argument: Q, K, V, O (and the LSE) are bound as distinct tensors at launch, so each must be an argument of its own}}
  fa4.attention %x, %x, %x -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>
      -> memref<?x?x8x64xf16>
  return
}

// -----

// A value the kernel does not compute, returned.
func.func @returns_constant(%q: memref<?x?x8x64xf16>, %k: memref<?x?x8x64xf16>,
                            %v: memref<?x?x8x64xf16>,
                            %o: memref<?x?x8x64xf16>) -> index {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>
      -> memref<?x?x8x64xf16>
  %c = arith.constant 7 : index
  // expected-error @+1 {{result #0 of @returns_constant is not one of its arguments: a kernel's function returns nothing or the destinations it was given}}
  return %c : index
}

// -----

// A score_mod that is exactly a softcap, c·tanh(s·(1/c)), takes the softcap
// attribute's path: fa4.softcap on the scores, no region.
// CHECK-LABEL: func.func @softcap_written_as_score_mod
// CHECK-SAME: softcap = 2.000000e+01,
// CHECK: fa4.softcap %{{.*}} {cap = 2.000000e+01 : f32, scale = 1.250000e-01 : f32}
// CHECK-NOT: fa4.score_mod
// CHECK: return
func.func @softcap_written_as_score_mod(%q: memref<?x?x8x64xf16>, %k: memref<?x?x8x64xf16>,
                                        %v: memref<?x?x8x64xf16>, %o: memref<?x?x8x64xf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %inverse = arith.constant 0.05 : f32
    %cap = arith.constant 20.0 : f32
    %ratio = arith.mulf %inverse, %s : f32
    %squashed = math.tanh %ratio : f32
    %capped = arith.mulf %squashed, %cap : f32
    fa4.yield %capped : f32
  }
  return
}

// -----

// Anything more than the softcap stays a region.
// CHECK-LABEL: func.func @softcap_plus_bias
// CHECK-SAME: softcap = 0.000000e+00,
// CHECK-NOT: fa4.softcap
// CHECK: fa4.score_mod
func.func @softcap_plus_bias(%q: memref<?x?x8x64xf16>, %k: memref<?x?x8x64xf16>,
                             %v: memref<?x?x8x64xf16>, %o: memref<?x?x8x64xf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 20.0 : f32
    %one = arith.constant 1.0 : f32
    %ratio = arith.divf %s, %cap : f32
    %squashed = math.tanh %ratio : f32
    %capped = arith.mulf %squashed, %cap : f32
    %biased = arith.addf %capped, %one : f32
    fa4.yield %biased : f32
  }
  return
}

// -----

// A subnormal cap has no finite reciprocal: s·(1/c) is not the softcap's
// math (0·inf at s = 0), so the region stays.
// CHECK-LABEL: func.func @subnormal_cap
// CHECK-SAME: softcap = 0.000000e+00,
// CHECK: fa4.score_mod
func.func @subnormal_cap(%q: memref<?x?x8x64xf16>, %k: memref<?x?x8x64xf16>,
                         %v: memref<?x?x8x64xf16>, %o: memref<?x?x8x64xf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %inverse = arith.constant 0x7F800000 : f32
    %cap = arith.constant 1.0e-39 : f32
    %ratio = arith.mulf %s, %inverse : f32
    %squashed = math.tanh %ratio : f32
    %capped = arith.mulf %cap, %squashed : f32
    fa4.yield %capped : f32
  }
  return
}
