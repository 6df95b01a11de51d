// RUN: fa4-opt %s | fa4-opt | FileCheck %s
// RUN: fa4-opt %s --mlir-print-op-generic | fa4-opt | FileCheck %s

// CHECK-LABEL: func.func @entry
// CHECK: fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %{{.*}}, lse %{{.*}} {mask = #fa4.mask<causal>, scale = 1.250000e-01 : f32, softcap = 3.000000e+01 : f32} : memref<?x?x32x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x32x128xf16>, memref<?x32x?xf32>
func.func @entry(%q: memref<?x?x32x128xf16>, %k: memref<?x?x8x128xf16>,
                 %v: memref<?x?x8x128xf16>, %o: memref<?x?x32x128xf16>,
                 %lse: memref<?x32x?xf32>) {
  fa4.attention %q, %k, %v -> %o, lse %lse
      {mask = #fa4.mask<causal>, scale = 0.125 : f32, softcap = 30.0 : f32}
      : memref<?x?x32x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16>
      -> memref<?x?x32x128xf16>, memref<?x32x?xf32>
  return
}

// CHECK-LABEL: func.func @entry_window_bf16
// CHECK: fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %{{.*}} {mask = #fa4.mask<window>, window_left = 256 : i64, window_right = 0 : i64} : memref<2x?x8x64xbf16>, memref<2x?x8x64xbf16>, memref<2x?x8x64xbf16> -> memref<2x?x8x64xbf16>
func.func @entry_window_bf16(%q: memref<2x?x8x64xbf16>, %k: memref<2x?x8x64xbf16>,
                             %v: memref<2x?x8x64xbf16>, %o: memref<2x?x8x64xbf16>) {
  fa4.attention %q, %k, %v -> %o
      {mask = #fa4.mask<window>, window_left = 256, window_right = 0}
      : memref<2x?x8x64xbf16>, memref<2x?x8x64xbf16>, memref<2x?x8x64xbf16>
      -> memref<2x?x8x64xbf16>
  return
}

// V and O with a head dim of their own (DeepSeek-V3's (192, 128)).
// CHECK-LABEL: func.func @entry_v_head_dim
// CHECK: fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %{{.*}} {mask = #fa4.mask<causal>} : memref<?x?x16x192xbf16>, memref<?x?x16x192xbf16>, memref<?x?x16x128xbf16> -> memref<?x?x16x128xbf16>
func.func @entry_v_head_dim(%q: memref<?x?x16x192xbf16>, %k: memref<?x?x16x192xbf16>,
                            %v: memref<?x?x16x128xbf16>, %o: memref<?x?x16x128xbf16>) {
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<causal>}
      : memref<?x?x16x192xbf16>, memref<?x?x16x192xbf16>, memref<?x?x16x128xbf16>
      -> memref<?x?x16x128xbf16>
  return
}

// [batch, heads, seq, head_dim] storage seen as [batch, seq, heads,
// head_dim]: any strides TMA expresses.
// CHECK-LABEL: func.func @entry_strided
// CHECK: fa4.attention {{.*}} : memref<?x?x32x128xf16, strided<[?, 128, ?, 1]>>, memref<?x?x8x128xf16, strided<[?, 128, ?, 1], offset: ?>>
func.func @entry_strided(%q: memref<?x?x32x128xf16, strided<[?, 128, ?, 1]>>,
                         %k: memref<?x?x8x128xf16, strided<[?, 128, ?, 1], offset: ?>>,
                         %v: memref<?x?x8x128xf16, strided<[?, 128, ?, 1]>>,
                         %o: memref<?x?x32x128xf16, strided<[?, ?, 128, 1]>>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x32x128xf16, strided<[?, 128, ?, 1]>>,
        memref<?x?x8x128xf16, strided<[?, 128, ?, 1], offset: ?>>,
        memref<?x?x8x128xf16, strided<[?, 128, ?, 1]>>
      -> memref<?x?x32x128xf16, strided<[?, ?, 128, 1]>>
  return
}

// On tensors: destination style, returning O and the LSE.
// A batch of one may have any stride (here 0): it is never stepped along.
// CHECK-LABEL: func.func @entry_single_batch
func.func @entry_single_batch(%q: memref<1x?x8x64xf16, strided<[0, 512, 64, 1]>>) {
  fa4.attention %q, %q, %q -> %q
      : memref<1x?x8x64xf16, strided<[0, 512, 64, 1]>>, memref<1x?x8x64xf16, strided<[0, 512, 64, 1]>>,
        memref<1x?x8x64xf16, strided<[0, 512, 64, 1]>> -> memref<1x?x8x64xf16, strided<[0, 512, 64, 1]>>
  return
}

// CHECK-LABEL: func.func @entry_tensors
// CHECK: %{{.*}}:2 = fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %{{.*}}, lse %{{.*}} {mask = #fa4.mask<causal>} : tensor<?x?x32x128xf16>, tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16> -> tensor<?x?x32x128xf16>, tensor<?x32x?xf32>
// CHECK: fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %{{.*}} : tensor<2x64x8x64xbf16>, tensor<2x64x8x64xbf16>, tensor<2x64x8x64xbf16> -> tensor<2x64x8x64xbf16>
func.func @entry_tensors(%q: tensor<?x?x32x128xf16>, %k: tensor<?x?x8x128xf16>,
                         %v: tensor<?x?x8x128xf16>, %o: tensor<?x?x32x128xf16>,
                         %lse: tensor<?x32x?xf32>, %x: tensor<2x64x8x64xbf16>)
    -> (tensor<?x?x32x128xf16>, tensor<?x32x?xf32>, tensor<2x64x8x64xbf16>) {
  %out, %l = fa4.attention %q, %k, %v -> %o, lse %lse {mask = #fa4.mask<causal>}
      : tensor<?x?x32x128xf16>, tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16>
      -> tensor<?x?x32x128xf16>, tensor<?x32x?xf32>
  %y = fa4.attention %x, %x, %x -> %x
      : tensor<2x64x8x64xbf16>, tensor<2x64x8x64xbf16>, tensor<2x64x8x64xbf16>
      -> tensor<2x64x8x64xbf16>
  return %out, %l, %y : tensor<?x?x32x128xf16>, tensor<?x32x?xf32>, tensor<2x64x8x64xbf16>
}

// CHECK-LABEL: func.func @tile_program
func.func @tile_program(%q: memref<?x?x32x128xf16>, %k: memref<?x?x8x128xf16>,
                        %o: memref<?x?x32x128xf16>, %lse: memref<?x32x?xf32>,
                        %b: index, %h: index, %row: index, %col: index,
                        %seq_q: index, %seq_k: index,
                        %m: tensor<128xf32>, %l: tensor<128xf32>,
                        %acc: tensor<128x128xf32>) {
  // CHECK: fa4.kv_block_range %{{.*}}, %{{.*}}, %{{.*}} {block_n = 128 : i64, gqa_ratio = 4 : i64, mask = #fa4.mask<window>, rows = 256 : i64, window_left = 128 : i64, window_right = 0 : i64}
  %begin, %full_begin, %full_end, %end = fa4.kv_block_range %row, %seq_q, %seq_k
      {rows = 256 : i64, block_n = 128 : i64, gqa_ratio = 4 : i64,
       mask = #fa4.mask<window>, window_left = 128, window_right = 0}
  // CHECK: fa4.load_q_tile %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] {gqa_ratio = 4 : i64} : memref<?x?x32x128xf16> -> tensor<128x128xf16>
  %qt = fa4.load_q_tile %q[%b, %h, %row] {gqa_ratio = 4 : i64}
      : memref<?x?x32x128xf16> -> tensor<128x128xf16>
  // CHECK: fa4.load_kv_tile %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : memref<?x?x8x128xf16> -> tensor<128x128xf16>
  %kt = fa4.load_kv_tile %k[%b, %h, %col]
      : memref<?x?x8x128xf16> -> tensor<128x128xf16>
  // CHECK: fa4.score_mma %{{.*}}, %{{.*}} : tensor<128x128xf16>, tensor<128x128xf16> -> tensor<128x128xf32>
  %s = fa4.score_mma %qt, %kt
      : tensor<128x128xf16>, tensor<128x128xf16> -> tensor<128x128xf32>
  // CHECK: fa4.softcap %{{.*}} {cap = 3.000000e+01 : f32, scale = 1.250000e-01 : f32} : tensor<128x128xf32>
  %c = fa4.softcap %s {cap = 30.0 : f32, scale = 0.125 : f32} : tensor<128x128xf32>
  // CHECK: fa4.mask %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {gqa_ratio = 4 : i64, mask = #fa4.mask<causal>} : tensor<128x128xf32>
  %masked = fa4.mask %c, %row, %col, %seq_q, %seq_k
      {gqa_ratio = 4 : i64, mask = #fa4.mask<causal>} : tensor<128x128xf32>
  // CHECK: fa4.online_softmax %{{.*}}, %{{.*}}, %{{.*}} {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 1.44269502 : f32} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf16>
  %p, %m1, %l1, %alpha = fa4.online_softmax %masked, %m, %l
      {scale_log2 = 1.442695 : f32, rescale_threshold = 8.0 : f32}
      : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf16>
  // CHECK: fa4.correction %{{.*}}, %{{.*}} : tensor<128x128xf32>, tensor<128xf32>
  %acc1 = fa4.correction %acc, %alpha : tensor<128x128xf32>, tensor<128xf32>
  // CHECK: fa4.value_mma %{{.*}}, %{{.*}}, %{{.*}} : tensor<128x128xf16>, tensor<128x128xf16>, tensor<128x128xf32>
  %acc2 = fa4.value_mma %p, %kt, %acc1
      : tensor<128x128xf16>, tensor<128x128xf16>, tensor<128x128xf32>
  // CHECK: fa4.normalize %{{.*}}, %{{.*}}, %{{.*}} {scale_log2 = 1.44269502 : f32} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf16>
  %out, %lse_tile = fa4.normalize %acc2, %m1, %l1 {scale_log2 = 1.442695 : f32}
      : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf16>
  // CHECK: fa4.store_o_tile %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] {gqa_ratio = 4 : i64} : tensor<128x128xf16>, memref<?x?x32x128xf16>
  fa4.store_o_tile %out, %o[%b, %h, %row] {gqa_ratio = 4 : i64}
      : tensor<128x128xf16>, memref<?x?x32x128xf16>
  // CHECK: fa4.store_lse_tile %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] {gqa_ratio = 4 : i64} : tensor<128xf32>, memref<?x32x?xf32>
  fa4.store_lse_tile %lse_tile, %lse[%b, %h, %row] {gqa_ratio = 4 : i64}
      : tensor<128xf32>, memref<?x32x?xf32>
  return
}

// score_mod and mask_mod regions, with an extra each reads.
// CHECK-LABEL: func.func @mods
// CHECK: fa4.attention %{{.*}}, %{{.*}}, %{{.*}} -> %{{.*}} extras(%{{.*}}, %{{.*}} : memref<32xf32>, memref<?x?xi32>) {mask = #fa4.mask<causal>}
// CHECK: score_mod {
// CHECK: memref.load %{{.*}}[%{{.*}}] : memref<32xf32>
// CHECK: fa4.yield %{{.*}} : f32
// CHECK: } mask_mod {
// CHECK: fa4.yield %{{.*}} : i1
func.func @mods(%q: memref<?x?x32x128xf16>, %k: memref<?x?x8x128xf16>,
                %v: memref<?x?x8x128xf16>, %o: memref<?x?x32x128xf16>,
                %slopes: memref<32xf32>, %docs: memref<?x?xi32>) {
  fa4.attention %q, %k, %v -> %o extras(%slopes, %docs : memref<32xf32>, memref<?x?xi32>)
      {mask = #fa4.mask<causal>}
      : memref<?x?x32x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16>
      -> memref<?x?x32x128xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %table: memref<32xf32>, %ids: memref<?x?xi32>):
    %slope = memref.load %table[%h] : memref<32xf32>
    %d = arith.subi %j, %i : index
    %di = arith.index_cast %d : index to i64
    %df = arith.sitofp %di : i64 to f32
    %bias = arith.mulf %slope, %df : f32
    %r = arith.addf %s, %bias : f32
    fa4.yield %r : f32
  } mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index,
       %table: memref<32xf32>, %ids: memref<?x?xi32>):
    %qd = memref.load %ids[%b, %i] : memref<?x?xi32>
    %kd = memref.load %ids[%b, %j] : memref<?x?xi32>
    %same = arith.cmpi eq, %qd, %kd : i32
    fa4.yield %same : i1
  }
  return
}

// The level-B forms: fa4.score_mod, and fa4.mask and fa4.kv_block_range
// carrying a mask_mod.
// CHECK-LABEL: func.func @level_b_mods
// CHECK: fa4.kv_block_range %{{.*}}, %{{.*}}, %{{.*}} {block_n = 128 : i64, gqa_ratio = 1 : i64, mask = #fa4.mask<none>, rows = 256 : i64} mask_mod {
// CHECK: fa4.score_mod %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} extras(%{{.*}} : memref<8xf32>) {gqa_ratio = 1 : i64, scale = 1.250000e-01 : f32} : tensor<128x128xf32> {
// CHECK: fa4.mask %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} at %{{.*}}, %{{.*}} {gqa_ratio = 1 : i64, mask = #fa4.mask<none>} : tensor<128x128xf32> mask_mod {
func.func @level_b_mods(%s: tensor<128x128xf32>, %b: index, %h: index,
                        %row: index, %col: index, %seq_q: index, %seq_k: index,
                        %table: memref<8xf32>) {
  %r:4 = fa4.kv_block_range %row, %seq_q, %seq_k
      {rows = 256 : i64, block_n = 128 : i64, gqa_ratio = 1 : i64,
       mask = #fa4.mask<none>} mask_mod {
  ^bb0(%bi: index, %qh: index, %i: index, %j: index):
    %c = arith.cmpi ule, %j, %i : index
    fa4.yield %c : i1
  }
  %m = fa4.score_mod %s, %b, %h, %row, %col, %seq_q, %seq_k
      extras(%table : memref<8xf32>) {gqa_ratio = 1 : i64, scale = 0.125 : f32}
      : tensor<128x128xf32> {
  ^bb0(%x: f32, %bi: index, %qh: index, %i: index, %j: index,
       %t: memref<8xf32>):
    %slope = memref.load %t[%qh] : memref<8xf32>
    %y = arith.mulf %x, %slope : f32
    fa4.yield %y : f32
  }
  %masked = fa4.mask %m, %row, %col, %seq_q, %seq_k at %b, %h
      {gqa_ratio = 1 : i64, mask = #fa4.mask<none>} : tensor<128x128xf32>
      mask_mod {
  ^bb0(%bi: index, %qh: index, %i: index, %j: index):
    %c = arith.cmpi ule, %j, %i : index
    fa4.yield %c : i1
  }
  return
}

// FP8's pieces of the tile program: the descale factors and the scale's
// run-time factor, the shifted e4m3 probabilities.
// CHECK-LABEL: func.func @fp8_tile_program
func.func @fp8_tile_program(%qd_table: memref<?x8xf32>, %b: index, %h: index,
                            %s: tensor<128x128xf32>, %v: tensor<128x128xf8E4M3FN>,
                            %m: tensor<128xf32>, %l: tensor<128xf32>,
                            %acc: tensor<128x128xf32>) {
  // CHECK: fa4.load_descale %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x8xf32>
  %qd = fa4.load_descale %qd_table[%b, %h] : memref<?x8xf32>
  // CHECK: fa4.softcap %{{.*}} factor(%{{.*}}) {cap = 3.000000e+01 : f32, scale = 1.250000e-01 : f32} : tensor<128x128xf32>
  %c = fa4.softcap %s factor(%qd) {cap = 30.0 : f32, scale = 0.125 : f32} : tensor<128x128xf32>
  // CHECK: fa4.online_softmax %{{.*}}, %{{.*}}, %{{.*}} factor(%{{.*}}) {prob_shift = 8 : i64, rescale_threshold = 0.000000e+00 : f32, scale_log2 = 1.44269502 : f32} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf8E4M3FN>
  %p, %m1, %l1, %alpha = fa4.online_softmax %s, %m, %l factor(%qd)
      {scale_log2 = 1.442695 : f32, rescale_threshold = 0.0 : f32, prob_shift = 8 : i64}
      : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf8E4M3FN>
  // CHECK: fa4.value_mma %{{.*}}, %{{.*}}, %{{.*}} : tensor<128x128xf8E4M3FN>, tensor<128x128xf8E4M3FN>, tensor<128x128xf32>
  %acc1 = fa4.value_mma %p, %v, %acc
      : tensor<128x128xf8E4M3FN>, tensor<128x128xf8E4M3FN>, tensor<128x128xf32>
  // CHECK: fa4.normalize %{{.*}}, %{{.*}}, %{{.*}} factor(%{{.*}}) out_factor(%{{.*}}) {prob_shift = 8 : i64, scale_log2 = 1.44269502 : f32} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xbf16>
  %out, %lse = fa4.normalize %acc1, %m1, %l1 factor(%qd) out_factor(%qd)
      {scale_log2 = 1.442695 : f32, prob_shift = 8 : i64}
      : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xbf16>
  return
}
