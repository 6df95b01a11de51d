// A backward whose regions read no memory: an ALiBi-like bias with a slope
// per query head (computed, not loaded) and a smooth score_mod, and a
// mask_mod the bounds cannot capture (keys whose index is a multiple of 5
// are hidden, except from the diagonal on), over a causal mask; GQA 3, head
// dim 64, fp16.
func.func @attention_backward(
    %q: memref<?x?x6x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x6x64xf16>, %do: memref<?x?x6x64xf16>, %lse: memref<?x6x?xf32>,
    %dq: memref<?x?x6x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x6x?xf32>, %acc: memref<?x?x6x64xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) {mask = #fa4.mask<causal>}
      : memref<?x?x6x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x6x64xf16>, memref<?x?x6x64xf16>, memref<?x6x?xf32>
      -> memref<?x?x6x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x6x?xf32>, memref<?x?x6x64xf32>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %one = arith.constant 1 : index
    %h1 = arith.addi %h, %one : index
    %hi = arith.index_cast %h1 : index to i32
    %hf = arith.sitofp %hi : i32 to f32
    %quarter = arith.constant -0.03125 : f32
    %slope = arith.mulf %hf, %quarter : f32
    %d = arith.subi %i, %j : index
    %di = arith.index_cast %d : index to i32
    %df = arith.sitofp %di : i32 to f32
    %bias = arith.mulf %slope, %df : f32
    %half = arith.constant 0.5 : f32
    %t = math.tanh %s : f32
    %wiggle = arith.mulf %half, %t : f32
    %r0 = arith.addf %s, %wiggle : f32
    %r = arith.addf %r0, %bias : f32
    fa4.yield %r : f32
  }
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %c5 = arith.constant 5 : index
    %c0 = arith.constant 0 : index
    %m = arith.remui %j, %c5 : index
    %hidden = arith.cmpi eq, %m, %c0 : index
    %diag = arith.cmpi eq, %i, %j : index
    %shown = arith.cmpi ne, %m, %c0 : index
    %visible = arith.ori %shown, %diag : i1
    fa4.yield %visible : i1
  }
  return
}
