// Prefix-LM: the first 200 tokens (the prompt, say) attend to one another
// in both directions, and every later token attends causally to all that
// precedes it, prefix included. The mask_mod says so in one disjunction,
// j <= i || j < 200. Both sides bound only the last key a query sees, so the
// compiler reads the union as one upper bound, max(i, 199), and still skips
// whole KV blocks: a query tile never visits blocks past both its diagonal
// and the prefix. No `mask` attribute: the causal part lives in the region.
// bf16, head dim 128, 8 query heads over 2 K/V heads (GQA 4).
//
// i and j are top-left positions: with seq_q != seq_k the prefix and the
// diagonal both start at key 0, unlike the bottom-right causal attribute.
func.func @attention(%q: memref<?x?x8x128xbf16>, %k: memref<?x?x2x128xbf16>,
                     %v: memref<?x?x2x128xbf16>, %o: memref<?x?x8x128xbf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x8x128xbf16>, memref<?x?x2x128xbf16>, memref<?x?x2x128xbf16>
      -> memref<?x?x8x128xbf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %prefix = arith.constant 200 : index
    %causal = arith.cmpi ule, %j, %i : index
    %in_prefix = arith.cmpi ult, %j, %prefix : index
    %visible = arith.ori %causal, %in_prefix : i1
    fa4.yield %visible : i1
  }
  return
}
