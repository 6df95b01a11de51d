// A score_mod whose derivative depends on the score, the head and the
// key: s + w[h]·tanh(s)·(j mod 3) − 0.05·s², bf16, head dim 64, no mask.
func.func @attention_backward(
    %q: memref<?x?x4x64xbf16>, %k: memref<?x?x2x64xbf16>, %v: memref<?x?x2x64xbf16>, %o: memref<?x?x4x64xbf16>, %do: memref<?x?x4x64xbf16>, %lse: memref<?x4x?xf32>,
    %dq: memref<?x?x4x64xbf16>, %dk: memref<?x?x2x64xbf16>, %dv: memref<?x?x2x64xbf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>, %weights_arg: memref<4xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) extras(%weights_arg : memref<4xf32>)
      : memref<?x?x4x64xbf16>, memref<?x?x2x64xbf16>, memref<?x?x2x64xbf16>, memref<?x?x4x64xbf16>, memref<?x?x4x64xbf16>, memref<?x4x?xf32>
      -> memref<?x?x4x64xbf16>, memref<?x?x2x64xbf16>, memref<?x?x2x64xbf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %weights: memref<4xf32>):
    %w = memref.load %weights[%h] : memref<4xf32>
    %c3 = arith.constant 3 : index
    %jm = arith.remui %j, %c3 : index
    %jm_i64 = arith.index_cast %jm : index to i64
    %jm_f32 = arith.sitofp %jm_i64 : i64 to f32
    %t = math.tanh %s : f32
    %wt = arith.mulf %w, %t : f32
    %term = arith.mulf %wt, %jm_f32 : f32
    %sq = arith.mulf %s, %s : f32
    %c = arith.constant 0.05 : f32
    %quad = arith.mulf %c, %sq : f32
    %sum = arith.addf %s, %term : f32
    %r = arith.subf %sum, %quad : f32
    fa4.yield %r : f32
  }
  return
}
