//===- TileProgram.h - what a schedule reads of the tile program -*- C++ -*-===//
//
// Both targets' level-B -> level-C passes (fa4-assign-warp-roles for
// Blackwell, fa4-hopper-warpgroup-roles for Hopper) rebuild the kernel from
// the same facts of the tile program fa4-tile wrote, and open every role's
// task with the same header. Internal to lib/Transforms.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TRANSFORMS_TILEPROGRAM_H
#define FA4_TRANSFORMS_TILEPROGRAM_H

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Target.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::fa4 {

/// Positions of the kernel's tensors among fa4.spec's `arguments`.
enum TileArgument { kQ, kK, kV, kOut, kLse };

/// The level-B ops whose attributes the roles reuse: each is cloned with new
/// operands, so the schedule computes exactly what the tile program did.
struct TileProgram {
  KvBlockRangeOp range;
  OnlineSoftmaxOp softmax;
  NormalizeOp normalize;
  MaskOp mask;             // null without a mask
  SoftcapOp softcap;       // null without a softcap
  ScoreModOp scoreMod;     // null without a score_mod
  StoreLseTileOp lseStore; // null without an LSE output
  SmallVector<Value, 5> arguments;
  /// The seqused_k table and the block table of a paged K/V cache
  /// (fa4.spec's), null without them.
  Value seqUsedK, blockTable;
  /// Split-KV: the workspace (fa4.spec's split_workspace, null without) and
  /// the parts each task's blocks are cut into (1 without).
  Value splitWorkspace;
  int64_t numSplits = 1;
  /// Varlen: the cu_seqlens tables (fa4.spec's), null for a dense batch.
  Value cuSeqlensQ, cuSeqlensK;

  /// The tile program of `func`, or failure with an error naming `pass`
  /// (a function without fa4.spec is not a kernel: `isKernel` false).
  static FailureOr<TileProgram> read(func::FuncOp func, StringRef pass,
                                     bool &isKernel);

  /// What a family's roles pass (`pass`) reads first: the module's chip is
  /// the family's (fa4.target), and the tile program's tasks are
  /// `qTilesPerTask` 128-row Q tiles, as the family's schedule runs them
  /// (0: one or two, Blackwell's, which reads the count from the program).
  /// std::nullopt for a function that is not a kernel; failure after an
  /// error naming the cause.
  static FailureOr<std::optional<TileProgram>>
  readForSchedule(func::FuncOp func, target::Family family, StringRef pass,
                  int64_t qTilesPerTask);
};

/// The index arithmetic a schedule builder writes, its constants hoisted to
/// the function's entry.
class IndexBuilder {
public:
  IndexBuilder(func::FuncOp func)
      : func(func), loc(func.getLoc()), b(func.getContext()) {}

  Value index(int64_t value);
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
  Value mul(Value x, int64_t y) {
    return arith::MulIOp::create(b, loc, x, index(y));
  }
  Value cmp(arith::CmpIPredicate predicate, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, predicate, x, y);
  }
  Value splat(Type type, float value) {
    return arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(cast<ShapedType>(type), value));
  }

  func::FuncOp func;
  Location loc;
  OpBuilder b;

private:
  llvm::SmallDenseMap<int64_t, Value> indexConstants;
};

/// What every schedule starts from: the tile program's ops (erased once
/// the schedule replaces them), the problem's sizes as the kernel reads
/// them, and the task count, built before the first of those ops.
struct ScheduleStart {
  SmallVector<Operation *> levelB;
  /// The sequences, and seq_q and seq_k as Q's and K's sizes (varlen: the
  /// packed tensors' rows).
  Value batchSize, seqQ, seqK, numTasks;
  /// K/V heads, query heads packed per task (the tile program's
  /// gqa_ratio) and head groups per K/V head.
  int64_t kvHeads = 1, gqaRatio = 1, groupsPerKv = 1;
  Type element;

  static ScheduleStart build(IndexBuilder &ib, const TileProgram &program);
  /// Erases the tile program's ops, last first.
  void eraseLevelB();
};

/// What every role knows of the task it works on: its coordinates, its
/// first packed row and its visited KV blocks [begin, end).
struct TaskHeader {
  /// The head group's index (Q, O, the LSE, the mods and the block mask
  /// address query heads by it) and its K/V head.
  Value batch, headGroup, kvHead, mBlock, qRow;
  /// Split-KV: which part of the task's blocks this is (null without).
  Value split;
  /// The task's sequence's queries and keys: seq_q and seq_k, or its
  /// varlen span's lengths, and seqused_k's count.
  Value seqQ, seqK;
  /// The batch coordinate Q, K, V, O and the LSE are addressed with (the
  /// sequence's; 0 in varlen's packed tensors), and varlen's first Q and
  /// K/V rows of the sequence (null for a dense batch).
  Value tensorBatch, qOffset, kOffset;
  Value begin, fullBegin, fullEnd, end;
  /// KV blocks visited: end - begin.
  Value numBlocks;
};

/// A task's visited KV blocks, by mask region: [begin, fullBegin) and
/// [fullEnd, end) straddle a mask edge, [fullBegin, fullEnd) is whole.
struct BlockBounds {
  Value begin, fullBegin, fullEnd, end;
};

/// The packed row of Q (or O) that packed row `row` of the task's sequence
/// is, and the K/V row of its key `key`: themselves for a dense batch, past
/// the sequence's first row in varlen's packed tensors.
Value queryTensorRow(IndexBuilder &ib, const TaskHeader &task, Value row,
                     int64_t gqaPacking);
Value keyTensorRow(IndexBuilder &ib, const TaskHeader &task, Value key);

/// Varlen's span operands of the task's O and LSE stores (empty for a
/// dense batch): its first row and its length.
SmallVector<Value, 2> storeSpan(const TaskHeader &task);

/// Split-KV: part `split` of `splits` equal parts of `all`'s blocks
/// (ceil(blocks / splits) each, the last ones shorter or empty), every
/// region clipped to it. The same cut at level B and in every role.
BlockBounds splitBounds(OpBuilder &b, Location loc, const BlockBounds &all,
                        Value split, int64_t splits);

/// At the builder's insertion point: the task coordinates of task `task`
/// (static order; fa4-tile-scheduler picks the order) and its block range,
/// the tile program's range cloned for the task.
TaskHeader buildTaskHeader(IndexBuilder &ib, const TileProgram &program,
                           const ScheduleStart &start, Value task);

/// The row of a K/V tile from which it is cleared (fa4.tma_load's
/// clear_from): for V with seqused_k or varlen, the task's keys less the
/// tile's first key (the tile's rows past the sequence's count or end);
/// null otherwise.
Value clearFromRow(OpBuilder &b, Location loc, const TileProgram &program,
                   const TaskHeader &task, TileArgument tensor, Value key);

/// Loops built empty end in a yield of their own.
void dropImplicitYield(scf::ForOp loop);

/// The level-B ops that take FP8's run-time factors (their f32 operands):
/// the softmax, the normalization, the softcap and the score_mod.
SmallVector<Operation *, 4> fp8FactorUsers(const TileProgram &program);

/// FP8's factors are re-made in each role's task (TaskFactors): what they
/// are computed from must be re-makeable there — the function's arguments
/// and top-level values, fa4.load_descale at the task's batch and K/V head
/// (the K tile's load's indices, which become the task's), and region-free,
/// side-effect-free arithmetic on them. Anything else (a loop's induction
/// variable, a table entry at other indices) would change meaning at level
/// C, and is refused, naming `schedule`.
LogicalResult checkFp8Factors(func::FuncOp func, const TileProgram &program,
                              StringRef schedule);

/// The task's FP8 factors inside a role: level B's fa4.load_descale ops
/// re-made at the task's batch and K/V head, and the arithmetic on them
/// cloned, at the builder's insertion point, for each factor the program's
/// ops read (checkFp8Factors has vouched that they can be).
class TaskFactors {
public:
  /// The factors `users` read (by default every op fp8FactorUsers names).
  void remake(OpBuilder &b, Location loc, func::FuncOp func,
              const TileProgram &program, const TaskHeader &task,
              ArrayRef<Operation *> users = {});
  /// The re-made value of level-B `value`, or null when it is none.
  Value lookup(Value value) const { return made.lookupOrNull(value); }
  /// Maps each operand of `op` that is a re-made factor in `mapping`.
  void mapOperands(Operation *op, IRMapping &mapping) const;

private:
  Value remakeOne(OpBuilder &b, Location loc, func::FuncOp func,
                  const TaskHeader &task, Value value);
  IRMapping made;
};

} // namespace mlir::fa4

#endif // FA4_TRANSFORMS_TILEPROGRAM_H
