// RUN: fa4-opt %s -split-input-file -verify-diagnostics

// One case per verifier rule of fa4.attention_backward.

func.func @dtype_mismatch(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xbf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{dK element type 'bf16' does not match Q's 'f16'}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xbf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @head_dim(%q: memref<?x?x4x192xf16>, %k: memref<?x?x2x192xf16>, %v: memref<?x?x2x192xf16>, %o: memref<?x?x4x192xf16>, %do: memref<?x?x4x192xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x192xf16>, %dk: memref<?x?x2x192xf16>, %dv: memref<?x?x2x192xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x192xf32>) {
  // expected-error @+1 {{head dim 192 is not supported by the backward (expected 32, 64, 96 or 128)}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x192xf16>, memref<?x?x2x192xf16>, memref<?x?x2x192xf16>, memref<?x?x4x192xf16>, memref<?x?x4x192xf16>, memref<?x4x?xf32> -> memref<?x?x4x192xf16>, memref<?x?x2x192xf16>, memref<?x?x2x192xf16>, memref<?x4x?xf32>, memref<?x?x4x192xf32>
  return
}

// -----

func.func @dq_shape(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x8x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{dQ shape [?, ?, 8, 64] does not match Q shape [?, ?, 4, 64]}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x8x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @heads(%q: memref<?x?x4x64xf16>, %k: memref<?x?x3x64xf16>, %v: memref<?x?x3x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x3x64xf16>, %dv: memref<?x?x3x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{Q heads (4) must be a multiple of K/V heads (3)}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x3x64xf16>, memref<?x?x3x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x3x64xf16>, memref<?x?x3x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @lse_type(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf16>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{LSE must be a row-major f32 memref [batch, q_heads, seq_q], got 'memref<?x4x?xf16>'}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf16> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @delta_heads(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x2x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{delta shape [?, 2, ?] does not match [?, 4, ?]}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x2x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @accumulator(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf16>) {
  // expected-error @+1 {{dq_accum must be a row-major f32 memref [batch, seq_q, q_heads, head_dim], got 'memref<?x?x4x64xf16>'}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf16>
  return
}

// -----

func.func @aliased_outputs(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{passes one memref as two of Q, K, V, O, dO, LSE, dQ, dK, dV and the workspace}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dk workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @window_without_mask(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{window bounds (3, -1) require mask = window, got mask = causal}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc) {mask = #fa4.mask<causal>, window_left = 3}
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @scale(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{scale must be positive and finite, and finite times log2(e), got -1}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc) {scale = -1.0 : f32}
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @softcap_and_mod(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{has both a softcap and a score_mod; write the softcap in the score_mod region}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc) {softcap = 5.0 : f32}
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32> score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    fa4.yield %s : f32
  }
  return
}

// -----

func.func @extras_without_regions(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>, %bias: memref<4xf32>) {
  // expected-error @+1 {{has extras but no score_mod or mask_mod region to read them}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc) extras(%bias : memref<4xf32>)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @strides(%q: memref<?x?x4x64xf16, strided<[?, ?, ?, 2]>>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{Q must be contiguous along head_dim (stride 1, as TMA needs), got strides [?, ?, ?, 2]}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16, strided<[?, ?, ?, 2]>>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @mod_yield(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %c = arith.constant 1.0 : f32
    // expected-error @+1 {{in a mask_mod region must yield 'i1', got 'f32'}}
    fa4.yield %c : f32
  }
  return
}

// -----

func.func @dynamic_lse_heads(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x?x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{LSE heads must be static, got shape [?, ?, ?]}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @dynamic_accumulator_dim(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %lse: memref<?x4x?xf32>, %dq: memref<?x?x4x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x?xf32>) {
  // expected-error @+1 {{dq_accum head dim must be static, got shape [?, ?, 4, ?]}}
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv workspace(%delta, %acc)
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32> -> memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x4x?xf32>, memref<?x?x4x?xf32>
  return
}

// -----

// A transposed tile's row vector runs along its columns.
func.func @transposed_lse(%s: tensor<64x32xf32>, %lse: tensor<64xf32>) -> tensor<64x32xf32> {
  // expected-error @+1 {{lse has 64 rows, the tile 32}}
  %p = fa4.probs_from_lse %s, %lse {scale_log2 = 0.18 : f32, transposed} : tensor<64x32xf32>, tensor<64xf32>
  return %p : tensor<64x32xf32>
}

// -----

func.func @transposed_delta(%p: tensor<32x64xf32>, %dp: tensor<32x64xf32>, %delta: tensor<32xf32>) -> tensor<32x64xf32> {
  // expected-error @+1 {{delta has 32 rows, the tile 64}}
  %ds = fa4.softmax_grad %p, %dp, %delta {transposed} : tensor<32x64xf32>, tensor<32xf32>
  return %ds : tensor<32x64xf32>
}

// -----

func.func @prepare_shapes(%o: memref<?x?x4x64xf16>, %do: memref<?x?x4x128xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{must have one shape (and O and dO one type)}}
  fa4.prepare_backward %o, %do -> %delta, %acc : memref<?x?x4x64xf16>, memref<?x?x4x128xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @prepare_delta(%o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %delta: memref<?x2x?xf32>, %acc: memref<?x?x4x64xf32>) {
  // expected-error @+1 {{delta must be an f32 [batch, 4, seq_q] memref}}
  fa4.prepare_backward %o, %do -> %delta, %acc : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x2x?xf32>, memref<?x?x4x64xf32>
  return
}

// -----

func.func @prepare_accumulator(%o: memref<?x?x4x64xf16>, %do: memref<?x?x4x64xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf16>) {
  // expected-error @+1 {{the dQ accumulator must be a rank-4 [batch, seq, heads, head_dim] memref of f32}}
  fa4.prepare_backward %o, %do -> %delta, %acc : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x4x?xf32>, memref<?x?x4x64xf16>
  return
}

// -----

func.func @finish_shapes(%acc: memref<?x?x4x64xf32>, %dq: memref<?x?x2x64xbf16>) {
  // expected-error @+1 {{the dQ accumulator 'memref<?x?x4x64xf32>' and dQ 'memref<?x?x2x64xbf16>' must have one shape}}
  fa4.finish_dq %acc -> %dq {scale = 0.125 : f32} : memref<?x?x4x64xf32>, memref<?x?x2x64xbf16>
  return
}

// -----

func.func @finish_dynamic_heads(%acc: memref<?x?x?x64xf32>, %dq: memref<?x?x?x64xbf16>) {
  // expected-error @+1 {{the dQ accumulator needs static heads and head dim}}
  fa4.finish_dq %acc -> %dq {scale = 0.125 : f32} : memref<?x?x?x64xf32>, memref<?x?x?x64xbf16>
  return
}

// -----

module attributes {fa4.target = #fa4.target<sm_90a>} {
  func.func @transposed_mma_lhs(%i: index) -> tensor<64x64xf32> {
    %ds = fa4.smem_alloc "ds" : <[64, 32], f16, stages = 1>
    %k = fa4.smem_alloc "k" : <[128, 64], f16, stages = 1>
    // expected-error @+1 {{lhs must be [K, 64] (its transpose is the warpgroup's rows), got [64, 32]}}
    %dq = fa4.wgmma_transposed %ds[%i], %k[%i] rows 0 : <[64, 32], f16, stages = 1>, <[128, 64], f16, stages = 1> -> tensor<64x64xf32>
    return %dq : tensor<64x64xf32>
  }
}

// -----

module attributes {fa4.target = #fa4.target<sm_90a>} {
  func.func @transposed_mma_rows(%i: index) -> tensor<64x64xf32> {
    %ds = fa4.smem_alloc "ds" : <[64, 64], f16, stages = 1>
    %k = fa4.smem_alloc "k" : <[128, 64], f16, stages = 1>
    // expected-error @+1 {{rows 96 to 159 are not a block of 64 rows at a multiple of 64 in the 128-row rhs}}
    %dq = fa4.wgmma_transposed %ds[%i], %k[%i] rows 96 : <[64, 64], f16, stages = 1>, <[128, 64], f16, stages = 1> -> tensor<64x64xf32>
    return %dq : tensor<64x64xf32>
  }
}

// -----

module attributes {fa4.target = #fa4.target<sm_90a>} {
  func.func @transposed_mma_result(%i: index) -> tensor<64x128xf32> {
    %ds = fa4.smem_alloc "ds" : <[64, 64], bf16, stages = 1>
    %k = fa4.smem_alloc "k" : <[128, 64], bf16, stages = 1>
    // expected-error @+1 {{result must be tensor<64xNxf32> with N a multiple of 8 up to 64 (the rhs's columns from 0), got 'tensor<64x128xf32>'}}
    %dq = fa4.wgmma_transposed %ds[%i], %k[%i] rows 64 : <[64, 64], bf16, stages = 1>, <[128, 64], bf16, stages = 1> -> tensor<64x128xf32>
    return %dq : tensor<64x128xf32>
  }
}

// -----

module attributes {fa4.target = #fa4.target<sm_90a>} {
  func.func @transposed_mma_column(%i: index) -> tensor<64x64xf32> {
    %ds = fa4.smem_alloc "ds" : <[64, 64], f16, stages = 1>
    %k = fa4.smem_alloc "k" : <[128, 128], f16, stages = 1>
    // expected-error @+1 {{column_offset 32 is not a multiple of 64 inside the rhs's 128 columns}}
    %dq = fa4.wgmma_transposed %ds[%i], %k[%i] rows 0 {column_offset = 32} : <[64, 64], f16, stages = 1>, <[128, 128], f16, stages = 1> -> tensor<64x64xf32>
    return %dq : tensor<64x64xf32>
  }
}

// -----

func.func @accumulate_columns(%t: tensor<64x64xf32>, %acc: memref<?x?x2x96xf32>, %i: index) {
  // expected-error @+1 {{adds columns [64, 128) of 'tensor<64x64xf32>', which must be f32 inside the accumulator's static head dim}}
  fa4.accumulate_dq %t, %acc[%i, %i, %i] {gqa_ratio = 1 : i64, column = 64 : i64} : tensor<64x64xf32>, memref<?x?x2x96xf32>
  return
}

// -----

// The MMAs complete in issue order: a wait must not leave the one it waits
// for among those still running.
module attributes {fa4.target = #fa4.target<sm_90a>} {
  func.func @wait_leaves_it_running(%i: index) -> tensor<64x64xf32> {
    %ds = fa4.smem_alloc "ds" : <[64, 64], f16, stages = 1>
    %k = fa4.smem_alloc "k" : <[128, 64], f16, stages = 1>
    %a = fa4.wgmma_transposed %ds[%i], %k[%i] rows 0 {async} : <[64, 64], f16, stages = 1>, <[128, 64], f16, stages = 1> -> tensor<64x64xf32>
    %b = fa4.wgmma_transposed %ds[%i], %k[%i] rows 64 {async} : <[64, 64], f16, stages = 1>, <[128, 64], f16, stages = 1> -> tensor<64x64xf32>
    // expected-error @+1 {{leaves 2 MMAs pending, but only 1 were issued after the one it waits for}}
    %w = fa4.wgmma_wait %a {pending = 2 : i64} : tensor<64x64xf32>
    %x = fa4.wgmma_wait %b {pending = 0 : i64} : tensor<64x64xf32>
    return %w : tensor<64x64xf32>
  }
}
