//===- Passes.td - the Blackwell wing's passes ------------------*- tablegen -*-===//
//
// Level B -> level C for sm_100a: FA4's warp roles, the K/V pipeline, TMEM
// allocation and the correction, one step per pass.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TARGET_BLACKWELL_PASSES_TD
#define FA4_TARGET_BLACKWELL_PASSES_TD

include "mlir/Pass/PassBase.td"

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

    With `two-cta` the CTAs run as pairs (`fa4.warp_specialize`'s
    `cta_pair`): each task is 512 rows, 256 a CTA, the K/V ring's items
    split between the two (`pair_half`), `fa4.cta_rank` placing each CTA's
    rows. Dense fp16/bf16 forward kernels at head dim 128 with two Q tiles
    a task and 128-key blocks; `on` refuses any other variant, naming why,
    and `auto` picks pairs for such kernels without a causal mask or a
    window (FA4's choice: a pair's CTAs visit the union of their rows'
    blocks).

    Requires: a function with `fa4.spec` holding the tile program of
    `fa4-tile`. Guarantees: the register budgets fit 64 K registers (the
    `fa4.warp_specialize` verifier says which role overflows otherwise); no
    level-B memory op remains.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
  let options = [
    Option<"twoCta", "two-cta", "::mlir::fa4::Toggle",
           "::mlir::fa4::Toggle::Auto",
           "CTA pairs (tcgen05.mma cta_group::2, K/V halved per CTA): on, "
           "off, or auto (on for dense fp16/bf16 hd128 without a causal "
           "mask or a window)",
           "::mlir::fa4::toggleValues()">
  ];
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

def FA4NamedHandoffs : Pass<"fa4-named-handoffs", "::mlir::func::FuncOp"> {
  let summary = "lock-step one-stage hand-offs at named barriers";
  let description = [{
    A one-stage ring that a role of threads fills and one other role empties
    in lock step (the producer waits on the ring's empty barrier before each
    arrive, the consumer on its full barrier before each release) needs no
    phases on its full side: its arrivals and waits alternate. That side
    becomes a named barrier (`fa4.named_barrier_arrive` for the producer,
    `fa4.named_barrier_sync` for the consumer, both roles' threads counted)
    on an id the kernel does not use, as FlashAttention-4's softmax hands
    its statistics to the correction; the consumer's wait is then one
    `bar.sync` instead of a parity, a `try_wait` and its retry branch. The
    statistics rings are such rings; a ring with no free id left keeps its
    mbarrier.
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

#endif // FA4_TARGET_BLACKWELL_PASSES_TD
