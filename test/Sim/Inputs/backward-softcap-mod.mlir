// A softcap written as a score_mod, 30·tanh(s / 30): the backward takes
// the softcap's path (fa4.softcap_grad), as the forward does.
func.func @attention_backward(
    %q: memref<?x?x4x96xf16>, %k: memref<?x?x4x96xf16>, %v: memref<?x?x4x96xf16>, %o: memref<?x?x4x96xf16>, %do: memref<?x?x4x96xf16>, %lse: memref<?x4x?xf32>,
    %dq: memref<?x?x4x96xf16>, %dk: memref<?x?x4x96xf16>, %dv: memref<?x?x4x96xf16>, %delta: memref<?x4x?xf32>, %acc: memref<?x?x4x96xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) {mask = #fa4.mask<causal>}
      : memref<?x?x4x96xf16>, memref<?x?x4x96xf16>, memref<?x?x4x96xf16>, memref<?x?x4x96xf16>, memref<?x?x4x96xf16>, memref<?x4x?xf32>
      -> memref<?x?x4x96xf16>, memref<?x?x4x96xf16>, memref<?x?x4x96xf16>, memref<?x4x?xf32>, memref<?x?x4x96xf32>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %s, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %cap, %t : f32
    fa4.yield %r : f32
  }
  return
}
