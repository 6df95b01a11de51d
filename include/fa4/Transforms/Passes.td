//===- Passes.td - fa4 passes ------------------------------*- tablegen -*-===//

#ifndef FA4_TRANSFORMS_PASSES_TD
#define FA4_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def FA4SetTarget : Pass<"fa4-set-target", "::mlir::ModuleOp"> {
  let summary = "record the chip the module is compiled for (`fa4.target`)";
  let description = [{
    Writes `fa4.target = #fa4.target<CHIP>` on the module: the pipeline's
    first step. Every pass whose work depends on the chip reads it there —
    tiling (Q tiles per task), the family's schedule passes (which refuse a
    module for another family's chip), the tile scheduler (the SM count),
    fa4-to-nvvm (the NVVM target and the shared-memory limit) — so that a
    module carries its target from level A to level D and a pass run on its
    own (`fa4-opt`) compiles for the same chip as the pipeline.

    A module that already names a chip keeps it when it is this one; another
    chip is an error naming both (a module is compiled for one chip).
  }];
  let dependentDialects = ["::mlir::fa4::FA4Dialect"];
  let options = [
    Option<"chip", "chip", "std::string",
           "::mlir::fa4::target::defaultChip().name.str()",
           "The chip (a row of fa4/Target/Target.h's table)">
  ];
}

def FA4PromoteDestinations : Pass<"fa4-promote-destinations", "::mlir::func::FuncOp"> {
  let summary = "make the destinations bufferization allocated for fa4.attention parameters";
  let description = [{
    After bufferization, an `fa4.attention` whose O (or LSE) came from a
    `tensor.empty` writes into a `memref.alloc` of its function, which the
    function returns. A kernel's buffers are its parameters: this pass
    replaces such an allocation with a new argument appended to the
    function, removes it from the function's results, and leaves every other
    use of the allocation on the new argument. An allocation that the
    function does anything else with than hand to fa4.attention and return
    is left alone (and fa4-tile then says which operand is not an argument).

    A `heads_first` op on tensors bufferizes into transposed views of its
    buffers. Where Q, K, V or O is such a view of an argument (used only
    there) or of an allocation, the view itself becomes the parameter: its
    strided type tells the tensor map the `[batch, heads, seq, head_dim]`
    storage, and nothing is copied. Likewise the raise's rank-3 form: a Q,
    K or V that is a `memref.expand_shape` view of an argument (`[batch·heads,
    seq, head_dim]` seen as `[batch·heads, seq, 1, head_dim]`) makes the
    argument take the view's type, and an O returned through a
    `memref.collapse_shape` view becomes a parameter of the expanded type.

    Requires: bufferized IR. Guarantees: each such destination is an
    argument of the function; the function returns what it returned before,
    minus those buffers.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

def FA4TileAttention : Pass<"fa4-tile", "::mlir::func::FuncOp"> {
  let summary = "lower fa4.attention (level A) to the FlashAttention tile program (level B)";
  let description = [{
    Replaces the function's `fa4.attention` with the tile program of
    FlashAttention, one task per (batch, K/V head, m_block):

    * an m_block is two Q tiles of 128 GQA-packed rows (packed row `r` is query
      position `r / ratio` of the group's head `r % ratio`), so one K/V tile
      serves every query head of its group;
    * `fa4.kv_block_range` splits the KV blocks into the ones straddling a mask
      boundary (masked before the softmax) and the fully visible ones (no mask
      work); fully masked blocks lie outside the loop bounds;
    * three `scf.for` loops visit the KV blocks last to first (the masked high
      end first, as FlashAttention-4 does), carrying the row max, row sum and
      output accumulator of both Q tiles;
    * the softmax scale is folded into `scale_log2 = scale · log2(e)` (with a
      softcap, `log2(e)`: the softcap op applies the scale);
    * normalization is deferred to after the loop; the LSE is stored when the
      entry op asks for it.

    Requires: at most one `fa4.attention` per function, whose memrefs are the
    function's arguments (they become kernel parameters). Guarantees: no
    `fa4.attention` remains; the function carries `fa4.spec`, a
    `#fa4.spec<...>` of the entry op's configuration and argument positions,
    for the simulator and the later levels.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"rescaleThreshold", "rescale-threshold", "double", "8.0",
           "Keep a row's stale max unless it moved by more than this many "
           "log2 units (0 rescales on every move; FP8 inputs always take "
           "0, their shifted probabilities having no room for a stale "
           "max)">,
    Option<"qTilesPerTask", "q-tiles-per-task", "int64_t", "0",
           "128-row Q tiles per task: 0 for the module's chip's choice at "
           "the head dims (its `fa4.target`, else the default chip's): 2 "
           "for the Blackwell schedule up to head dim 192 (two Q stages), "
           "1 past it (S double-buffered over K/V blocks; 1 is taken below "
           "it too), 1 for Hopper's (one tile, split between its consumer "
           "warpgroups)">,
    Option<"qTileRows", "q-tile-rows", "int64_t", "0",
           "Rows of a Q tile: 0 for the module's chip's choice (128), 128, "
           "or 192 on Hopper (three consumer warpgroups of 64 rows, "
           "FlashAttention-3's hd64 tile; fp16/bf16 at Q/K head dim up to "
           "64, K/V blocks of at most 128 keys, without split-KV, varlen, "
           "a paged cache, seqused_k or a block mask)">,
    Option<"blockN", "block-n", "int64_t", "0",
           "Keys of a K/V block: 0 for the module's chip's choice at the "
           "attention's head dims (128; on Hopper at head dim 256 80, or "
           "64 with a paged cache or split-KV). "
           "Blackwell takes 128 only, Hopper a multiple of 16 from 16 to "
           "256 (128 for FP8)">
  ];
}

//===----------------------------------------------------------------------===//
// Level B -> level C: the steps every family's schedule shares. The
// families' own steps are their wings' (fa4/Target/Blackwell/Passes.td,
// fa4/Target/Hopper/Passes.td).
//===----------------------------------------------------------------------===//

def FA4InsertBarriers : Pass<"fa4-insert-barriers", "::mlir::func::FuncOp"> {
  let summary = "turn ring hand-offs into mbarriers of three kinds";
  let description = [{
    Each buffer with hand-offs gets a `full` mbarrier array (producer to
    consumers) and, when its producer ever waits for it, an `empty` one
    (consumers to producer), one barrier per stage. The kind follows what
    completes the hand-off:

    * `tma`: a TMA load fills the stage; the producer announces the bytes with
      `fa4.mbarrier_expect_tx` and the load signals the barrier;
    * `tcgen05`: the tensor core produced (S, O) or consumed (K/V, Q, P) it;
      the MMA warp arrives with `fa4.mma_commit` after its last op on it;
    * `threads`: a role's threads wrote or read it; each arrives
      (`fa4.mbarrier_arrive`), the count being the role's thread count.

    Waits use the item's round parity (`fa4.mbarrier_wait`); a producer waits
    on the `empty` barrier for the previous round (`prior`). The value MMA so
    waits on three gates: V landed (kv_full), P written (P_full), O rescaled
    or released by correction (O_empty); a K/V stage returns to the loader
    when the commit after the last MMA reading it fires. The table of
    barriers (name, kind, count, stages, producer, consumers) is written as
    `fa4.barriers` on the warp-specialize op.
  }];
}

def FA4TileScheduler : Pass<"fa4-tile-scheduler", "::mlir::func::FuncOp"> {
  let summary = "make the kernel persistent: one CTA per SM walks the tasks";
  let description = [{
    Every role's task loop starts at `fa4.cta_id` and strides by
    `fa4.grid_size` (min(sm-count, tasks) CTAs at launch). Causal attention
    (and a window unbounded on the left, causal's shape) and attention with
    a mask_mod take the tasks in LPT order (m_blocks with the most visible
    KV blocks first, weighed by the attribute mask and the mask_mod's
    bounds); without a mask, and for other windows (whose work differs only
    at the sequence's ends), the order is static. The grid is recorded as `fa4.grid = #fa4.grid<sm_count = N,
    order = static|lpt>` on the warp-specialize op.

    With `grid=per-task` the grid has a CTA per task (`sm_count` 2^31 - 1,
    a cap no launch reaches): the hardware hands the CTAs, in the order, to
    the SMs as they free up, a dynamic schedule. `auto` takes it for
    Hopper's dense causal forward (no mask_mod, paged cache, seqused_k,
    split-KV or varlen) in fp16 or bf16 at Q/K head dims 96 to 256 (e4m3:
    192 and 256), whether
    or not `sm-count` is given (it sizes a persistent grid), and the
    persistent grid elsewhere.

    With `l2-section-bytes` (by default where the grid is per-task), causal's
    LPT order takes the (batch, head group) pairs in sections whose K and V fit that much L2
    (`fa4.task_coords`'s `l2_keys`: the budget over a key's K and V bytes),
    so that the tasks in flight share the K and V of a few heads instead of
    reading every head's at once.
  }];
  let options = [
    Option<"smCount", "sm-count", "int64_t", "0",
           "SMs of the target: the persistent grid's size (0: the module's "
           "chip's, from its `fa4.target`, else the default chip's)">,
    Option<"gridPolicy", "grid", "std::string", "\"auto\"",
           "persistent (min(sm-count, tasks) CTAs walking the tasks), "
           "per-task (a CTA per task: sm_count 2^31 - 1) or auto (per-task "
           "for Hopper's dense causal forward at head dims 96 to 256 "
           "(e4m3: 192 and 256), as the H200 and an H100 measured; else "
           "persistent)">,
    Option<"l2SectionBytes", "l2-section-bytes", "int64_t", "-1",
           "L2 bytes of K and V a causal LPT order's section of heads may "
           "read (-1: 50 MiB, FA4's budget, with a per-task grid and none "
           "with a persistent one; 0: none, every head's tasks of one "
           "m_block together)">
  ];
}

#endif // FA4_TRANSFORMS_PASSES_TD
