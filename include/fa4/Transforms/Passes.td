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
    storage, and nothing is copied.

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
    `fa4.attention` remains; the function carries `fa4.spec`, a dictionary of
    the entry op's configuration and argument positions, for the simulator and
    the later levels.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"rescaleThreshold", "rescale-threshold", "double", "8.0",
           "Keep a row's stale max unless it moved by more than this many "
           "log2 units (0 rescales on every move)">,
    Option<"qTilesPerTask", "q-tiles-per-task", "int64_t", "0",
           "128-row Q tiles per task: 0 for the module's chip's (its "
           "`fa4.target`, else the default chip's): 2 for the Blackwell "
           "schedule (two Q stages), 1 for Hopper's (one tile, split between "
           "two consumer warpgroups)">
  ];
}

//===----------------------------------------------------------------------===//
// Level B -> level C: the Blackwell schedule, one step per pass.
//===----------------------------------------------------------------------===//

def FA4AssignWarpRoles : Pass<"fa4-assign-warp-roles", "::mlir::func::FuncOp"> {
  let summary = "split the tile program over FA4's warp roles (level B -> C)";
  let description = [{
    Re-expresses the tile program `fa4-tile` wrote as one `fa4.warp_specialize`
    with FA4's cast of 16 warps (512 threads):

    | role | warps | registers | job |
    |---|---|---|---|
    | softmax0 | 0-3 | 176 | Q tile 0: mask, online softmax, P into TMEM |
    | softmax1 | 4-7 | 176 | Q tile 1 |
    | correction | 8-11 | 88 | rescale O, O / row_sum, LSE, stage O |
    | mma | 12 | 72 | one elected thread issues both MMAs |
    | epilogue | 13 | 72 | TMA store of O |
    | load | 14 | 72 | TMA loads of Q, K and V |
    | idle | 15 | 72 | |

    (setmaxnreg sets one budget per warpgroup: warps 12-15 share theirs.)

    Data moves between roles only through buffers: Q and K/V tiles in shared
    memory (`fa4.smem_alloc`), S, P and O in tensor memory (`fa4.tmem_alloc`,
    P an f16/bf16 `fa4.tmem_view` of S), the softmax's row statistics in shared
    memory. Every hand-off is a ring item: the producer brackets its writes
    with `fa4.producer_acquire` / `fa4.producer_commit`, each consumer its
    reads with `fa4.consumer_wait` / `fa4.consumer_release`, all indexed by
    running counts that every role derives alike. Each role walks all tasks
    in order (`fa4.task_coords`, static); the MMA warp issues, per KV block,
    both score MMAs and then both value MMAs.

    Requires: a function with `fa4.spec` holding the tile program of
    `fa4-tile`. Guarantees: the register budgets fit 64 K registers (the
    `fa4.warp_specialize` verifier says which role overflows otherwise); no
    level-B memory op remains.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
}

def FA4PipelineStages : Pass<"fa4-pipeline-stages", "::mlir::func::FuncOp"> {
  let summary = "size the rings and interleave the MMA warp's two Q stages";
  let description = [{
    * Q has two stages (one per Q tile); the K/V ring gets as many stages as
      the 227 KB of shared memory hold beside Q, the O staging and the
      statistics (3 for head dim 128 in fp16); `kv-stages` overrides.
    * The MMA warp's per-block stream `S0, S1, O0, O1` becomes FA4's
      interleave: `S0(0) S1(0)`, then per block `O0(k-1) S0(k) O1(k-1) S1(k)`,
      then `O0(n-1) O1(n-1)`, so that one Q tile's softmax runs while the
      tensor core works on the other's MMAs.

    Requires: the output of `fa4-assign-warp-roles`. Guarantees: the shared
    memory the rings take fits the budget (a diagnostic names the bytes
    otherwise); the warp-specialize op carries `fa4.smem_bytes`.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
  let options = [
    Option<"kvStages", "kv-stages", "int64_t", "0",
           "K/V ring stages (0: as many as shared memory holds)">
  ];
}

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

def FA4AllocateTmem : Pass<"fa4-allocate-tmem", "::mlir::func::FuncOp"> {
  let summary = "place S, P and O in the CTA's tensor memory";
  let description = [{
    Assigns each `fa4.tmem_alloc` its first column, in order, first fit
    (S0 at 0, S1 at 128, O0 at 256, O1 at 256 + head_dim rounded up to 64
    columns, whole MMA atoms: 384 at head dim 96); a `fa4.tmem_view`
    (P) shares its source's columns, since P is written only after S is
    consumed. More than 512 columns is a diagnostic naming every buffer and
    its columns. The MMA warp allocates the columns (a power of two) and
    relinquishes the allocation permit at its start; at its end it waits for
    every role that touches TMEM to finish (the `tmem_dealloc` barrier) and
    frees them.
  }];
}

def FA4ExpandCorrection : Pass<"fa4-correction", "::mlir::func::FuncOp"> {
  let summary = "the correction role's TMEM round trips";
  let description = [{
    `fa4.rescale_o` becomes a guarded loop of 16-column chunks, TMEM ->
    registers -> TMEM (`fa4.tmem_load`, `fa4.correction`, `fa4.tmem_store`).
    The guard (`fa4.needs_rescale`, a warp vote) skips the whole round trip
    when no row's max moved and when every move stayed under the rescale
    threshold: in both cases the softmax reported a factor of exactly 1.
    `fa4.finalize_o` becomes the TMEM load of O and `fa4.normalize`; the
    result is staged in shared memory for the epilogue warp.
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect"];
}

//===----------------------------------------------------------------------===//
// Level B -> level C: the Hopper schedule (sm_90a).
//===----------------------------------------------------------------------===//

def FA4HopperWarpgroupRoles
    : Pass<"fa4-hopper-warpgroup-roles", "::mlir::func::FuncOp"> {
  let summary = "split the tile program over Hopper's warpgroups (level B -> C, sm_90a)";
  let description = [{
    The FlashAttention-3 cast, 3 warpgroups (384 threads):

    | role | warps | registers | job |
    |------|-------|-----------|-----|
    | producer  | 0-3  | 40  | its elected thread loads Q, then K and V of each visited block, with TMA |
    | consumer0 | 4-7  | 232 | rows 0-63 of the task's Q tile |
    | consumer1 | 8-11 | 232 | rows 64-127 |

    Each consumer runs, per KV block: `fa4.wgmma_score` (Q and K in shared
    memory, S in registers), the level-B softcap / score_mod / mask /
    online softmax on its 64 rows, `fa4.correction` of its O in registers,
    and `fa4.wgmma_value` (P from registers, V in shared memory); K is
    released right after the score MMA, V after the value MMA. With the
    overlap (FlashAttention-3's intra-warpgroup pipelining) the loop is
    software-pipelined: block k's score MMA and block k-1's value MMA are
    issued `async` before block k's softmax and waited for with
    `fa4.wgmma_wait`, so the tensor core works while the softmax runs.
    With `pingpong` (FlashAttention-3's) the two consumers also take turns
    issuing their MMAs, through named barriers 1 and 2
    (`fa4.named_barrier_sync` / `fa4.named_barrier_arrive`, 256 threads):
    each waits for its turn before its score MMA and hands the turn over
    once its value MMA is issued. After the
    last block it normalizes, stages its half of O in shared memory, stores
    it with TMA and writes its LSE rows.

    Q has one stage, K and V their own rings (as many stages as fit, at most
    4, or `kv-stages`); every hand-off is a ring op, for fa4-insert-barriers.
    Requires the tile program of `fa4-tile q-tiles-per-task=1` (tasks of 128
    rows) and a GQA ratio dividing 64 (O is stored in 64-row boxes).
  }];
  let options = [
    Option<"kvStages", "kv-stages", "int64_t", "0",
           "K and V ring stages (0: as many as shared memory holds, up to 4)">,
    Option<"overlap", "overlap", "::mlir::fa4::Toggle",
           "::mlir::fa4::Toggle::Auto",
           "The consumers' intra-warpgroup overlap of the next S and the "
           "last P·V with the softmax: on, off, or auto (on where it fits "
           "in the registers: not for windows at head dim 128)",
           "::mlir::fa4::toggleValues()">,
    Option<"pingpong", "pingpong", "::mlir::fa4::Toggle",
           "::mlir::fa4::Toggle::Auto",
           "The consumers take turns issuing their MMAs, so that one's "
           "softmax runs under the other's MMAs: on, off, or auto (on with "
           "the overlapped loop)",
           "::mlir::fa4::toggleValues()">
  ];
}

def FA4TileScheduler : Pass<"fa4-tile-scheduler", "::mlir::func::FuncOp"> {
  let summary = "make the kernel persistent: one CTA per SM walks the tasks";
  let description = [{
    Every role's task loop starts at `fa4.cta_id` and strides by
    `fa4.grid_size` (min(sm-count, tasks) CTAs at launch). Causal and
    windowed attention, and attention with a mask_mod, take the tasks in LPT
    order (m_blocks with the most visible KV blocks first, weighed by the
    attribute mask and the mask_mod's bounds); without a mask the order is
    static. The policy
    is recorded as `fa4.grid` on the warp-specialize op.
  }];
  let options = [
    Option<"smCount", "sm-count", "int64_t", "0",
           "SMs of the target: the persistent grid's size (0: the module's "
           "chip's, from its `fa4.target`, else the default chip's)">
  ];
}

def FA4RaiseAttention : Pass<"fa4-raise-attention", "::mlir::func::FuncOp"> {
  let summary = "find attention in linalg-on-tensors IR and rewrite it into fa4.attention";
  let description = [{
    Finds `softmax(scores)·V` written as linalg on tensors, the way
    torch-mlir, IREE and StableHLO→linalg write it, and replaces it with one
    `fa4.attention` (on tensors) reading the function's own arguments.

    The pass follows each rank-4 result back through the ops that compute
    it, as one expression per output element: linalg structured ops (named
    ops such as `linalg.batch_matmul`, `linalg.transpose`,
    `linalg.broadcast`, and `linalg.generic` with any indexing maps) become
    their bodies over affine indices, reductions become sums and maxima over
    a bound index, `linalg.softmax` its definition, and
    `tensor.expand_shape` / `collapse_shape` / `cast` index arithmetic. It
    then matches that expression against attention:
    `Σ_k softmax_k(s)·V` (or `(Σ_k e^{s-m}·V) / Σ_k e^{s-m}`), where
    `s` is a contraction of Q and K over the head dim, wrapped in
    modifications. Q, K and V must be function arguments, all
    `[batch, seq, heads, head_dim]` or all `[batch, heads, seq, head_dim]`
    (the latter sets `heads_first`); K and V may serve several query heads
    through a repeat of their heads (GQA), written with expand / broadcast /
    collapse or an indexing map.

    A multiplication or division of the contraction by a constant becomes
    `scale`. `select(c, s, -inf)` and adding `select(c, 0, -inf)` become
    `mask_mod` (with `linalg.index` positions becoming the region's
    `q_idx` / `kv_idx`). Anything else between the contraction and the
    softmax becomes `score_mod`; tensors those regions read (a bias, a
    document-id table) must be function arguments and become `extras`.

    What the pass cannot prove equivalent it leaves alone, with a remark at
    the result's location saying why: a softmax over another dimension than
    the keys, a scale that is not a constant, a bias computed inside the
    function or broadcast in a way it cannot follow, operand layouts
    fa4.attention does not take, and so on. The rewritten ops it leaves
    unused are erased.
  }];
  let dependentDialects = ["::mlir::fa4::FA4Dialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

#endif // FA4_TRANSFORMS_PASSES_TD
