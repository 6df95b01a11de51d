// FP8 with a score_mod (ALiBi from a per-head slope table) and the three
// descales: Q's times K's scales each score before the region sees it.
func.func @attention(%q: memref<?x?x4x64xf8E4M3FN>, %k: memref<?x?x4x64xf8E4M3FN>,
                     %v: memref<?x?x4x64xf8E4M3FN>, %o: memref<?x?x4x64xf16>,
                     %slopes: memref<4xf32>, %qd: memref<?x4xf32>,
                     %kd: memref<?x4xf32>, %vd: memref<?x4xf32>) {
  fa4.attention %q, %k, %v -> %o
      extras(%slopes, %qd, %kd, %vd : memref<4xf32>, memref<?x4xf32>, memref<?x4xf32>, memref<?x4xf32>)
      {mask = #fa4.mask<causal>, q_descale = 1 : i64, k_descale = 2 : i64, v_descale = 3 : i64}
      : memref<?x?x4x64xf8E4M3FN>, memref<?x?x4x64xf8E4M3FN>,
        memref<?x?x4x64xf8E4M3FN> -> memref<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %table: memref<4xf32>, %t1: memref<?x4xf32>, %t2: memref<?x4xf32>,
       %t3: memref<?x4xf32>):
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
