//===- Passes.td - the Hopper wing's passes ------------------*- tablegen -*-===//
//
// Level B -> level C for sm_90a: the FA3-style warpgroup schedule.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TARGET_HOPPER_PASSES_TD
#define FA4_TARGET_HOPPER_PASSES_TD

include "mlir/Pass/PassBase.td"

def FA4HopperWarpgroupRoles
    : Pass<"fa4-hopper-warpgroup-roles", "::mlir::func::FuncOp"> {
  let summary = "split the tile program over Hopper's warpgroups (level B -> C, sm_90a)";
  let description = [{
    The FlashAttention-3 cast, 3 warpgroups (384 threads) for a 128-row Q
    tile, 4 (512 threads) for a 192-row one (`fa4-tile q-tile-rows=192`):

    | role | warps | registers (128 rows / 192) | job |
    |------|-------|-----------|-----|
    | producer  | 0-3  | 40 / 32  | its elected thread loads Q, then K and V of each visited block, with TMA |
    | consumer0 | 4-7  | 232 / 160 | rows 0-63 of the task's Q tile |
    | consumer1 | 8-11 | 232 / 160 | rows 64-127 |
    | consumer2 | 12-15 | — / 160 | rows 128-191 (192-row tiles) |

    Each consumer runs, per KV block: `fa4.wgmma_score` (Q and K in shared
    memory, S in registers), the level-B softcap / score_mod / mask /
    online softmax on its 64 rows, `fa4.correction` of its O in registers,
    and `fa4.wgmma_value` (P from registers, V in shared memory); K is
    released right after the score MMA, V after the value MMA. With the
    overlap (FlashAttention-3's intra-warpgroup pipelining) the loop is
    software-pipelined: block k's score MMA and block k-1's value MMA are
    issued `async` before block k's softmax and waited for with
    `fa4.wgmma_wait`, so the tensor core works while the softmax runs.
    With `pingpong` (FlashAttention-3's) the consumers also take turns
    issuing their MMAs, round robin, through named barriers 1 to 3
    (consumer c's is 1 + c; `fa4.named_barrier_sync` /
    `fa4.named_barrier_arrive`, 256 threads: the waiter's and the previous
    consumer's): each waits for its turn before its score MMA and hands the
    turn to the next once its value MMA is issued. After the last block it
    normalizes, stages its 64 rows of O in shared memory, stores them with
    TMA and writes its LSE rows.

    Q has one stage, K and V their own rings (as many stages as fit, at most
    4, or `kv-stages`); every hand-off is a ring op, for fa4-insert-barriers.
    Requires the tile program of `fa4-tile q-tiles-per-task=1` (tasks of 128
    rows, or 192 for fp16/bf16 at head dims up to 64 with dense K/V and
    blocks of at most 128 keys) and a GQA ratio dividing 64 (O is stored in
    64-row boxes).
  }];
  let options = [
    Option<"kvStages", "kv-stages", "int64_t", "0",
           "K and V ring stages (0: as many as shared memory holds, up to 4)">,
    Option<"overlap", "overlap", "::mlir::fa4::Toggle",
           "::mlir::fa4::Toggle::Auto",
           "The consumers' intra-warpgroup overlap of the next S and the "
           "last P·V with the softmax: on, off, or auto (on: it fits the "
           "consumers' registers in every variant)",
           "::mlir::fa4::toggleValues()">,
    Option<"pingpong", "pingpong", "::mlir::fa4::Toggle",
           "::mlir::fa4::Toggle::Auto",
           "The consumers take turns issuing their MMAs, so that one's "
           "softmax runs under the other's MMAs: on, off, or auto (on with "
           "the overlapped loop)",
           "::mlir::fa4::toggleValues()">
  ];
}

#endif // FA4_TARGET_HOPPER_PASSES_TD
