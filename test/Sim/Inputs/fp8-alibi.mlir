// FP8 with a score_mod (ALiBi from a per-head slope table) and V's descale
// only: Q's and K's would have to scale the score before the region.
func.func @attention(%q: memref<?x?x4x64xf8E4M3FN>, %k: memref<?x?x4x64xf8E4M3FN>,
                     %v: memref<?x?x4x64xf8E4M3FN>, %o: memref<?x?x4x64xf16>,
                     %slopes: memref<4xf32>, %vd: memref<?x4xf32>) {
  fa4.attention %q, %k, %v -> %o extras(%slopes, %vd : memref<4xf32>, memref<?x4xf32>)
      {mask = #fa4.mask<causal>, v_descale = 1 : i64}
      : memref<?x?x4x64xf8E4M3FN>, memref<?x?x4x64xf8E4M3FN>,
        memref<?x?x4x64xf8E4M3FN> -> memref<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %table: memref<4xf32>, %unused: memref<?x4xf32>):
    %slope = memref.load %table[%h] : memref<4xf32>
    %d = arith.subi %j, %i : index
    %di = arith.index_cast %d : index to i64
    %df = arith.sitofp %di : i64 to f32
    %bias = arith.mulf %slope, %df : f32
    %r = arith.addf %s, %bias : f32
    fa4.yield %r : f32
  }
  return
}
