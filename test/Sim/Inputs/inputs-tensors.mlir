// An entry on tensors whose arguments are not in Q, K, V order: K is #0,
// the ALiBi slopes (reaching the op through bufferization.to_buffer) #1, Q
// #2, V #3; O is made with tensor.empty and returned. fp16, 4 query heads
// over 2 K/V heads, head dim 64, causal.
func.func @attention(%k: tensor<?x?x2x64xf16>, %slopes: tensor<4xf32>,
                     %q: tensor<?x?x4x64xf16>, %v: tensor<?x?x2x64xf16>)
    -> tensor<?x?x4x64xf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %batch = tensor.dim %q, %c0 : tensor<?x?x4x64xf16>
  %seq = tensor.dim %q, %c1 : tensor<?x?x4x64xf16>
  %init = tensor.empty(%batch, %seq) : tensor<?x?x4x64xf16>
  %slope_table = bufferization.to_buffer %slopes : tensor<4xf32> to memref<4xf32>
  %o = fa4.attention %q, %k, %v -> %init extras(%slope_table : memref<4xf32>)
      {mask = #fa4.mask<causal>}
      : tensor<?x?x4x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>
      -> tensor<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %slope_of: memref<4xf32>):
    %slope = memref.load %slope_of[%h] : memref<4xf32>
    %distance = arith.subi %j, %i : index
    %distance_i64 = arith.index_cast %distance : index to i64
    %distance_f32 = arith.sitofp %distance_i64 : i64 to f32
    %bias = arith.mulf %slope, %distance_f32 : f32
    %biased = arith.addf %s, %bias : f32
    fa4.yield %biased : f32
  }
  return %o : tensor<?x?x4x64xf16>
}
