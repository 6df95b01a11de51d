// RUN: fa4-opt %s -split-input-file -verify-diagnostics

// One case per verifier rule of the fa4 ops.

func.func @rank(%q: memref<?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{Q must have rank 4 ([batch, seq, heads, head_dim]), got rank 3}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @layout(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16, strided<[?, ?, 128, 2]>>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{K must be contiguous along head_dim (stride 1, as TMA needs), got strides [?, ?, 128, 2]}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16, strided<[?, ?, 128, 2]>>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @layout_bytes(%q: memref<?x?x8x128xf16, strided<[?, ?, 132, 1]>>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{Q strides [?, ?, 132, 1] must be positive multiples of 16 bytes (TMA's rule for every stride but head_dim's)}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x128xf16, strided<[?, ?, 132, 1]>>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @layout_affine(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16, affine_map<(a, b, c, d) -> (a, b, c, d floordiv 2)>>) {
  // expected-error @+1 {{O must have a strided layout}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16, affine_map<(a, b, c, d) -> (a, b, c, d floordiv 2)>>
  return
}

// -----

func.func @dynamic_heads(%q: memref<?x?x?x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x?x128xf16>) {
  // expected-error @+1 {{Q heads must be static, got shape [?, ?, ?, 128]}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x?x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x?x128xf16>
  return
}

// -----

func.func @dtype(%q: memref<?x?x8x128xf32>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{Q element type 'f32' is not supported (expected f16, bf16 or f8E4M3FN)}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x128xf32>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @dtype_mismatch(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xbf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{V element type 'bf16' does not match Q's 'f16'}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xbf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @head_dim(%q: memref<?x?x8x80xf16>, %k: memref<?x?x8x80xf16>, %v: memref<?x?x8x80xf16>, %o: memref<?x?x8x80xf16>) {
  // expected-error @+1 {{head dim 80 is not supported (expected 32, 64, 96, 128, 192 or 256)}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x80xf16>, memref<?x?x8x80xf16>, memref<?x?x8x80xf16> -> memref<?x?x8x80xf16>
  return
}

// -----

func.func @v_head_dim_192(%q: memref<?x?x8x192xf16>, %k: memref<?x?x8x192xf16>, %v: memref<?x?x8x192xf16>, %o: memref<?x?x8x192xf16>) {
  // expected-error @+1 {{V head dim 192 is not supported (expected 32, 64, 96, 128 or 256; Q and K's may be larger, as (192, 128))}}
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x192xf16>, memref<?x?x8x192xf16>, memref<?x?x8x192xf16> -> memref<?x?x8x192xf16>
  return
}

// -----

func.func @v_head_dim_wider(%q: memref<?x?x8x64xf16>, %k: memref<?x?x8x64xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{V head dim 128 exceeds Q and K's head dim 64 (a V head dim may equal Q's or be smaller)}}
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @o_takes_v_head_dim(%q: memref<?x?x8x192xf16>, %k: memref<?x?x8x192xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x192xf16>) {
  // expected-error @+1 {{O shape [?, ?, 8, 192] does not match Q shape [?, ?, 8, 192] with V's head dim 128}}
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x192xf16>, memref<?x?x8x192xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x192xf16>
  return
}

// -----

func.func @v_heads(%q: memref<?x?x8x192xf16>, %k: memref<?x?x8x192xf16>, %v: memref<?x?x4x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{V shape [?, ?, 4, 128] does not match K shape [?, ?, 8, 192] (but for the head dim)}}
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x192xf16>, memref<?x?x8x192xf16>, memref<?x?x4x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @kv_shapes(%q: memref<?x?x8x128xf16>, %k: memref<?x256x8x128xf16>, %v: memref<?x512x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{V shape [?, 512, 8, 128] does not match K shape [?, 256, 8, 128]}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x128xf16>, memref<?x256x8x128xf16>, memref<?x512x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @k_head_dim(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x64xf16>, %v: memref<?x?x8x64xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{K head dim (64) does not match Q's head dim (128)}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x128xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @o_shape(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x4x128xf16>) {
  // expected-error @+1 {{O shape [?, ?, 4, 128] does not match Q shape [?, ?, 8, 128]}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x4x128xf16>
  return
}

// -----

func.func @batch(%q: memref<2x?x8x128xf16>, %k: memref<3x?x8x128xf16>, %v: memref<3x?x8x128xf16>, %o: memref<2x?x8x128xf16>) {
  // expected-error @+1 {{K batch (3) does not match Q batch (2)}}
  fa4.attention %q, %k, %v -> %o 
      : memref<2x?x8x128xf16>, memref<3x?x8x128xf16>, memref<3x?x8x128xf16> -> memref<2x?x8x128xf16>
  return
}

// -----

func.func @heads_multiple(%q: memref<?x?x12x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x12x128xf16>) {
  // expected-error @+1 {{Q heads (12) must be a multiple of K/V heads (8)}}
  fa4.attention %q, %k, %v -> %o 
      : memref<?x?x12x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x12x128xf16>
  return
}

// -----

func.func @lse_type(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>, %lse: memref<?x8x?xf16>) {
  // expected-error @+1 {{LSE must be a rank-3 f32 memref ([batch, q_heads, seq_q]), got 'memref<?x8x?xf16>'}}
  fa4.attention %q, %k, %v -> %o, lse %lse 
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>, memref<?x8x?xf16>
  return
}

// -----

func.func @lse_layout(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>, %lse: memref<?x8x?xf32, strided<[?, ?, 2]>>) {
  // expected-error @+1 {{LSE must have the identity (row-major) layout}}
  fa4.attention %q, %k, %v -> %o, lse %lse 
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>, memref<?x8x?xf32, strided<[?, ?, 2]>>
  return
}

// -----

func.func @lse_shape(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>, %lse: memref<?x4x?xf32>) {
  // expected-error @+1 {{LSE shape [?, 4, ?] does not match [batch, q_heads, seq_q] = [?, 8, ?]}}
  fa4.attention %q, %k, %v -> %o, lse %lse 
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>, memref<?x4x?xf32>
  return
}

// -----

func.func @scale(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{scale must be positive and finite, and finite times log2(e), got 0}}
  fa4.attention %q, %k, %v -> %o {scale = 0.0 : f32}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @softcap(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{softcap must be non-negative and finite (0 disables it), got -1}}
  fa4.attention %q, %k, %v -> %o {softcap = -1.0 : f32}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @window_left(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{window_left must be -1 (unbounded) or in [0, 2^31), got -2}}
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<window>, window_left = -2}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @window_right(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{window_right must be -1 (unbounded) or in [0, 2^31), got -5}}
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<window>, window_left = 4, window_right = -5}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @window_without_mask(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{window bounds (128, 0) require mask = window, got mask = causal}}
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<causal>, window_left = 128, window_right = 0}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @window_unbounded(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{a window unbounded on both sides masks nothing; use mask = none}}
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<window>}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @range_window(%i: index) {
  // expected-error @+1 {{window bounds (3, -1) require mask = window, got mask = none}}
  %0:4 = fa4.kv_block_range %i, %i, %i {rows = 256 : i64, block_n = 128 : i64, gqa_ratio = 1 : i64, mask = #fa4.mask<none>, window_left = 3}
  return
}

// -----

func.func @range_block_n(%i: index) {
  // expected-error @+1 {{block_n must be a multiple of 16 keys from 16 to 256, got 17}}
  %0:4 = fa4.kv_block_range %i, %i, %i {rows = 128 : i64, block_n = 17 : i64, gqa_ratio = 1 : i64, mask = #fa4.mask<none>}
  return
}

// -----

func.func @range_block_n_wide(%i: index) {
  // expected-error @+1 {{block_n must be a multiple of 16 keys from 16 to 256, got 4611686018427387904}}
  %0:4 = fa4.kv_block_range %i, %i, %i {rows = 128 : i64, block_n = 4611686018427387904 : i64, gqa_ratio = 1 : i64, mask = #fa4.mask<none>}
  return
}

// -----

func.func @range_rows(%i: index) {
  // expected-error @+1 {{attribute 'rows' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0:4 = fa4.kv_block_range %i, %i, %i {rows = 0 : i64, block_n = 128 : i64, gqa_ratio = 1 : i64, mask = #fa4.mask<none>}
  return
}

// -----

func.func @load_q_ratio(%q: memref<?x?x6x128xf16>, %i: index) {
  // expected-error @+1 {{gqa_ratio 4 must divide the memref's static heads ([6])}}
  %0 = fa4.load_q_tile %q[%i, %i, %i] {gqa_ratio = 4 : i64} : memref<?x?x6x128xf16> -> tensor<128x128xf16>
  return
}

// -----

func.func @load_q_rank(%q: memref<?x6x128xf16>, %i: index) {
  // expected-error @+1 {{memref must have rank 4 ([batch, seq, heads, head_dim]), got rank 3}}
  %0 = fa4.load_q_tile %q[%i, %i, %i] {gqa_ratio = 1 : i64} : memref<?x6x128xf16> -> tensor<128x128xf16>
  return
}

// -----

func.func @load_kv_dtype(%k: memref<?x?x8x128xbf16>, %i: index) {
  // expected-error @+1 {{tile element type 'f16' does not match the memref's 'bf16'}}
  %0 = fa4.load_kv_tile %k[%i, %i, %i] : memref<?x?x8x128xbf16> -> tensor<128x128xf16>
  return
}

// -----

func.func @load_kv_head_dim(%k: memref<?x?x8x64xf16>, %i: index) {
  // expected-error @+1 {{tile head dim (128) does not match the memref's head dim (64)}}
  %0 = fa4.load_kv_tile %k[%i, %i, %i] : memref<?x?x8x64xf16> -> tensor<128x128xf16>
  return
}

// -----

func.func @load_kv_dynamic(%k: memref<?x?x8x128xf16>, %i: index) {
  // expected-error @+1 {{tile must have a static shape, got [?, 128]}}
  %0 = fa4.load_kv_tile %k[%i, %i, %i] : memref<?x?x8x128xf16> -> tensor<?x128xf16>
  return
}

// -----

func.func @score_accumulator(%a: tensor<128x128xf16>) {
  // expected-error @+1 {{scores must hold f32, got 'f16'}}
  %0 = fa4.score_mma %a, %a : tensor<128x128xf16>, tensor<128x128xf16> -> tensor<128x128xf16>
  return
}

// -----

func.func @score_head_dim(%a: tensor<128x128xf16>, %c: tensor<128x64xf16>) {
  // expected-error @+1 {{key head dim (64) does not match query head dim (128)}}
  %0 = fa4.score_mma %a, %c : tensor<128x128xf16>, tensor<128x64xf16> -> tensor<128x128xf32>
  return
}

// -----

func.func @score_types(%a: tensor<128x128xf16>, %c: tensor<128x128xbf16>) {
  // expected-error @+1 {{query and key element types differ ('f16' vs 'bf16')}}
  %0 = fa4.score_mma %a, %c : tensor<128x128xf16>, tensor<128x128xbf16> -> tensor<128x128xf32>
  return
}

// -----

func.func @score_shape(%a: tensor<128x128xf16>, %c: tensor<64x128xf16>) {
  // expected-error @+1 {{scores columns (128) does not match key rows (64)}}
  %0 = fa4.score_mma %a, %c : tensor<128x128xf16>, tensor<64x128xf16> -> tensor<128x128xf32>
  return
}

// -----

func.func @softcap_cap(%s: tensor<128x128xf32>) {
  // expected-error @+1 {{attribute 'cap' failed to satisfy constraint: 32-bit float attribute whose value is positive and finite}}
  %0 = fa4.softcap %s {cap = 0.0 : f32, scale = 1.0 : f32} : tensor<128x128xf32>
  return
}

// -----

func.func @mask_window(%s: tensor<128x128xf32>, %i: index) {
  // expected-error @+1 {{a window unbounded on both sides masks nothing; use mask = none}}
  %0 = fa4.mask %s, %i, %i, %i, %i {gqa_ratio = 1 : i64, mask = #fa4.mask<window>} : tensor<128x128xf32>
  return
}

// -----

func.func @mask_type(%s: tensor<128x128xf16>, %i: index) {
  // expected-error @+1 {{scores must hold f32, got 'f16'}}
  %0 = fa4.mask %s, %i, %i, %i, %i {gqa_ratio = 1 : i64, mask = #fa4.mask<causal>} : tensor<128x128xf16>
  return
}

// -----

func.func @softmax_rows(%s: tensor<128x128xf32>, %m: tensor<64xf32>) {
  // expected-error @+1 {{row_max length (64) does not match tile rows (128)}}
  %p, %m1, %l1, %a = fa4.online_softmax %s, %m, %m {scale_log2 = 1.0 : f32, rescale_threshold = 8.0 : f32} : tensor<128x128xf32>, tensor<64xf32> -> tensor<128x128xf16>
  return
}

// -----

func.func @softmax_probs(%s: tensor<128x128xf32>, %m: tensor<128xf32>) {
  // expected-error @+1 {{probs shape [128, 64] does not match scores shape [128, 128]}}
  %p, %m1, %l1, %a = fa4.online_softmax %s, %m, %m {scale_log2 = 1.0 : f32, rescale_threshold = 8.0 : f32} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x64xf16>
  return
}

// -----

func.func @softmax_threshold(%s: tensor<128x128xf32>, %m: tensor<128xf32>) {
  // expected-error @+1 {{attribute 'rescale_threshold' failed to satisfy constraint: 32-bit float attribute whose value is non-negative}}
  %p, %m1, %l1, %a = fa4.online_softmax %s, %m, %m {scale_log2 = 1.0 : f32, rescale_threshold = -1.0 : f32} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf16>
  return
}

// -----

func.func @correction_rows(%acc: tensor<128x128xf32>, %a: tensor<64xf32>) {
  // expected-error @+1 {{acc_scale length (64) does not match tile rows (128)}}
  %0 = fa4.correction %acc, %a : tensor<128x128xf32>, tensor<64xf32>
  return
}

// -----

func.func @value_acc(%p: tensor<128x128xf16>, %acc: tensor<128x64xf32>) {
  // expected-error @+1 {{acc columns (64) does not match value columns (128)}}
  %0 = fa4.value_mma %p, %p, %acc : tensor<128x128xf16>, tensor<128x128xf16>, tensor<128x64xf32>
  return
}

// -----

func.func @value_types(%p: tensor<128x128xf16>, %v: tensor<128x128xbf16>, %acc: tensor<128x128xf32>) {
  // expected-error @+1 {{probs and value element types differ ('f16' vs 'bf16')}}
  %0 = fa4.value_mma %p, %v, %acc : tensor<128x128xf16>, tensor<128x128xbf16>, tensor<128x128xf32>
  return
}

// -----

func.func @value_rows(%p: tensor<128x128xf16>, %v: tensor<64x128xf16>, %acc: tensor<128x128xf32>) {
  // expected-error @+1 {{value rows (64) does not match probs columns (128)}}
  %0 = fa4.value_mma %p, %v, %acc : tensor<128x128xf16>, tensor<64x128xf16>, tensor<128x128xf32>
  return
}

// -----

// A split-KV part's O is f32 (what the merge reads back), not the output's type.
func.func @store_partial_o_type(%ot: tensor<128x128xf16>, %o: memref<?x?x8x128xf16>, %ws: memref<?xi32>, %i: index) {
  // expected-error @+1 {{tile must hold f32, got 'f16'}}
  fa4.store_partial_o %ot, %o, %ws[%i, %i, %i, %i] {gqa_ratio = 4 : i64, num_splits = 2 : i64} : tensor<128x128xf16>, memref<?x?x8x128xf16>, memref<?xi32>
  return
}

// -----

func.func @store_partial_o_columns(%ot: tensor<128x32xf32>, %o: memref<?x?x8x128xf16>, %ws: memref<?xi32>, %i: index) {
  // expected-error @+1 {{writes columns [112, 144) of 128 rows; a tile has 128 rows and 128 columns}}
  fa4.store_partial_o %ot, %o, %ws[%i, %i, %i, %i] {gqa_ratio = 4 : i64, num_splits = 2 : i64, column = 112 : i64} : tensor<128x32xf32>, memref<?x?x8x128xf16>, memref<?xi32>
  return
}

// -----

func.func @merge_splits_workspace(%l: tensor<128xf32>, %o: memref<?x?x8x128xf16>, %ws: memref<?xf32>, %i: index) {
  // expected-error @+1 {{split_workspace 'memref<?xf32>' is not a rank-1 i32 memref [words]}}
  fa4.merge_splits %l -> %o workspace %ws[%i, %i, %i, %i] {gqa_ratio = 4 : i64, num_splits = 2 : i64} : tensor<128xf32>, memref<?x?x8x128xf16>, memref<?xf32>
  return
}

// -----

func.func @merge_splits_count(%l: tensor<128xf32>, %o: memref<?x?x8x128xf16>, %ws: memref<?xi32>, %i: index) {
  // expected-error @+1 {{attribute 'num_splits' failed to satisfy constraint}}
  fa4.merge_splits %l -> %o workspace %ws[%i, %i, %i, %i] {gqa_ratio = 4 : i64, num_splits = 1 : i64} : tensor<128xf32>, memref<?x?x8x128xf16>, memref<?xi32>
  return
}

// -----

func.func @normalize_shape(%acc: tensor<128x128xf32>, %m: tensor<128xf32>) {
  // expected-error @+1 {{out shape [128, 64] does not match acc shape [128, 128]}}
  %o, %l = fa4.normalize %acc, %m, %m {scale_log2 = 1.0 : f32} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x64xf16>
  return
}

// -----

func.func @store_o_ratio(%t: tensor<128x128xf16>, %o: memref<?x?x2x128xf16>, %i: index) {
  // expected-error @+1 {{gqa_ratio 4 must divide the memref's static heads ([2])}}
  fa4.store_o_tile %t, %o[%i, %i, %i] {gqa_ratio = 4 : i64} : tensor<128x128xf16>, memref<?x?x2x128xf16>
  return
}

// -----

func.func @store_lse_memref(%t: tensor<128xf32>, %l: memref<?x8xf32>, %i: index) {
  // expected-error @+1 {{LSE memref must be rank-3 f32 ([batch, q_heads, seq_q]), got 'memref<?x8xf32>'}}
  fa4.store_lse_tile %t, %l[%i, %i, %i] {gqa_ratio = 1 : i64} : tensor<128xf32>, memref<?x8xf32>
  return
}

// -----

func.func @store_lse_ratio(%t: tensor<128xf32>, %l: memref<?x6x?xf32>, %i: index) {
  // expected-error @+1 {{gqa_ratio 4 must divide the memref's static heads ([6])}}
  fa4.store_lse_tile %t, %l[%i, %i, %i] {gqa_ratio = 4 : i64} : tensor<128xf32>, memref<?x6x?xf32>
  return
}

// -----

func.func @mixed(%q: tensor<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{Q, K, V, O and the LSE must be all memrefs or all tensors}}
  fa4.attention %q, %k, %v -> %o
      : tensor<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @tensor_lse(%q: tensor<?x?x8x128xf16>, %lse: tensor<?x8x?xf16>) {
  // expected-error @+1 {{LSE must be a rank-3 f32 tensor ([batch, q_heads, seq_q]), got 'tensor<?x8x?xf16>'}}
  %o, %l = fa4.attention %q, %q, %q -> %q, lse %lse
      : tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16> -> tensor<?x?x8x128xf16>, tensor<?x8x?xf16>
  return
}

// -----

func.func @results(%q: tensor<?x?x8x128xf16>) {
  // Results are O's type (and the LSE's): two without an LSE do not infer.
  // expected-error @+2 {{'fa4.attention' op inferred type(s) 'tensor<?x?x8x128xf16>' are incompatible with return type(s) of operation 'tensor<?x?x8x128xf16>', 'tensor<?x?x8x128xf16>'}}
  // expected-error @+1 {{'fa4.attention' op failed to infer returned types}}
  %o:2 = "fa4.attention"(%q, %q, %q, %q) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>}> ({}, {}) : (tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16>) -> (tensor<?x?x8x128xf16>, tensor<?x?x8x128xf16>)
  return
}

// -----

func.func @score_mod_arguments(%q: memref<?x?x8x64xf16>) {
  // expected-error @+1 {{score_mod takes (f32, index, index, index, index), got 4 arguments}}
  fa4.attention %q, %q, %q -> %q
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index):
    fa4.yield %s : f32
  }
  return
}

// -----

func.func @score_mod_extra_type(%q: memref<?x?x8x64xf16>, %t: memref<8xf32>) {
  // expected-error @+1 {{score_mod argument #5 must be 'memref<8xf32>' (f32, index, index, index, index, then the extras' types), got 'memref<4xf32>'}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<8xf32>)
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: memref<4xf32>):
    fa4.yield %s : f32
  }
  return
}

// -----

func.func @mask_mod_yield(%q: memref<?x?x8x64xf16>) {
  fa4.attention %q, %q, %q -> %q
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    // expected-error @+1 {{in a mask_mod region must yield 'i1', got 'index'}}
    fa4.yield %i : index
  }
  return
}

// -----

func.func @capture(%q: memref<?x?x8x64xf16>, %bias: f32) {
  // The op is isolated from above: a region reaches tables through extras.
  // expected-note @+1 {{required by region isolation constraints}}
  fa4.attention %q, %q, %q -> %q
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    // expected-error @+1 {{'arith.addf' op using value defined outside the region}}
    %r = arith.addf %s, %bias : f32
    fa4.yield %r : f32
  }
  return
}

// -----

func.func @side_effect(%q: memref<?x?x8x64xf16>, %t: memref<8xf32>) {
  fa4.attention %q, %q, %q -> %q extras(%t : memref<8xf32>)
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: memref<8xf32>):
    // expected-error @+1 {{in a score_mod region has side effects; a region may only read its extras}}
    memref.store %s, %x[%h] : memref<8xf32>
    fa4.yield %s : f32
  }
  return
}

// -----

func.func @nested_region(%q: memref<?x?x8x64xf16>) {
  fa4.attention %q, %q, %q -> %q
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %c = arith.cmpi ule, %j, %i : index
    // expected-error @+1 {{in a mask_mod region: regions are straight-line code (use arith.select for a choice)}}
    %r = scf.if %c -> i1 {
      scf.yield %c : i1
    } else {
      scf.yield %c : i1
    }
    fa4.yield %r : i1
  }
  return
}

// -----

func.func @softcap_and_score_mod(%q: memref<?x?x8x64xf16>) {
  // expected-error @+1 {{has both a softcap and a score_mod; write the softcap in the score_mod region}}
  fa4.attention %q, %q, %q -> %q {softcap = 30.0 : f32}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    fa4.yield %s : f32
  }
  return
}

// -----

func.func @unread_extra(%q: memref<?x?x8x64xf16>, %t: memref<8xf32>) {
  // expected-error @+1 {{has extras but no score_mod or mask_mod region to read them}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<8xf32>)
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @strided_extra(%q: memref<?x?x8x64xf16>, %t: memref<8xf32, strided<[2]>>) {
  // expected-error @+1 {{extras must be row-major memrefs in the default memory space, of f16, bf16, f32, f64 or i1, i8, i16, i32, i64, with no empty dimension, got 'memref<8xf32, strided<[2]>>'}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<8xf32, strided<[2]>>)
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: memref<8xf32, strided<[2]>>):
    fa4.yield %s : f32
  }
  return
}

// -----

func.func @mask_at(%s: tensor<128x128xf32>, %i: index) {
  // expected-error @+1 {{takes the task's batch and head (`at %b, %h`) exactly when it has a mask_mod region}}
  %m = fa4.mask %s, %i, %i, %i, %i {gqa_ratio = 1 : i64, mask = #fa4.mask<none>}
      : tensor<128x128xf32> mask_mod {
  ^bb0(%b: index, %h: index, %q: index, %k: index):
    %c = arith.cmpi ule, %k, %q : index
    fa4.yield %c : i1
  }
  return
}

// -----

func.func @extra_element(%q: memref<?x?x8x64xf16>, %t: memref<8xi4>) {
  // expected-error @+1 {{extras must be row-major memrefs in the default memory space, of f16, bf16, f32, f64 or i1, i8, i16, i32, i64, with no empty dimension, got 'memref<8xi4>'}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<8xi4>)
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %x: memref<8xi4>):
    %true = arith.constant true
    fa4.yield %true : i1
  }
  return
}

// -----

func.func @repeated_extra(%q: memref<?x?x8x64xf16>, %t: memref<8xf32>) {
  // expected-error @+1 {{extra #1 repeats extra #0; pass each memref once}}
  fa4.attention %q, %q, %q -> %q extras(%t, %t : memref<8xf32>, memref<8xf32>)
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: memref<8xf32>, %y: memref<8xf32>):
    fa4.yield %s : f32
  }
  return
}

// -----

func.func @empty_mask_mod(%q: memref<?x?x8x64xf16>) {
  // expected-error @+1 {{empty block: expect at least a terminator}}
  "fa4.attention"(%q, %q, %q, %q) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>}> ({}, {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
  }) : (memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>) -> ()
  return
}

// -----

func.func @no_yield(%q: memref<?x?x8x64xf16>) {
  "fa4.attention"(%q, %q, %q, %q) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>}> ({}, {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    // expected-error @+1 {{block with no terminator}}
    %c = arith.cmpi ule, %j, %i : index
  }) : (memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>) -> ()
  return
}

// -----

func.func @heads_first_on_memrefs(%q: memref<?x8x?x64xf16>) {
  // expected-error @+1 {{heads_first applies to tensors; a memref states its layout in its strides}}
  fa4.attention %q, %q, %q -> %q {heads_first}
      : memref<?x8x?x64xf16>, memref<?x8x?x64xf16>, memref<?x8x?x64xf16> -> memref<?x8x?x64xf16>
  return
}

// -----

func.func @heads_first_dynamic_heads(%q: tensor<?x?x?x64xf16>) -> tensor<?x?x?x64xf16> {
  // expected-error @+1 {{Q heads must be static, got shape [?, ?, ?, 64]}}
  %o = fa4.attention %q, %q, %q -> %q {heads_first}
      : tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16>, tensor<?x?x?x64xf16> -> tensor<?x?x?x64xf16>
  return %o : tensor<?x?x?x64xf16>
}

// -----

func.func @block_mask_out_of_range(%q: memref<?x?x8x64xf16>, %t: memref<?x1x?x4xi32>) {
  // expected-error @+1 {{block_mask names extra #1, but the op has 1 extras}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<?x1x?x4xi32>) {block_mask = 1 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %x: memref<?x1x?x4xi32>):
    %true = arith.constant true
    fa4.yield %true : i1
  }
  return
}

// -----

func.func @block_mask_without_mask_mod(%q: memref<?x?x8x64xf16>, %t: memref<?x1x?x4xi32>) {
  // expected-error @+1 {{has a block_mask but no mask_mod: the block mask describes the mask_mod's blocks}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<?x1x?x4xi32>) {block_mask = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %x: memref<?x1x?x4xi32>):
    fa4.yield %s : f32
  }
  return
}

// -----

func.func @block_mask_type(%q: memref<?x?x8x64xf16>, %t: memref<?x1x?x3xi32>) {
  // expected-error @+1 {{block mask must be a row-major i32 memref [batch or 1, q_heads or 1, ceil(seq_q / 128), 4] (begin, full_begin, full_end, end per query block), got 'memref<?x1x?x3xi32>'}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<?x1x?x3xi32>) {block_mask = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %x: memref<?x1x?x3xi32>):
    %true = arith.constant true
    fa4.yield %true : i1
  }
  return
}

// -----

func.func @block_mask_sizes(%q: memref<2x300x8x64xf16>, %t: memref<2x4x3x4xi32>) {
  // expected-error @+1 {{block mask 'memref<2x4x3x4xi32>' does not fit [batch or 1, q_heads or 1, ceil(seq_q / 128), 4] = [2 or 1, 8 or 1, 3, 4]}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<2x4x3x4xi32>) {block_mask = 0 : i64}
      : memref<2x300x8x64xf16>, memref<2x300x8x64xf16>, memref<2x300x8x64xf16> -> memref<2x300x8x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %x: memref<2x4x3x4xi32>):
    %true = arith.constant true
    fa4.yield %true : i1
  }
  return
}

// -----

func.func @kv_block_range_block_mask_alone(%i: index, %t: memref<1x1x1x4xi32>) {
  // expected-error @+1 {{takes a block_mask with the task's batch and kv_head, or none of them}}
  %0:4 = "fa4.kv_block_range"(%i, %i, %i, %t) ({}) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>, rows = 256 : i64, block_n = 128 : i64, gqa_ratio = 1 : i64, mask = #fa4.mask<none>} : (index, index, index, memref<1x1x1x4xi32>) -> (index, index, index, index)
  return
}

// -----

// Issue 24, item 6: a softcap of 1e8 was accepted and a score came out off
// by 1.4 (tanh's 2^-22 absolute error times the cap).
func.func @softcap_large(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{softcap must be at most 1024 (the kernel's tanh is accurate to about 2^-22, which the cap multiplies), got 1e+08}}
  fa4.attention %q, %k, %v -> %o {softcap = 1.0e8 : f32}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @softcap_small(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>, %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  // expected-error @+1 {{softcap 1e-38 is too small for scale 1000: 2·log2(e)·scale / softcap must be a finite f32}}
  fa4.attention %q, %k, %v -> %o {scale = 1000.0 : f32, softcap = 1.0e-38 : f32}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16> -> memref<?x?x8x128xf16>
  return
}

// -----

func.func @seqused_k_out_of_range(%q: memref<?x?x8x64xf16>, %s: memref<?xi32>) {
  // expected-error @+1 {{seqused_k names extra #1, but the op has 1 extras}}
  fa4.attention %q, %q, %q -> %q extras(%s : memref<?xi32>) {seqused_k = 1 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @seqused_k_wrong_type(%q: memref<?x?x8x64xf16>, %s: memref<?xi64>) {
  // expected-error @+1 {{seqused_k 'memref<?xi64>' is not an i32 memref of one entry per sequence [?]}}
  fa4.attention %q, %q, %q -> %q extras(%s : memref<?xi64>) {seqused_k = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @seqused_k_wrong_batch(%q: memref<4x?x8x64xf16>, %s: memref<3xi32>) {
  // expected-error @+1 {{seqused_k 'memref<3xi32>' is not an i32 memref of one entry per sequence [4]}}
  fa4.attention %q, %q, %q -> %q extras(%s : memref<3xi32>) {seqused_k = 0 : i64}
      : memref<4x?x8x64xf16>, memref<4x?x8x64xf16>, memref<4x?x8x64xf16> -> memref<4x?x8x64xf16>
  return
}

// -----

func.func @seqused_k_and_another_extra(%q: memref<?x?x8x64xf16>, %s: memref<?xi32>, %t: memref<8xf32>) {
  // expected-error @+1 {{has extras but no score_mod or mask_mod region to read them}}
  fa4.attention %q, %q, %q -> %q extras(%s, %t : memref<?xi32>, memref<8xf32>) {seqused_k = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @seqused_k_is_the_block_mask(%q: memref<?x?x8x64xf16>, %t: memref<?x1x?x4xi32>) {
  // expected-error @+1 {{seqused_k 'memref<?x1x?x4xi32>' is not an i32 memref of one entry per sequence [?]}}
  fa4.attention %q, %q, %q -> %q extras(%t : memref<?x1x?x4xi32>) {seqused_k = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @block_table_page(%q: memref<?x?x8x64xf16>, %k: memref<?x24x8x64xf16>, %t: memref<?x?xi32>) {
  // expected-error @+1 {{a paged K/V cache is [num_blocks, page_size, kv_heads, head_dim] with a static page size, a power of two of at least 16; got K [?, 24, 8, 64]}}
  fa4.attention %q, %k, %k -> %q extras(%t : memref<?x?xi32>) {block_table = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x24x8x64xf16>, memref<?x24x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @block_table_type(%q: memref<?x?x8x64xf16>, %k: memref<?x16x8x64xf16>, %t: memref<?xi32>) {
  // expected-error @+1 {{block_table 'memref<?xi32>' is not an i32 memref [batch, max_blocks]}}
  fa4.attention %q, %k, %k -> %q extras(%t : memref<?xi32>) {block_table = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x16x8x64xf16>, memref<?x16x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @block_table_is_seqused(%q: memref<?x?x8x64xf16>, %k: memref<?x16x8x64xf16>, %t: memref<?x?xi32>) {
  // expected-error @+1 {{seqused_k names the same extra as block_mask or block_table}}
  fa4.attention %q, %k, %k -> %q extras(%t : memref<?x?xi32>) {block_table = 0 : i64, seqused_k = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x16x8x64xf16>, memref<?x16x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @block_table_v_shape(%q: memref<?x?x8x64xf16>, %k: memref<?x16x8x64xf16>, %v: memref<?x?x8x64xf16>, %t: memref<?x?xi32>) {
  // expected-error @+1 {{a paged cache's V [?, ?, 8, 64] must have K's shape [?, 16, 8, 64] (the same blocks and page size)}}
  fa4.attention %q, %k, %v -> %q extras(%t : memref<?x?xi32>) {block_table = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x16x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

// Split-KV: num_splits and the workspace go together.
func.func @num_splits_without_workspace(%q: memref<?x?x8x64xf16>) {
  // expected-error @+1 {{takes num_splits and split_workspace together}}
  fa4.attention %q, %q, %q -> %q {num_splits = 4 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @num_splits_one(%q: memref<?x?x8x64xf16>, %w: memref<?xi32>) {
  // expected-error @+1 {{attribute 'num_splits' failed to satisfy constraint}}
  fa4.attention %q, %q, %q -> %q extras(%w : memref<?xi32>) {num_splits = 1 : i64, split_workspace = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @split_workspace_type(%q: memref<?x?x8x64xf16>, %w: memref<?x4xi32>) {
  // expected-error @+1 {{split_workspace 'memref<?x4xi32>' is not a rank-1 i32 memref [words]}}
  fa4.attention %q, %q, %q -> %q extras(%w : memref<?x4xi32>) {num_splits = 2 : i64, split_workspace = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @split_workspace_is_seqused_k(%q: memref<?x?x8x64xf16>, %w: memref<?xi32>) {
  // expected-error @+1 {{split_workspace names the same extra as block_mask, seqused_k or block_table}}
  fa4.attention %q, %q, %q -> %q extras(%w : memref<?xi32>) {seqused_k = 0 : i64, num_splits = 2 : i64, split_workspace = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @split_workspace_out_of_range(%q: memref<?x?x8x64xf16>, %w: memref<?xi32>) {
  // expected-error @+1 {{split_workspace names extra #3, but the op has 1 extras}}
  fa4.attention %q, %q, %q -> %q extras(%w : memref<?xi32>) {num_splits = 2 : i64, split_workspace = 3 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

// The workspace is the kernel's scratch: no region reads it.
func.func @split_workspace_read_by_a_region(%q: memref<?x?x8x64xf16>, %w: memref<?xi32>) {
  // expected-error @+1 {{reads the split-KV workspace (extra #0) in its score_mod; it is the kernel's scratch, not an input}}
  fa4.attention %q, %q, %q -> %q extras(%w : memref<?xi32>) {num_splits = 2 : i64, split_workspace = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index, %ws: memref<?xi32>):
    %c0 = arith.constant 0 : index
    %n = memref.load %ws[%c0] : memref<?xi32>
    %f = arith.sitofp %n : i32 to f32
    %r = arith.addf %s, %f : f32
    fa4.yield %r : f32
  }
  return
}

// -----

// A static workspace too small for any problem of the op's sizes.
func.func @split_workspace_too_small(%q: memref<?x?x8x64xf16>, %w: memref<16xi32>) {
  // expected-error @+1 {{split_workspace 'memref<16xi32>' holds 16 words; the smallest problem needs 1120}}
  fa4.attention %q, %q, %q -> %q extras(%w : memref<16xi32>) {num_splits = 2 : i64, split_workspace = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_alone(%q: memref<1x?x8x64xf16>, %c: memref<?xi32>) {
  // expected-error @+1 {{takes cu_seqlens_q and cu_seqlens_k together}}
  fa4.attention %q, %q, %q -> %q extras(%c : memref<?xi32>) {cu_seqlens_q = 0 : i64}
      : memref<1x?x8x64xf16>, memref<1x?x8x64xf16>, memref<1x?x8x64xf16> -> memref<1x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_same(%q: memref<1x?x8x64xf16>, %c: memref<?xi32>) {
  // expected-error @+1 {{cu_seqlens_q and cu_seqlens_k name the same extra}}
  fa4.attention %q, %q, %q -> %q extras(%c : memref<?xi32>) {cu_seqlens_q = 0 : i64, cu_seqlens_k = 0 : i64}
      : memref<1x?x8x64xf16>, memref<1x?x8x64xf16>, memref<1x?x8x64xf16> -> memref<1x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_type(%q: memref<1x?x8x64xf16>, %c: memref<?xi64>, %d: memref<?xi32>) {
  // expected-error @+1 {{cu_seqlens_q 'memref<?xi64>' is not an i32 memref [batch + 1] of at least two entries}}
  fa4.attention %q, %q, %q -> %q extras(%c, %d : memref<?xi64>, memref<?xi32>) {cu_seqlens_q = 0 : i64, cu_seqlens_k = 1 : i64}
      : memref<1x?x8x64xf16>, memref<1x?x8x64xf16>, memref<1x?x8x64xf16> -> memref<1x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_one_entry(%q: memref<1x?x8x64xf16>, %c: memref<1xi32>, %d: memref<?xi32>) {
  // expected-error @+1 {{cu_seqlens_q 'memref<1xi32>' is not an i32 memref [batch + 1] of at least two entries}}
  fa4.attention %q, %q, %q -> %q extras(%c, %d : memref<1xi32>, memref<?xi32>) {cu_seqlens_q = 0 : i64, cu_seqlens_k = 1 : i64}
      : memref<1x?x8x64xf16>, memref<1x?x8x64xf16>, memref<1x?x8x64xf16> -> memref<1x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_sizes_differ(%q: memref<1x?x8x64xf16>, %c: memref<5xi32>, %d: memref<4xi32>) {
  // expected-error @+1 {{cu_seqlens_q has 5 entries and cu_seqlens_k 4; both are [batch + 1]}}
  fa4.attention %q, %q, %q -> %q extras(%c, %d : memref<5xi32>, memref<4xi32>) {cu_seqlens_q = 0 : i64, cu_seqlens_k = 1 : i64}
      : memref<1x?x8x64xf16>, memref<1x?x8x64xf16>, memref<1x?x8x64xf16> -> memref<1x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_batched(%q: memref<2x?x8x64xf16>, %c: memref<?xi32>, %d: memref<?xi32>) {
  // expected-error @+1 {{varlen Q is packed [1, total, heads, head_dim]; its first dimension is 2}}
  fa4.attention %q, %q, %q -> %q extras(%c, %d : memref<?xi32>, memref<?xi32>) {cu_seqlens_q = 0 : i64, cu_seqlens_k = 1 : i64}
      : memref<2x?x8x64xf16>, memref<2x?x8x64xf16>, memref<2x?x8x64xf16> -> memref<2x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_split(%q: memref<1x?x8x64xf16>, %c: memref<?xi32>, %d: memref<?xi32>, %w: memref<?xi32>) {
  // expected-error @+1 {{varlen (cu_seqlens) does not combine with block_table, block_mask or split-KV}}
  fa4.attention %q, %q, %q -> %q extras(%c, %d, %w : memref<?xi32>, memref<?xi32>, memref<?xi32>) {cu_seqlens_q = 0 : i64, cu_seqlens_k = 1 : i64, num_splits = 2 : i64, split_workspace = 2 : i64}
      : memref<1x?x8x64xf16>, memref<1x?x8x64xf16>, memref<1x?x8x64xf16> -> memref<1x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_out_of_range(%q: memref<1x?x8x64xf16>, %c: memref<?xi32>, %d: memref<?xi32>) {
  // expected-error @+1 {{cu_seqlens_k names extra #2, but the op has 2 extras}}
  fa4.attention %q, %q, %q -> %q extras(%c, %d : memref<?xi32>, memref<?xi32>) {cu_seqlens_q = 0 : i64, cu_seqlens_k = 2 : i64}
      : memref<1x?x8x64xf16>, memref<1x?x8x64xf16>, memref<1x?x8x64xf16> -> memref<1x?x8x64xf16>
  return
}

// -----

func.func @cu_seqlens_seqused_count(%q: memref<1x?x8x64xf16>, %s: memref<3xi32>, %c: memref<5xi32>, %d: memref<5xi32>) {
  // expected-error @+1 {{seqused_k 'memref<3xi32>' is not an i32 memref of one entry per sequence [4]}}
  fa4.attention %q, %q, %q -> %q extras(%s, %c, %d : memref<3xi32>, memref<5xi32>, memref<5xi32>) {seqused_k = 0 : i64, cu_seqlens_q = 1 : i64, cu_seqlens_k = 2 : i64}
      : memref<1x?x8x64xf16>, memref<1x?x8x64xf16>, memref<1x?x8x64xf16> -> memref<1x?x8x64xf16>
  return
}

// -----

func.func @store_span_one(%t: tensor<128x64xf16>, %o: memref<1x?x8x64xf16>, %i: index) {
  // expected-error @+1 {{span takes the sequence's first row and its length (two values), got 1}}
  fa4.store_o_tile %t, %o[%i, %i, %i] span(%i) {gqa_ratio = 1 : i64} : tensor<128x64xf16>, memref<1x?x8x64xf16>
  return
}

// -----

func.func @store_columns_past(%t: tensor<128x16xf16>, %o: memref<1x?x8x64xf16>, %i: index) {
  // expected-error @+1 {{stores columns [56, 72) of 'tensor<128x16xf16>', which must lie inside O's static head dim with O's element type}}
  fa4.store_o_tile %t, %o[%i, %i, %i] {gqa_ratio = 1 : i64, column = 56 : i64} : tensor<128x16xf16>, memref<1x?x8x64xf16>
  return
}

// -----

// FP8: e4m3 Q, K and V give an f16 or bf16 O.
func.func @fp8_out(%q: memref<?x?x8x128xf8E4M3FN>, %o: memref<?x?x8x128xf8E4M3FN>) {
  // expected-error @+1 {{O element type 'f8E4M3FN' is not f16 or bf16 (an FP8 attention's output)}}
  fa4.attention %q, %q, %q -> %o
      : memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xf8E4M3FN> -> memref<?x?x8x128xf8E4M3FN>
  return
}

// -----

func.func @fp8_mixed(%q: memref<?x?x8x128xf8E4M3FN>, %k: memref<?x?x8x128xbf16>, %o: memref<?x?x8x128xbf16>) {
  // expected-error @+1 {{K element type 'bf16' does not match Q's 'f8E4M3FN'}}
  fa4.attention %q, %k, %q -> %o
      : memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xbf16>, memref<?x?x8x128xf8E4M3FN> -> memref<?x?x8x128xbf16>
  return
}

// -----

func.func @descale_not_fp8(%q: memref<?x?x8x64xf16>, %d: memref<?x8xf32>) {
  // expected-error @+1 {{q_descale applies to FP8 (f8E4M3FN) inputs; Q is 'f16'}}
  fa4.attention %q, %q, %q -> %q extras(%d : memref<?x8xf32>) {q_descale = 0 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16> -> memref<?x?x8x64xf16>
  return
}

// -----

func.func @descale_shape(%q: memref<?x?x8x128xf8E4M3FN>, %o: memref<?x?x8x128xbf16>, %d: memref<?x4xf32>) {
  // expected-error @+1 {{k_descale 'memref<?x4xf32>' is not a row-major f32 memref [batch, kv_heads] = [?, 8]}}
  fa4.attention %q, %q, %q -> %o extras(%d : memref<?x4xf32>) {k_descale = 0 : i64}
      : memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xf8E4M3FN> -> memref<?x?x8x128xbf16>
  return
}

// -----

func.func @descale_shared(%q: memref<?x?x8x128xf8E4M3FN>, %o: memref<?x?x8x128xbf16>, %d: memref<?x8xf32>) {
  // expected-error @+1 {{v_descale names the same extra as another table (pass it twice as two extras)}}
  fa4.attention %q, %q, %q -> %o extras(%d : memref<?x8xf32>) {q_descale = 0 : i64, v_descale = 0 : i64}
      : memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xf8E4M3FN> -> memref<?x?x8x128xbf16>
  return
}

// -----

func.func @descale_range(%q: memref<?x?x8x128xf8E4M3FN>, %o: memref<?x?x8x128xbf16>, %d: memref<?x8xf32>) {
  // expected-error @+1 {{v_descale names extra #3, but the op has 1 extras}}
  fa4.attention %q, %q, %q -> %o extras(%d : memref<?x8xf32>) {v_descale = 3 : i64}
      : memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xf8E4M3FN>, memref<?x?x8x128xf8E4M3FN> -> memref<?x?x8x128xbf16>
  return
}

// -----

// A stale max lets e4m3 probabilities reach 2^(threshold + shift).
func.func @softmax_fp8_range(%s: tensor<128x128xf32>, %m: tensor<128xf32>) {
  // expected-error @+1 {{probabilities in f8E4M3FN reach 2^16 (rescale_threshold + prob_shift), past e4m3's largest value 448 (2^8.8)}}
  %p, %m1, %l1, %a = fa4.online_softmax %s, %m, %m {scale_log2 = 1.0 : f32, rescale_threshold = 8.0 : f32, prob_shift = 8 : i64} : tensor<128x128xf32>, tensor<128xf32> -> tensor<128x128xf8E4M3FN>
  return
}

// -----

func.func @load_descale_type(%t: memref<?xf32>, %i: index) {
  // expected-error @+1 {{table 'memref<?xf32>' is not an f32 memref [batch, kv_heads]}}
  %d = fa4.load_descale %t[%i, %i] : memref<?xf32>
  return
}
