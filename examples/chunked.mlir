// Chunked local attention, as in Llama 4's local layers: the sequence is cut
// into chunks of 192 positions and a query attends causally within its own
// chunk only, i / 192 == j / 192 && j <= i. The compiler reads the quotient
// equality as a pair of bounds that move by whole chunks (the chunk's first
// and last key), intersects them with the diagonal, and skips every KV block
// outside the query tile's chunks. 192 is deliberately not a multiple of the
// 128-key block: chunk edges fall inside blocks, which then need the element
// mask. bf16, head dim 128, 8 query heads over 2 K/V heads (GQA 4).
func.func @attention(%q: memref<?x?x8x128xbf16>, %k: memref<?x?x2x128xbf16>,
                     %v: memref<?x?x2x128xbf16>, %o: memref<?x?x8x128xbf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x128xbf16>, memref<?x?x2x128xbf16>, memref<?x?x2x128xbf16>
      -> memref<?x?x8x128xbf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %chunk = arith.constant 192 : index
    %query_chunk = arith.divui %i, %chunk : index
    %key_chunk = arith.divui %j, %chunk : index
    %same_chunk = arith.cmpi eq, %query_chunk, %key_chunk : index
    %causal = arith.cmpi ule, %j, %i : index
    %visible = arith.andi %same_chunk, %causal : i1
    fa4.yield %visible : i1
  }
  return
}
