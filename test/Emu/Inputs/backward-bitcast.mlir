// A score_mod that reinterprets the score's bits (f32 -> i32 -> f32): no
// derivative rule applies, and fa4-tile refuses it by name rather than
// treating the integer as a piecewise constant (a zero slope).
func.func @attention_backward(
    %q: memref<?x?x2x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x2x64xf16>, %do: memref<?x?x2x64xf16>, %lse: memref<?x2x?xf32>,
    %dq: memref<?x?x2x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x2x?xf32>, %acc: memref<?x?x2x64xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) {mask = #fa4.mask<none>}
      : memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x2x?xf32>
      -> memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x2x?xf32>, memref<?x?x2x64xf32>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %bits = arith.bitcast %s : f32 to i32
    %one = arith.constant 1 : i32
    %next = arith.addi %bits, %one : i32
    %r = arith.bitcast %next : i32 to f32
    fa4.yield %r : f32
  }
  return
}
