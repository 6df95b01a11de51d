// Decode against a paged KV cache, as an inference engine holds it: K and V
// are [num_blocks, 16, 8, 128] pages (vLLM's and FlashAttention's layout),
// sequence b's key j is row j % 16 of page block_table[b][j / 16], and its
// cache_seqlens entry says how many of its keys are filled (the keys past it
// weigh nothing; docs/Variants.md says why their V rows must still be
// finite in the last 128-key block). 32 query heads over
// 8 K/V heads (GQA 4: each group's heads share the tile's rows), bf16, the
// causal mask aligned to each sequence's own keys, so one to a few queries
// per sequence (speculative decoding) see the keys before them.
//
//   fa4c examples/paged-kv-cache.mlir -o kv.cubin
//   fa4-emu kv.cubin.json --batch 6 --seq-q 4 --seq-k 1024
func.func @attention(%q: memref<?x?x32x128xbf16>, %k_cache: memref<?x16x8x128xbf16>,
                     %v_cache: memref<?x16x8x128xbf16>, %o: memref<?x?x32x128xbf16>,
                     %cache_seqlens: memref<?xi32>, %block_table: memref<?x?xi32>) {
  fa4.attention %q, %k_cache, %v_cache -> %o
      extras(%cache_seqlens, %block_table : memref<?xi32>, memref<?x?xi32>)
      {mask = #fa4.mask<causal>, seqused_k = 0 : i64, block_table = 1 : i64}
      : memref<?x?x32x128xbf16>, memref<?x16x8x128xbf16>, memref<?x16x8x128xbf16>
      -> memref<?x?x32x128xbf16>
  return
}
