// sqrt(max(s, 0)): below 0 the tangent of the max is 0 and sqrt's slope
// at 0 infinite; the derivative keeps the 0 (not 0·∞ = NaN), as autograd's
// backward does. And 0^(s²+1) + s, whose exponent's slope at a zero base is 0.
func.func @attention_backward(
    %q: memref<?x?x2x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x2x64xf16>, %do: memref<?x?x2x64xf16>, %lse: memref<?x2x?xf32>,
    %dq: memref<?x?x2x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x2x?xf32>, %acc: memref<?x?x2x64xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) {mask = #fa4.mask<causal>}
      : memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x2x?xf32>
      -> memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x2x?xf32>, memref<?x?x2x64xf32>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %relu = arith.maximumf %s, %zero : f32
    %root = math.sqrt %relu : f32
    %sq = arith.mulf %s, %s : f32
    %e = arith.addf %sq, %one : f32
    %p = math.powf %zero, %e : f32
    %t = arith.addf %root, %p : f32
    %r = arith.addf %t, %s : f32
    fa4.yield %r : f32
  }
  return
}
