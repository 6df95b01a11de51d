// ALiBi's backward (examples/alibi.mlir's variant, GQA 4, causal): the
// score_mod adds slope[h]·(j − i), whose derivative in the score is 1.
func.func @attention_backward(
    %q: memref<?x?x16x128xf16>, %k: memref<?x?x4x128xf16>, %v: memref<?x?x4x128xf16>, %o: memref<?x?x16x128xf16>, %do: memref<?x?x16x128xf16>, %lse: memref<?x16x?xf32>,
    %dq: memref<?x?x16x128xf16>, %dk: memref<?x?x4x128xf16>, %dv: memref<?x?x4x128xf16>, %delta: memref<?x16x?xf32>, %acc: memref<?x?x16x128xf32>, %slopes: memref<16xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) extras(%slopes : memref<16xf32>) {mask = #fa4.mask<causal>}
      : memref<?x?x16x128xf16>, memref<?x?x4x128xf16>, memref<?x?x4x128xf16>, memref<?x?x16x128xf16>, memref<?x?x16x128xf16>, memref<?x16x?xf32>
      -> memref<?x?x16x128xf16>, memref<?x?x4x128xf16>, memref<?x?x4x128xf16>, memref<?x16x?xf32>, memref<?x?x16x128xf32>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %slope_of: memref<16xf32>):
    %slope = memref.load %slope_of[%h] : memref<16xf32>
    %distance = arith.subi %j, %i : index
    %distance_i64 = arith.index_cast %distance : index to i64
    %distance_f32 = arith.sitofp %distance_i64 : i64 to f32
    %bias = arith.mulf %slope, %distance_f32 : f32
    %biased = arith.addf %s, %bias : f32
    fa4.yield %biased : f32
  }
  return
}
