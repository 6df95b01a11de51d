// FP8 with a mask_mod (chunked causal attention) and all three descale
// tables; the region receives every extra, the tables included.
func.func @attention(%q: memref<?x?x6x128xf8E4M3FN>, %k: memref<?x?x2x128xf8E4M3FN>,
                     %v: memref<?x?x2x128xf8E4M3FN>, %o: memref<?x?x6x128xbf16>,
                     %qd: memref<?x2xf32>, %kd: memref<?x2xf32>, %vd: memref<?x2xf32>) {
  fa4.attention %q, %k, %v -> %o
      extras(%qd, %kd, %vd : memref<?x2xf32>, memref<?x2xf32>, memref<?x2xf32>)
      {q_descale = 0 : i64, k_descale = 1 : i64, v_descale = 2 : i64}
      : memref<?x?x6x128xf8E4M3FN>, memref<?x?x2x128xf8E4M3FN>,
        memref<?x?x2x128xf8E4M3FN> -> memref<?x?x6x128xbf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %t0: memref<?x2xf32>,
       %t1: memref<?x2xf32>, %t2: memref<?x2xf32>):
    %chunk = arith.constant 160 : index
    %query_chunk = arith.divui %i, %chunk : index
    %key_chunk = arith.divui %j, %chunk : index
    %same_chunk = arith.cmpi eq, %query_chunk, %key_chunk : index
    %causal = arith.cmpi ule, %j, %i : index
    %visible = arith.andi %same_chunk, %causal : i1
    fa4.yield %visible : i1
  }
  return
}
