// Document masking with a block mask: examples/document.mlir's mask_mod
// (each token attends causally within its own document), plus the second
// extra, named by `block_mask = 1`, that says per block of 128 queries which
// KV blocks (of 128 keys) hold a key of the query's documents and which lie
// wholly inside them: [batch, 1, ceil(seq_q / 128), 4] i32 of (begin,
// full_begin, full_end, end), the same for every head (size 1). The kernel
// then visits only [begin, end) of each query block, blocks before the
// query's document included no more, and runs the id comparison only
// outside [full_begin, full_end); the causal part is checked against the
// diagonal as before. Whoever launches it computes the table from the ids,
// as FlexAttention's create_block_mask does; fa4-sim and fa4-emu compute it
// from the mask_mod. fp16, head dim 64, GQA 4.
func.func @attention(%q: memref<?x?x8x64xf16>, %k: memref<?x?x2x64xf16>,
                     %v: memref<?x?x2x64xf16>, %o: memref<?x?x8x64xf16>,
                     %doc: memref<?x?xi32>, %blocks: memref<?x1x?x4xi32>) {
  fa4.attention %q, %k, %v -> %o
      extras(%doc, %blocks : memref<?x?xi32>, memref<?x1x?x4xi32>)
      {block_mask = 1 : i64}
      : memref<?x?x8x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>
      -> memref<?x?x8x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %ids: memref<?x?xi32>,
       %table: memref<?x1x?x4xi32>):
    %query_doc = memref.load %ids[%b, %i] : memref<?x?xi32>
    %key_doc = memref.load %ids[%b, %j] : memref<?x?xi32>
    %same_doc = arith.cmpi eq, %query_doc, %key_doc : i32
    %causal = arith.cmpi ule, %j, %i : index
    %visible = arith.andi %same_doc, %causal : i1
    fa4.yield %visible : i1
  }
  return
}
