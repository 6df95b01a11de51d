// Document masking: several documents packed into one sequence, each token
// attending causally within its own document. The document id of every
// position is an extra, [batch, seq] i32, and the mask_mod compares the
// query's id with the key's, doc[b, i] == doc[b, j], anded with j <= i.
// The comparison of ids depends on data, so the compiler cannot turn it into
// bounds: it still skips the blocks above the diagonal (the affine part) and
// evaluates the region element by element in every block it visits. fp16,
// head dim 64, 8 query heads over 2 K/V heads (GQA 4).
//
// One id table serves queries and keys, so it is meant for seq_q == seq_k
// (packed pretraining or prefill); i and j are top-left positions.
func.func @attention(%q: memref<?x?x8x64xf16>, %k: memref<?x?x2x64xf16>,
                     %v: memref<?x?x2x64xf16>, %o: memref<?x?x8x64xf16>,
                     %doc: memref<?x?xi32>) {
  fa4.attention %q, %k, %v -> %o extras(%doc : memref<?x?xi32>)
      : memref<?x?x8x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>
      -> memref<?x?x8x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %ids: memref<?x?xi32>):
    %query_doc = memref.load %ids[%b, %i] : memref<?x?xi32>
    %key_doc = memref.load %ids[%b, %j] : memref<?x?xi32>
    %same_doc = arith.cmpi eq, %query_doc, %key_doc : i32
    %causal = arith.cmpi ule, %j, %i : index
    %visible = arith.andi %same_doc, %causal : i1
    fa4.yield %visible : i1
  }
  return
}
