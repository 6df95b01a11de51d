// A tanh softcap (as Gemma 2 and Grok-1 use), 30 * tanh(s / 30), written as
// a score_mod rather than the `softcap` attribute: the region receives the
// score already multiplied by the softmax scale (1/sqrt(96) here), so it caps
// exactly what the attribute form caps, and the attribute stays 0 as a
// score_mod requires. math.tanh keeps every score within (-30, 30) before the
// softmax. Causal, fp16, head dim 96, 8 query heads over 8 K/V heads.
func.func @attention(%q: memref<?x?x8x96xf16>, %k: memref<?x?x8x96xf16>,
                     %v: memref<?x?x8x96xf16>, %o: memref<?x?x8x96xf16>) {
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<causal>}
      : memref<?x?x8x96xf16>, memref<?x?x8x96xf16>, memref<?x?x8x96xf16>
      -> memref<?x?x8x96xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %cap = arith.constant 30.0 : f32
    %ratio = arith.divf %s, %cap : f32
    %squashed = math.tanh %ratio : f32
    %capped = arith.mulf %cap, %squashed : f32
    fa4.yield %capped : f32
  }
  return
}
