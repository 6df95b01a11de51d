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
