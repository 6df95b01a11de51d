//===- FA4ScheduleOps.td - level C: the Blackwell schedule -*- tablegen -*-===//
//
// Who does what when: warp roles as regions, staged SMEM and TMEM buffers,
// mbarriers with a kind, asynchronous TMA and tensor-core ops, and the
// persistent tile scheduler. Free of NVVM details: the conversion to NVVM
// decides instructions, descriptors and addresses.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_DIALECT_FA4_IR_FA4SCHEDULEOPS_TD
#define FA4_DIALECT_FA4_IR_FA4SCHEDULEOPS_TD

include "fa4/Dialect/FA4/IR/FA4Types.td"
include "mlir/IR/OpBase.td"

def FA4_AnyBuffer : AnyTypeOf<[FA4_SmemType, FA4_TmemType]>;

//===----------------------------------------------------------------------===//
// Roles
//===----------------------------------------------------------------------===//

def FA4_WarpSpecializeOp : FA4_Op<"warp_specialize",
    [SingleBlock, NoTerminator]> {
  let summary = "the CTA's warps, split into roles that run concurrently";
  let description = [{
    Holds one `fa4.role` per job of the CTA. Every role runs its region at the
    same time as the others; they share the buffers and mbarriers defined
    before this op and nothing else. The verifier checks that the roles'
    warps are disjoint and that their register budgets fit the 64 K registers
    of an SM.

    ```mlir
    fa4.warp_specialize {
      fa4.role "load" warps(14, 1) registers(48) { ... }
      fa4.role "mma" warps(12, 1) registers(72) { ... }
    }
    ```

    With `cta_pair` (Blackwell) the CTAs run as clusters of two on paired
    SMs, each pair on one task's Q rows, 256 a CTA (`fa4.cta_rank` says
    which half): both CTAs walk the same K/V blocks, the union of their
    rows' ranges, and the tensor core of the pair multiplies both CTAs' Q
    tiles at once (`tcgen05.mma.cta_group::2`, M = 256), each CTA holding
    half of every K/V item (the `pair_half` ring). `fa4.cta_id` and
    `fa4.grid_size` count pairs. The level-C program is each CTA's, with
    the pair's tiles read whole (fa4-sim runs it so); fa4-to-nvvm maps the
    hand-offs onto the pair (docs/TwoCta.md).
  }];
  let arguments = (ins UnitAttr:$cta_pair);
  let regions = (region SizedRegion<1>:$roles);
  let assemblyFormat = "attr-dict-with-keyword $roles";
  // Checked after its roles, which validate their own warps first.
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// Total threads of the CTA: 32 per warp of every role.
    int64_t getNumThreads();
  }];
}

def FA4_RoleOp : FA4_Op<"role", [SingleBlock, NoTerminator,
    HasParent<"WarpSpecializeOp">]> {
  let summary = "one job of the CTA: warps, a register budget and a program";
  let description = [{
    Warps `first_warp` to `first_warp + num_warps - 1` run `body`, each thread
    limited to `registers` registers (set with `setmaxnreg` at the start of the
    role). Within a role, tensor-core and TMA ops are issued by one elected
    thread; tiles held in registers are spread over the role's threads, one
    TMEM lane (one row) per thread of a warpgroup.

    ```mlir
    fa4.role "softmax0" warps(0, 4) registers(176) {
      ...
    }
    ```
  }];
  let arguments = (ins StrAttr:$name, I64Attr:$first_warp, I64Attr:$num_warps,
    I64Attr:$registers);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $name `warps` `(` $first_warp `,` $num_warps `)` `registers` `(`
    $registers `)` attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumThreads() { return getNumWarps() * 32; }
  }];
}

//===----------------------------------------------------------------------===//
// Memories
//===----------------------------------------------------------------------===//

def FA4_SmemAllocOp : FA4_Op<"smem_alloc"> {
  let summary = "a staged shared-memory buffer of the CTA";
  let description = [{
    ```mlir
    %kv = fa4.smem_alloc "kv" : !fa4.smem<[128, 128], f16, stages = 3>
    ```

    With `pair_half` (a `cta_pair` schedule's K/V ring) each CTA of the
    pair holds half of every item: K's keys split (rank r holds keys
    `r * rows / 2` on), V's head-dim columns split (rank r holds columns
    `r * cols / 2` on), the halves the pair's `cta_group::2` MMAs read as
    their B operand. The type is the whole item's, as the level-C program
    reads it; a CTA's shared memory holds `getCtaStageBytes()` a stage.
  }];
  let arguments = (ins StrAttr:$name, UnitAttr:$pair_half);
  let results = (outs FA4_SmemType:$buffer);
  let assemblyFormat = "$name attr-dict `:` type($buffer)";
  let extraClassDeclaration = [{
    /// Bytes of one stage in this CTA's shared memory: half the item's in
    /// a pair's split ring.
    int64_t getCtaStageBytes() {
      int64_t bytes = getBuffer().getType().getStageBytes();
      return getPairHalf() ? bytes / 2 : bytes;
    }
  }];
}

def FA4_TmemAllocOp : FA4_Op<"tmem_alloc", [FA4_BlackwellOnly]> {
  let summary = "an f32 tensor-memory buffer (an accumulator)";
  let description = [{
    One 128-lane accumulator. `column_offset`, the first 32-bit column it
    occupies in the CTA's TMEM allocation, is assigned by
    `fa4-allocate-tmem`.

    ```mlir
    %s0 = fa4.tmem_alloc "S0" {column_offset = 0 : i64}
        : !fa4.tmem<[128, 128], f32>
    ```
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<I64Attr>:$column_offset);
  let results = (outs FA4_TmemType:$buffer);
  let assemblyFormat = "$name attr-dict `:` type($buffer)";
  let hasVerifier = 1;
}

def FA4_TmemViewOp : FA4_Op<"tmem_view", [FA4_BlackwellOnly]> {
  let summary = "reinterpret a TMEM buffer's columns with another element type";
  let description = [{
    The view shares the source's columns from its first one: P, an f16 view
    of S, packs two probabilities per 32-bit column, so 128 of them occupy the
    first 64 columns of S. Writing the view overwrites S; a producer writes it
    only after S has been consumed.

    ```mlir
    %p0 = fa4.tmem_view "P0" %s0 : !fa4.tmem<[128, 128], f32> -> !fa4.tmem<[128, 128], f16>
    ```
  }];
  let arguments = (ins StrAttr:$name, FA4_TmemType:$source);
  let results = (outs FA4_TmemType:$view);
  let assemblyFormat = [{
    $name $source attr-dict `:` type($source) `->` type($view)
  }];
  let hasVerifier = 1;
}

def FA4_MBarrierAllocOp : FA4_Op<"mbarrier_alloc"> {
  let summary = "an array of mbarriers in shared memory";
  let description = [{
    `count` is the number of arrivals that complete a phase: 1 for `tma` and
    `tcgen05` barriers (one elected thread announces the bytes or commits),
    the arriving role's thread count for `threads` barriers.

    ```mlir
    %full = fa4.mbarrier_alloc "kv_full" {count = 1 : i64}
        : !fa4.mbarrier<tma, stages = 3>
    ```
  }];
  let arguments = (ins StrAttr:$name, ConfinedAttr<I64Attr, [IntPositive]>:$count);
  let results = (outs FA4_MBarrierType:$barrier);
  let assemblyFormat = "$name attr-dict `:` type($barrier)";
}

//===----------------------------------------------------------------------===//
// Hand-offs before barriers exist
//===----------------------------------------------------------------------===//

class FA4_HandoffOp<string mnemonic, string what> : FA4_Op<mnemonic> {
  let summary = what;
  let arguments = (ins FA4_AnyBuffer:$buffer, Index:$count);
  let assemblyFormat = "$buffer `[` $count `]` attr-dict `:` type($buffer)";
}

def FA4_ProducerAcquireOp : FA4_HandoffOp<"producer_acquire",
    "wait until ring item `count`'s stage is free to be written"> {
  let description = [{
    A hand-off between roles, written by `fa4-assign-warp-roles` and replaced
    by mbarrier waits in `fa4-insert-barriers`. The stage of item `count` was
    last used by item `count - stages`; the producer waits for its consumers
    to release it (at once in the first round).

    ```mlir
    fa4.producer_acquire %kv[%n] : !fa4.smem<[128, 128], f16, stages = 3>
    ```
  }];
}

def FA4_ProducerCommitOp : FA4_HandoffOp<"producer_commit",
    "ring item `count` is written (by the preceding ops of this role)"> {
  let description = [{
    ```mlir
    fa4.producer_commit %kv[%n] : !fa4.smem<[128, 128], f16, stages = 3>
    ```
  }];
}

def FA4_ConsumerWaitOp : FA4_HandoffOp<"consumer_wait",
    "wait until ring item `count` has been written"> {
  let description = [{
    ```mlir
    fa4.consumer_wait %kv[%n] : !fa4.smem<[128, 128], f16, stages = 3>
    ```
  }];
}

def FA4_ConsumerReleaseOp : FA4_HandoffOp<"consumer_release",
    "this role is done with ring item `count`"> {
  let description = [{
    ```mlir
    fa4.consumer_release %kv[%n] : !fa4.smem<[128, 128], f16, stages = 3>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// mbarriers
//===----------------------------------------------------------------------===//

class FA4_BarrierOp<string mnemonic, list<Trait> traits = []>
    : FA4_Op<mnemonic, traits> {
  let arguments = (ins FA4_MBarrierType:$barrier, Index:$count);
  let assemblyFormat = "$barrier `[` $count `]` attr-dict `:` type($barrier)";
}

def FA4_MBarrierWaitOp : FA4_Op<"mbarrier_wait"> {
  let summary = "wait for a phase of one barrier of the array";
  let description = [{
    Waits on barrier `count % stages` for the completion of its phase
    `count / stages`, by that phase's parity (as `try_wait.parity` does).
    With `prior`, waits for the phase before it instead, which a fresh barrier
    counts as complete: a producer waits so for its consumers to have
    released the stage's previous round.

    ```mlir
    fa4.mbarrier_wait %kv_full[%n] : !fa4.mbarrier<tma, stages = 3>
    fa4.mbarrier_wait %kv_empty[%n] prior : !fa4.mbarrier<tcgen05, stages = 3>
    ```
  }];
  let arguments = (ins FA4_MBarrierType:$barrier, Index:$count, UnitAttr:$prior);
  let assemblyFormat = [{
    $barrier `[` $count `]` (`prior` $prior^)? attr-dict `:` type($barrier)
  }];
}

def FA4_MBarrierArriveOp : FA4_BarrierOp<"mbarrier_arrive"> {
  let summary = "every thread of this role arrives on a barrier";
  let description = [{
    Counts one arrival per thread of the enclosing role on barrier
    `count % stages`.

    ```mlir
    fa4.mbarrier_arrive %p_full[%n] : !fa4.mbarrier<threads, stages = 1>
    ```
  }];
  let hasVerifier = 1;
}

def FA4_MBarrierExpectTxOp : FA4_Op<"mbarrier_expect_tx"> {
  let summary = "one elected thread arrives and announces transaction bytes";
  let description = [{
    The phase completes once the arrival count is met and the announced
    bytes have landed (TMA ops signalling this barrier deliver them).

    ```mlir
    fa4.mbarrier_expect_tx %kv_full[%n], 32768 : !fa4.mbarrier<tma, stages = 3>
    ```
  }];
  let arguments = (ins FA4_MBarrierType:$barrier, Index:$count,
    ConfinedAttr<I64Attr, [IntPositive]>:$bytes);
  let assemblyFormat = [{
    $barrier `[` $count `]` `,` $bytes attr-dict `:` type($barrier)
  }];
}

def FA4_MmaCommitOp : FA4_BarrierOp<"mma_commit", [FA4_BlackwellOnly]> {
  let summary = "arrive on a barrier once every tensor-core op issued so far is done";
  let description = [{
    `tcgen05.commit`: tracks all earlier tensor-core ops of the issuing
    thread; the arrival happens when they complete.

    ```mlir
    fa4.mma_commit %s_full[%n] : !fa4.mbarrier<tcgen05, stages = 1>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// Asynchronous copies and tensor-core ops
//===----------------------------------------------------------------------===//

def FA4_TmaLoadOp : FA4_Op<"tma_load", [AttrSizedOperandSegments]> {
  let summary = "asynchronous tile copy from global to shared memory";
  let description = [{
    Copies the tile at (`batch`, `head`, `row`) into ring item `count` of
    `buffer`. With `gqa_ratio` r, packed row `p` comes from sequence position
    `(row + p) / r` of query head `head * r + (row + p) % r` (Q tiles); with
    r = 1 row `p` is position `row + p` of head `head` (K and V tiles). Rows
    past the sequence are zero-filled, never read. On completion the bytes
    are delivered to `barrier` (added by `fa4-insert-barriers`). With a
    `block_table`, `source` is a paged K/V cache and the rows are gathered
    page by page as `fa4.load_kv_tile` says; with `clear_from`, the rows
    from `clear_from` on are zeroed after the copy lands and before the
    barrier completes (`fa4.load_kv_tile`'s, for a sequence's last V tile:
    fa4-to-nvvm routes such a copy through a barrier of the loader's own,
    zeroes the rows and then arrives on `barrier` itself). A tensor whose
    head dim is narrower than the buffer's columns fills the first columns
    of each row of the item (V of head dim 128 in a K/V ring sized for K's
    192); the rest of the item is left as it was, and only the tile's bytes
    are delivered. With `transposed` the buffer holds the tile transposed,
    `[head_dim, keys]` (an 8-bit V for sm_90a's FP8 `wgmma`, whose B operand
    must be K-major): row `d` of the item is column `d` of keys `row` to
    `row + keys`, which the runtime hands over from V transposed
    (docs/FP8.md); keys past the sequence are zero.

    ```mlir
    fa4.tma_load %k[%b, %h, %key] -> %kv[%n] signal %kv_full[%n]
        {gqa_ratio = 1 : i64} : memref<?x?x8x128xf16>,
        !fa4.smem<[128, 128], f16, stages = 3>, !fa4.mbarrier<tma, stages = 3>
    ```
  }];
  let arguments = (ins Arg<AnyMemRef, "source", [MemRead]>:$source,
    Index:$batch, Index:$head, Index:$row, FA4_SmemType:$buffer, Index:$count,
    Optional<FA4_MBarrierType>:$barrier, Optional<Index>:$barrier_count,
    Optional<MemRefRankOf<[I32], [2]>>:$block_table,
    Optional<Index>:$clear_from,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio, UnitAttr:$transposed);
  let assemblyFormat = [{
    $source `[` $batch `,` $head `,` $row `]`
    (`pages` `(` $block_table^ `:` type($block_table) `)`)?
    (`clear_from` $clear_from^)? `->` $buffer `[` $count `]`
    (`signal` $barrier^ `[` $barrier_count `]`)? attr-dict `:` type($source)
    `,` type($buffer) (`,` type($barrier)^)?
  }];
  let extraClassDeclaration = [{
    /// The copied tile: the buffer's rows and stages, the tensor's head dim
    /// as columns (the buffer's, or fewer).
    SmemType getTileType();
  }];
  let hasVerifier = 1;
}

def FA4_TmaStoreOp : FA4_Op<"tma_store"> {
  let summary = "asynchronous tile copy from shared to global memory";
  let description = [{
    The inverse of `fa4.tma_load` for the output: rows past the sequence are
    not written. The source stage may be reused after `fa4.tma_store_wait`.
    With `reduce` the tile's f32 elements are added into the destination
    (atomically, element by element: the backward's dQ parts), at columns
    from `column` on.

    ```mlir
    fa4.tma_store %ostage[%n] -> %o[%b, %h, %row] {gqa_ratio = 4 : i64}
        : !fa4.smem<[128, 128], f16, stages = 2>, memref<?x?x32x128xf16>
    fa4.tma_store %dq1[%n] -> %dq_accum[%b, %h, %row]
        {column = 64 : i64, gqa_ratio = 1 : i64, reduce}
        : !fa4.smem<[64, 64], f32, stages = 1>, memref<?x?x16x128xf32>
    ```
  }];
  let arguments = (ins FA4_SmemType:$buffer, Index:$count,
    Arg<AnyMemRef, "destination", [MemWrite]>:$dest,
    Index:$batch, Index:$head, Index:$row,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$column,
    UnitAttr:$reduce);
  let assemblyFormat = [{
    $buffer `[` $count `]` `->` $dest `[` $batch `,` $head `,` $row `]`
    attr-dict `:` type($buffer) `,` type($dest)
  }];
  let hasVerifier = 1;
}

def FA4_TmaStoreWaitOp : FA4_Op<"tma_store_wait"> {
  let summary = "wait until this thread's TMA stores have read their sources";
  let description = [{
    ```mlir
    fa4.tma_store_wait
    ```
  }];
  let assemblyFormat = "attr-dict";
}

def FA4_ScoreMmaAsyncOp : FA4_Op<"score_mma_async", [FA4_BlackwellOnly]> {
  let summary = "S = Q·Kᵀ on the tensor core, into TMEM";
  let description = [{
    Issued by one thread; completes asynchronously, in issue order with the
    thread's other tensor-core ops (`fa4.mma_commit` observes completion).

    ```mlir
    fa4.score_mma_async %q[%qn], %kv[%n] -> %s0
        : !fa4.smem<[128, 128], f16, stages = 2>,
          !fa4.smem<[128, 128], f16, stages = 3>, !fa4.tmem<[128, 128], f32>
    ```
  }];
  let arguments = (ins FA4_SmemType:$query, Index:$query_count,
    FA4_SmemType:$key, Index:$key_count, FA4_TmemType:$scores);
  let assemblyFormat = [{
    $query `[` $query_count `]` `,` $key `[` $key_count `]` `->` $scores
    attr-dict `:` type($query) `,` type($key) `,` type($scores)
  }];
  let hasVerifier = 1;
}

def FA4_ValueMmaAsyncOp : FA4_Op<"value_mma_async", [FA4_BlackwellOnly]> {
  let summary = "O = P·V (+ O when accumulate), P read from TMEM";
  let description = [{
    V is the first `acc`-columns columns of the ring item: all of them, or
    fewer in a K/V ring sized for a wider K (head dims (192, 128)).

    ```mlir
    fa4.value_mma_async %p0, %kv[%n] -> %o0, accumulate %acc
        : !fa4.tmem<[128, 128], f16>, !fa4.smem<[128, 128], f16, stages = 3>,
          !fa4.tmem<[128, 128], f32>
    ```
  }];
  let arguments = (ins FA4_TmemType:$probs, FA4_SmemType:$value,
    Index:$value_count, FA4_TmemType:$acc, I1:$accumulate);
  let assemblyFormat = [{
    $probs `,` $value `[` $value_count `]` `->` $acc `,` `accumulate`
    $accumulate attr-dict `:` type($probs) `,` type($value) `,` type($acc)
  }];
  let hasVerifier = 1;
}

def FA4_TransposedMmaAsyncOp : FA4_Op<"transposed_mma_async",
    [FA4_BlackwellOnly]> {
  let summary = "D = lhsᵀ·rhs on the tensor core, both operands in shared memory, into TMEM";
  let description = [{
    The backward's dQ = dS·K on sm_100a: `lhs` holds dSᵀ (`[K, M]`, keys ×
    packed query rows, as the softmax-gradient warps stage it) and is read
    as the M-major A operand; `rhs` (`[K, N]`, keys × head dim) is the
    MN-major B operand, as V is to the forward's value MMA. `acc` (`[M, N]`
    f32, M = 128 lanes) is overwritten. Issued by one thread like the other
    tensor-core ops, in order with them.

    ```mlir
    fa4.transposed_mma_async %ds[%n], %k[%t] -> %dq
        : !fa4.smem<[128, 128], bf16, stages = 1>,
          !fa4.smem<[128, 128], bf16, stages = 1>, !fa4.tmem<[128, 128], f32>
    ```
  }];
  let arguments = (ins FA4_SmemType:$lhs, Index:$lhs_count,
    FA4_SmemType:$rhs, Index:$rhs_count, FA4_TmemType:$acc);
  let assemblyFormat = [{
    $lhs `[` $lhs_count `]` `,` $rhs `[` $rhs_count `]` `->` $acc
    attr-dict `:` type($lhs) `,` type($rhs) `,` type($acc)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Hopper's tensor core: warpgroup MMAs with register accumulators
//===----------------------------------------------------------------------===//

def FA4_WarpgroupScoreMmaOp : FA4_Op<"wgmma_score", [FA4_HopperOnly]> {
  let summary = "S = Q·Kᵀ for one consumer warpgroup's rows, into registers";
  let description = [{
    The Hopper score MMA (sm_90a `wgmma`): the warpgroup multiplies rows
    `[row_offset, row_offset + M)` of the Q stage by every row of the K
    stage, both operands in shared memory, and gets the scores as a value
    held in its registers (M = 64, one `wgmma` row block). The op completes
    before the next one: the result is ready to use, and the shared-memory
    operands may be released after it. With `async` the op is only issued:
    its result is the value `fa4.wgmma_wait` gives back, and the operands
    stay in use until then.

    ```mlir
    %s = fa4.wgmma_score %q[%t] rows 64, %k[%n]
        : !fa4.smem<[128, 128], f16, stages = 1>,
          !fa4.smem<[128, 128], f16, stages = 2> -> tensor<64x128xf32>
    ```
  }];
  let arguments = (ins FA4_SmemType:$query, Index:$query_count,
    I64Attr:$row_offset, FA4_SmemType:$key, Index:$key_count,
    UnitAttr:$async);
  let results = (outs FA4_Tile:$scores);
  let assemblyFormat = [{
    $query `[` $query_count `]` `rows` $row_offset `,` $key `[` $key_count `]`
    attr-dict `:` type($query) `,` type($key) `->` type($scores)
  }];
  let hasVerifier = 1;
}

def FA4_WarpgroupValueMmaOp : FA4_Op<"wgmma_value",
    [FA4_HopperOnly, AllTypesMatch<["acc", "result"]>]> {
  let summary = "O + P·V for one consumer warpgroup, P and O in registers";
  let description = [{
    The Hopper value MMA (sm_90a `wgmma` with A from registers): the
    warpgroup's probabilities (in the input type) times the V stage in
    shared memory, added to the accumulator it holds. Completes before the
    next op, like `fa4.wgmma_score`, or with `async` at its `fa4.wgmma_wait`.
    A 16-bit V stage is `[keys, head_dim]`; an 8-bit one (FP8, whose
    `wgmma` takes B K-major only) is `[head_dim, keys]`, V transposed
    (`fa4.tma_load`'s `transposed`).

    ```mlir
    %o1 = fa4.wgmma_value %p, %v[%n], %o0
        : tensor<64x128xf16>, !fa4.smem<[128, 128], f16, stages = 2>,
          tensor<64x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$probs, FA4_SmemType:$value,
    Index:$value_count, FA4_Tile:$acc, UnitAttr:$async);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $probs `,` $value `[` $value_count `]` `,` $acc attr-dict `:`
    type($probs) `,` type($value) `,` type($acc)
  }];
  let hasVerifier = 1;
}

def FA4_WarpgroupTransposedMmaOp : FA4_Op<"wgmma_transposed",
    [FA4_HopperOnly, AttrSizedOperandSegments]> {
  let summary = "Aᵀ·B for one consumer warpgroup, both operands in shared memory";
  let description = [{
    The Hopper backward's dQ MMA (sm_90a `wgmma`, both operands in shared
    memory): `lhs` is a `[K, 64]` stage read as its transpose (the A
    operand M-major: dS staged as the warpgroup holds dSᵀ), times rows
    `[row_offset, row_offset + K)` of the `rhs` stage, its columns
    `[column_offset, column_offset + N)` (B MN-major: K's rows, a multiple
    of 64 columns in); the `64 × N` f32 product (N the result's columns)
    lands in the warpgroup's registers. Completes before the next op, or
    with `async` at its `fa4.wgmma_wait`. With `then`, a second `[K', 64]`
    stage continues the first along K (both warpgroups' dSᵀ, the keys of a
    whole 128-key block: rhs rows `[row_offset, row_offset + K + K')`).

    ```mlir
    %dq = fa4.wgmma_transposed %ds[%i], %k[%t] rows 64
        : !fa4.smem<[64, 64], bf16, stages = 1>,
          !fa4.smem<[128, 128], bf16, stages = 1> -> tensor<64x128xf32>
    %dq1 = fa4.wgmma_transposed %ds0[%i] then %ds1[%i]
        : !fa4.smem<[64, 64], bf16, stages = 1>, %k[%t] rows 0
        {column_offset = 64 : i64} : !fa4.smem<[64, 64], bf16, stages = 1>,
        !fa4.smem<[128, 128], bf16, stages = 1> -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FA4_SmemType:$lhs, Index:$lhs_count,
    Optional<FA4_SmemType>:$lhs_next, Optional<Index>:$lhs_next_count,
    FA4_SmemType:$rhs, Index:$rhs_count, I64Attr:$row_offset,
    DefaultValuedAttr<I64Attr, "0">:$column_offset, UnitAttr:$async);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $lhs `[` $lhs_count `]`
    (`then` $lhs_next^ `[` $lhs_next_count `]` `:` type($lhs_next))?
    `,` $rhs `[` $rhs_count `]` `rows` $row_offset
    attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def FA4_WarpgroupWaitOp : FA4_Op<"wgmma_wait",
    [FA4_HopperOnly, AllTypesMatch<["pending_value", "result"]>]> {
  let summary = "wait for an async warpgroup MMA: its result, ready";
  let description = [{
    Waits until at most `pending` of the warpgroup's async MMAs issued
    before it are still running (they complete in issue order), which must
    include the one that computes `pending_value`; gives back its result.
    The MMA's shared-memory operands may be released after the wait.

    ```mlir
    %s = fa4.wgmma_score %q[%t] rows 0, %k[%n] {async} : ...
    %o = fa4.wgmma_value %p, %v[%m], %acc {async} : ...
    %s_ready = fa4.wgmma_wait %s {pending = 1} : tensor<64x128xf32>
    ```
  }];
  let arguments = (ins FA4_Tile:$pending_value,
    ConfinedAttr<I64Attr, [IntNonNegative]>:$pending);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $pending_value attr-dict `:` type($pending_value)
  }];
  let hasVerifier = 1;
}

def FA4_NamedBarrierSyncOp : FA4_Op<"named_barrier_sync"> {
  let summary = "arrive at a named CTA barrier and wait for its phase";
  let description = [{
    The role's threads arrive at hardware barrier `id` (1-15; 0 is the
    CTA-wide one) and wait until `count` threads in all have arrived, some
    of them with `fa4.named_barrier_arrive`. The Hopper consumers take
    turns issuing their MMAs this way (FlashAttention-3's ping-pong).

    ```mlir
    fa4.named_barrier_sync 1, 256
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntMinValue<1>, IntMaxValue<15>]>:$id,
    ConfinedAttr<I64Attr, [IntPositive]>:$count);
  let assemblyFormat = "$id `,` $count attr-dict";
  let hasVerifier = 1;
}

def FA4_NamedBarrierArriveOp : FA4_Op<"named_barrier_arrive"> {
  let summary = "arrive at a named CTA barrier without waiting";
  let description = [{
    The role's threads count towards the current phase of barrier `id`,
    whose `count` threads some role waits for with
    `fa4.named_barrier_sync`.

    ```mlir
    fa4.named_barrier_arrive 2, 256
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntMinValue<1>, IntMaxValue<15>]>:$id,
    ConfinedAttr<I64Attr, [IntPositive]>:$count);
  let assemblyFormat = "$id `,` $count attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Register <-> memory
//===----------------------------------------------------------------------===//

def FA4_TmemLoadOp : FA4_Op<"tmem_load", [FA4_BlackwellOnly]> {
  let summary = "read columns of a TMEM buffer into registers";
  let description = [{
    Reads `result`'s columns starting at element column `column`; thread `t`
    of the warpgroup receives lane `t` (row `t`).

    ```mlir
    %chunk = fa4.tmem_load %o0[%c16] : !fa4.tmem<[128, 128], f32> -> tensor<128x16xf32>
    ```
  }];
  let arguments = (ins FA4_TmemType:$buffer, Index:$column);
  let results = (outs FA4_Tile:$result);
  let assemblyFormat = [{
    $buffer `[` $column `]` attr-dict `:` type($buffer) `->` type($result)
  }];
  let hasVerifier = 1;
}

def FA4_TmemStoreOp : FA4_Op<"tmem_store", [FA4_BlackwellOnly]> {
  let summary = "write registers into columns of a TMEM buffer";
  let description = [{
    ```mlir
    fa4.tmem_store %p, %p0[%c0] : tensor<128x128xf16>, !fa4.tmem<[128, 128], f16>
    ```
  }];
  let arguments = (ins FA4_Tile:$tile, FA4_TmemType:$buffer, Index:$column);
  let assemblyFormat = [{
    $tile `,` $buffer `[` $column `]` attr-dict `:` type($tile) `,` type($buffer)
  }];
  let hasVerifier = 1;
}

def FA4_SmemStoreOp : FA4_Op<"smem_store"> {
  let summary = "write a tile (or one row of it) into a ring item";
  let description = [{
    Without `row`, `tile` fills the stage's columns from `column` on (from
    the first when absent); with `row`, the 1-D `tile` fills that row.

    ```mlir
    fa4.smem_store %alpha, %stats0[%n] row 0 : tensor<128xf32>,
        !fa4.smem<[2, 128], f32, stages = 1>
    fa4.smem_store %chunk, %ostage[%n] column %c16 : tensor<128x16xf16>,
        !fa4.smem<[128, 128], f16, stages = 2>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$tile, FA4_SmemType:$buffer, Index:$count,
    Optional<Index>:$column, OptionalAttr<I64Attr>:$row);
  let assemblyFormat = [{
    $tile `,` $buffer `[` $count `]` (`column` $column^)? (`row` $row^)?
    attr-dict `:` type($tile) `,` type($buffer)
  }];
  let hasVerifier = 1;
}

def FA4_SmemLoadOp : FA4_Op<"smem_load"> {
  let summary = "read a tile (or one row of it) from a ring item";
  let description = [{
    With `transposed` a row is read by transposed tiles' ops (keys × packed
    rows, the backward's): the same values, held along such a tile's
    columns, as `fa4.load_row_tile`'s. With `column` a row is read in part:
    the result's elements from that column on (a chunk of a transposed
    tile's columns).

    ```mlir
    %alpha = fa4.smem_load %stats0[%n] row 0
        : !fa4.smem<[2, 128], f32, stages = 1> -> tensor<128xf32>
    %lse = fa4.smem_load %stats[%n] row 0 {transposed}
        : !fa4.smem<[2, 64], f32, stages = 2> -> tensor<64xf32>
    %delta = fa4.smem_load %stats[%n] row 1 column 32 {transposed}
        : !fa4.smem<[2, 128], f32, stages = 2> -> tensor<32xf32>
    ```
  }];
  let arguments = (ins FA4_SmemType:$buffer, Index:$count,
    OptionalAttr<I64Attr>:$row, UnitAttr:$transposed,
    OptionalAttr<I64Attr>:$column);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $buffer `[` $count `]` (`row` $row^)? (`column` $column^)? attr-dict `:`
    type($buffer) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Correction
//===----------------------------------------------------------------------===//

def FA4_RescaleOOp : FA4_Op<"rescale_o"> {
  let summary = "rescale the O accumulator in TMEM by the softmax's acc_scale";
  let description = [{
    What the correction role owes the value MMA before it accumulates again;
    `fa4-correction` expands it into guarded 16-column TMEM round trips.

    ```mlir
    fa4.rescale_o %o0, %alpha : !fa4.tmem<[128, 128], f32>, tensor<128xf32>
    ```
  }];
  let arguments = (ins FA4_TmemType:$acc, FA4_RowVector:$acc_scale);
  let assemblyFormat = [{
    $acc `,` $acc_scale attr-dict `:` type($acc) `,` type($acc_scale)
  }];
  let hasVerifier = 1;
}

// A finalize's normalization, as fa4.normalize's: the scale, and FP8's
// run-time factors and the probabilities' shift.
defvar FA4_FinalizeNormalization = (ins Optional<F32>:$factor,
    Optional<F32>:$out_factor,
    ConfinedAttr<F32Attr, [FA4_FloatPositive]>:$scale_log2,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative, IntMaxValue<8>]>,
                      "0">:$prob_shift);

def FA4_FinalizeOOp : FA4_Op<"finalize_o",
    [AllTypesMatch<["row_max", "row_sum", "lse"]>, AttrSizedOperandSegments]> {
  let summary = "O / row_sum from TMEM into the output staging buffer, and the LSE";
  let description = [{
    Reads O from TMEM, divides each row by its `row_sum`, converts it to the
    staging buffer's element type and writes it into ring item `count` of
    `staging`; returns the log-sum-exp of each row. `fa4-correction` expands
    it into 16-column TMEM loads, `fa4.normalize` and stores, so that no more
    than a chunk of O is ever held in registers. FP8's `factor`,
    `out_factor` and `prob_shift` are those of `fa4.normalize`.

    ```mlir
    %lse = fa4.finalize_o %o0, %m, %l -> %ostage[%n] {scale_log2 = 0.127517 : f32}
        : !fa4.tmem<[128, 128], f32>, tensor<128xf32>,
          !fa4.smem<[128, 128], f16, stages = 2>
    ```
  }];
  let arguments = !con((ins FA4_TmemType:$acc, FA4_RowVector:$row_max,
    FA4_RowVector:$row_sum, FA4_SmemType:$staging, Index:$count),
    FA4_FinalizeNormalization);
  let results = (outs FA4_RowVector:$lse);
  let assemblyFormat = [{
    $acc `,` $row_max `,` $row_sum (`factor` `(` $factor^ `)`)?
    (`out_factor` `(` $out_factor^ `)`)? `->` $staging `[` $count `]`
    attr-dict `:` type($acc) `,` type($row_max) `,` type($staging)
  }];
  let hasVerifier = 1;
}

def FA4_FinalizePartialOOp : FA4_Op<"finalize_o_partial",
    [FA4_BlackwellOnly, AllTypesMatch<["row_max", "row_sum", "lse"]>,
     AttrSizedOperandSegments]> {
  let summary = "a split-KV part's O / row_sum from TMEM into the workspace, and its LSE";
  let description = [{
    `fa4.finalize_o` for a split-KV part: reads O from TMEM, divides each
    row by its `row_sum` and writes it in f32 to the part's slot of the
    workspace (`fa4.store_partial_o`), returning the part's log-sum-exp.
    `fa4-correction` expands it into 16-column TMEM loads, `fa4.normalize`
    and `fa4.store_partial_o`, a chunk at a time. FP8's `factor`,
    `out_factor` and `prob_shift` are those of `fa4.normalize`.

    ```mlir
    %lse = fa4.finalize_o_partial %o0, %m, %l -> %o, %ws[%b, %h, %row, %split]
        {scale_log2 = 0.127517 : f32, gqa_ratio = 4 : i64, num_splits = 8 : i64}
        : !fa4.tmem<[128, 128], f32>, tensor<128xf32>,
          memref<?x?x32x128xf16>, memref<?xi32>
    ```
  }];
  let arguments = !con((ins FA4_TmemType:$acc, FA4_RowVector:$row_max,
    FA4_RowVector:$row_sum, AnyMemRef:$out,
    Arg<AnyMemRef, "split-KV workspace", [MemWrite]>:$workspace,
    Index:$batch, Index:$head, Index:$row, Index:$split),
    FA4_FinalizeNormalization,
    (ins ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    ConfinedAttr<I64Attr, [IntMinValue<2>, IntMaxValue<128>]>:$num_splits));
  let results = (outs FA4_RowVector:$lse);
  let assemblyFormat = [{
    $acc `,` $row_max `,` $row_sum (`factor` `(` $factor^ `)`)?
    (`out_factor` `(` $out_factor^ `)`)? `->` $out `,` $workspace
    `[` $batch `,` $head `,` $row `,` $split `]` attr-dict `:`
    type($acc) `,` type($row_max) `,` type($out) `,` type($workspace)
  }];
  let hasVerifier = 1;
}

def FA4_FinalizeORowsOp : FA4_Op<"finalize_o_rows",
    [FA4_BlackwellOnly, AllTypesMatch<["row_max", "row_sum", "lse"]>,
     AttrSizedOperandSegments]> {
  let summary = "O / row_sum from TMEM straight to a varlen sequence's rows, and the LSE";
  let description = [{
    `fa4.finalize_o` for a varlen kernel: reads O from TMEM, divides each
    row by its `row_sum` and stores it by address into O
    (`fa4.store_o_tile ... span(%offset, %limit)`: position `p` of the
    sequence to row `offset + p`, positions from `limit` on not written),
    returning the rows' log-sum-exp. No staging buffer and no TMA store: a
    box would write into the next sequence's rows. `fa4-correction`
    expands it into 16-column TMEM loads, `fa4.normalize` and
    `fa4.store_o_tile`, a chunk at a time. FP8's `factor`, `out_factor`
    and `prob_shift` are those of `fa4.normalize`.

    ```mlir
    %lse = fa4.finalize_o_rows %o0, %m, %l -> %o[%c0, %h, %row] span(%first, %rows)
        {scale_log2 = 0.127517 : f32, gqa_ratio = 1 : i64}
        : !fa4.tmem<[128, 128], f32>, tensor<128xf32>, memref<1x?x8x128xbf16>
    ```
  }];
  let arguments = !con((ins FA4_TmemType:$acc, FA4_RowVector:$row_max,
    FA4_RowVector:$row_sum, Arg<AnyMemRef, "output", [MemWrite]>:$out,
    Index:$batch, Index:$head, Index:$row, Index:$offset, Index:$limit),
    FA4_FinalizeNormalization,
    (ins ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio));
  let results = (outs FA4_RowVector:$lse);
  let assemblyFormat = [{
    $acc `,` $row_max `,` $row_sum (`factor` `(` $factor^ `)`)?
    (`out_factor` `(` $out_factor^ `)`)? `->` $out
    `[` $batch `,` $head `,` $row `]` `span` `(` $offset `,` $limit `)`
    attr-dict `:` type($acc) `,` type($row_max) `,` type($out)
  }];
  let hasVerifier = 1;
}

def FA4_NeedsRescaleOp : FA4_Op<"needs_rescale", [Pure]> {
  let summary = "whether any row's acc_scale differs from 1";
  let description = [{
    The warp vote (`any_sync`) that guards the O rescale: false when no row's
    max moved, or every move stayed under the rescale threshold (the softmax
    kept the stale max and reported a factor of exactly 1).

    ```mlir
    %rescale = fa4.needs_rescale %alpha : tensor<128xf32>
    ```
  }];
  let arguments = (ins FA4_RowVector:$acc_scale);
  let results = (outs I1:$result);
  let assemblyFormat = "$acc_scale attr-dict `:` type($acc_scale)";
}

//===----------------------------------------------------------------------===//
// TMEM allocation
//===----------------------------------------------------------------------===//

def FA4_TmemAllocColumnsOp : FA4_Op<"tmem_alloc_columns", [FA4_BlackwellOnly]> {
  let summary = "allocate the CTA's TMEM columns (one warp, collectively)";
  let description = [{
    ```mlir
    fa4.tmem_alloc_columns {columns = 512 : i64}
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntPositive]>:$columns);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def FA4_TmemRelinquishOp : FA4_Op<"tmem_relinquish", [FA4_BlackwellOnly]> {
  let summary = "give up the right to allocate more TMEM";
  let description = [{
    ```mlir
    fa4.tmem_relinquish
    ```
  }];
  let assemblyFormat = "attr-dict";
}

def FA4_TmemDeallocOp : FA4_Op<"tmem_dealloc", [FA4_BlackwellOnly]> {
  let summary = "free the CTA's TMEM columns";
  let description = [{
    ```mlir
    fa4.tmem_dealloc {columns = 512 : i64}
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntPositive]>:$columns);
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// The persistent tile scheduler
//===----------------------------------------------------------------------===//

def FA4_TaskCountOp : FA4_Op<"task_count", [Pure]> {
  let summary = "the number of (batch, head group, m_block) tasks";
  let description = [{
    `batch · kv_heads · groups_per_kv · ceil(seq_q · gqa_ratio / rows)`: a
    head group is `gqa_ratio` query heads packed in a task's rows, and each
    K/V head has `groups_per_kv` of them (1 where the whole GQA ratio packs).
    `varlen`: `kv_heads · groups_per_kv · (floor(seq_q · gqa_ratio / rows) +
    batch)`, seq_q the packed tensor's rows and batch its sequences — the
    slots of AttentionMath.h's varlenSlot, at least a task per tile of every
    sequence whatever their lengths.

    ```mlir
    %n = fa4.task_count %batch, %seq_q {kv_heads = 8 : i64, gqa_ratio = 4 : i64,
        rows = 256 : i64}
    ```
  }];
  let arguments = (ins Index:$batch, Index:$seq_q,
    ConfinedAttr<I64Attr, [IntPositive]>:$kv_heads,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    ConfinedAttr<I64Attr, [IntPositive]>:$rows,
    ConfinedAttr<DefaultValuedAttr<I64Attr, "1">, [IntPositive]>:$groups_per_kv,
    UnitAttr:$varlen);
  let results = (outs Index:$result);
  let assemblyFormat = "$batch `,` $seq_q attr-dict";
  let hasVerifier = 1;
}

def FA4_TaskCoordsOp : FA4_Op<"task_coords", [Pure, IsolatedFromAbove]> {
  let summary = "the task at position `index` of the schedule";
  let description = [{
    The task's batch, head group (of `kv_heads · groups_per_kv`; its K/V
    head is `head_group / groups_per_kv`) and m_block. `static`: m_block
    fastest, then head group, then batch. `lpt`: m_blocks by their number
    of visible KV blocks, heaviest first (the mask attributes and the bounds
    of the mask_mod region, a copy of the entry's that is analysed and never
    run, give the keys), every (batch, head group) of one m_block together.
    With `cu_seqlens` (varlen; the order must be `static`): the slots of
    AttentionMath.h's varlenTaskAt, last to first — a sequence's tiles of
    one head group consecutive, its last ones first — the sequence found
    by a binary search of the table, `seq_q` the packed tensor's rows.

    `l2_keys` (with `lpt`; 0, the default: no sections) is how many keys of
    one head group's K and V the L2 holds for the order (the L2 budget over
    a key's K and V bytes): the (batch, head group) pairs are taken in
    sections of S, S the largest power of two <= l2_keys / seq_k (at least
    1), one section after another, each section's tasks heaviest first
    (every pair of the section for one m_block together; the last section
    the pairs left). The tasks in flight then read the K and V of one
    section's heads, which stay in the L2, instead of every head's.

    ```mlir
    %b, %h, %m = fa4.task_coords %t, %batch, %seq_q, %seq_k {order = #fa4.task_order<lpt>,
        kv_heads = 8 : i64, gqa_ratio = 4 : i64, rows = 256 : i64,
        block_n = 128 : i64, mask = #fa4.mask<causal>}
    ```
  }];
  let arguments = (ins Index:$index, Index:$batch, Index:$seq_q, Index:$seq_k,
    FA4_TaskOrderAttr:$order,
    ConfinedAttr<I64Attr, [IntPositive]>:$kv_heads,
    ConfinedAttr<I64Attr, [IntPositive]>:$gqa_ratio,
    ConfinedAttr<I64Attr, [IntPositive]>:$rows,
    ConfinedAttr<I64Attr, [IntPositive]>:$block_n,
    FA4_MaskKindAttr:$mask,
    DefaultValuedAttr<I64Attr, "-1">:$window_left,
    DefaultValuedAttr<I64Attr, "-1">:$window_right,
    ConfinedAttr<DefaultValuedAttr<I64Attr, "1">, [IntPositive]>:$groups_per_kv,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$l2_keys,
    Optional<MemRefRankOf<[I32], [1]>>:$cu_seqlens);
  let results = (outs Index:$batch_index, Index:$head_group, Index:$m_block);
  let regions = (region MaxSizedRegion<1>:$mask_mod);
  let assemblyFormat =
      "$index `,` $batch `,` $seq_q `,` $seq_k (`cu_seqlens` $cu_seqlens^ `:` type($cu_seqlens))? attr-dict (`mask_mod` $mask_mod^)?";
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether a task's work grows with its m_block as causal's does: causal,
    /// or a window unbounded on the left, without a mask_mod. The schedule's
    /// LPT order, the per-task grid and L2 sections key on it.
    bool isCausalShaped() {
      return getMaskMod().empty() &&
             (getMask() == ::mlir::fa4::MaskKind::causal ||
              (getMask() == ::mlir::fa4::MaskKind::window &&
               static_cast<int64_t>(getWindowLeft()) < 0));
    }
  }];
}

def FA4_CtaIdOp : FA4_Op<"cta_id", [Pure]> {
  let summary = "this CTA's index in the grid";
  let description = [{
    ```mlir
    %cta = fa4.cta_id
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def FA4_CtaRankOp : FA4_Op<"cta_rank", [Pure]> {
  let summary = "this CTA's rank in its pair (0 outside a cta_pair schedule)";
  let description = [{
    In a `cta_pair` schedule (`fa4.warp_specialize`), 0 for the even CTA of
    a cluster of two, which issues the pair's MMAs, and 1 for its peer.

    ```mlir
    %rank = fa4.cta_rank
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def FA4_GridSizeOp : FA4_Op<"grid_size", [Pure]> {
  let summary = "the number of CTAs: min(sm_count, tasks) at launch";
  let description = [{
    ```mlir
    %grid = fa4.grid_size {sm_count = 148 : i64}
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntPositive]>:$sm_count);
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

#endif // FA4_DIALECT_FA4_IR_FA4SCHEDULEOPS_TD
