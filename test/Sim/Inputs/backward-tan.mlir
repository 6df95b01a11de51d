// math.tan has no derivative rule: the backward is refused, naming it.
func.func @attention_backward(
    %q: memref<?x?x2x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x2x64xf16>, %do: memref<?x?x2x64xf16>, %lse: memref<?x2x?xf32>,
    %dq: memref<?x?x2x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x2x?xf32>, %acc: memref<?x?x2x64xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc)
      : memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x2x?xf32>
      -> memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x2x?xf32>, memref<?x?x2x64xf32>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %t = math.tan %s : f32
    fa4.yield %t : f32
  }
  return
}
