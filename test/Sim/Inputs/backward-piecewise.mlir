// A piecewise score_mod: a kink (max with 0.2), jumps (floor) and keys
// hidden by the score itself (-inf past 1.5). The reference's slope is
// taken at a step no kink or jump straddles; the compiler's is the
// select's branch.
func.func @attention_backward(
    %q: memref<?x?x4x64xbf16>, %k: memref<?x?x2x64xbf16>, %v: memref<?x?x2x64xbf16>, %o: memref<?x?x4x64xbf16>, %do: memref<?x?x4x64xbf16>, %lse: memref<?x4x?xf32>,
    %dq: memref<?x?x4x64xbf16>, %dk: memref<?x?x2x64xbf16>, %dv: memref<?x?x2x64xbf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x64xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc)
      : memref<?x?x4x64xbf16>, memref<?x?x2x64xbf16>, memref<?x?x2x64xbf16>, memref<?x?x4x64xbf16>, memref<?x?x4x64xbf16>, memref<?x4x?xf32>
      -> memref<?x?x4x64xbf16>, memref<?x?x2x64xbf16>, memref<?x?x2x64xbf16>, memref<?x4x?xf32>, memref<?x?x4x64xf32>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %c02 = arith.constant 0.2 : f32
    %c4 = arith.constant 4.0 : f32
    %c025 = arith.constant 0.25 : f32
    %c15 = arith.constant 1.5 : f32
    %ninf = arith.constant 0xFF800000 : f32
    %kink = arith.maximumf %s, %c02 : f32
    %s4 = arith.mulf %s, %c4 : f32
    %fl = math.floor %s4 : f32
    %step = arith.mulf %fl, %c025 : f32
    %sum = arith.addf %kink, %step : f32
    %hide = arith.cmpf ogt, %s, %c15 : f32
    %r = arith.select %hide, %ninf, %sum : f32
    fa4.yield %r : f32
  }
  return
}
