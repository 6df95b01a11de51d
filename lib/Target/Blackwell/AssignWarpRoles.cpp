//===- AssignWarpRoles.cpp - the tile program split over FA4's roles -------===//
//
// Level B -> level C. The tile program's work is dealt out to the roles of
// ScheduleConfig::roles(); what one role computes and another needs goes
// through a buffer, bracketed by ring hand-offs that fa4-insert-barriers turns
// into mbarriers. Every role derives the same running counts from the same
// task sequence, which is what lets their rings agree without talking.
//
//===----------------------------------------------------------------------===//

#include "fa4/Transforms/TileProgram.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Blackwell/Backward.h"
#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Target/Blackwell/Passes.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <algorithm>
#include <limits>

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4ASSIGNWARPROLES
#include "fa4/Target/Blackwell/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;


namespace {

/// Counts a role carries from task to task; each names a ring.
enum class Counter {
  /// Tasks this CTA has taken: Q and O-staging items (one per Q tile).
  Task,
  /// K/V ring items: a K and a V per KV block.
  Kv,
  /// KV blocks processed: O items of each Q tile, and with two Q tiles S
  /// and P items of each.
  Block,
  /// One Q tile: S and P items of the task's even and odd blocks (S0 and
  /// P0 take blocks 0, 2, 4, ..., S1 and P1 blocks 1, 3, ...).
  EvenBlock,
  OddBlock,
  /// Statistics items per Q tile: one per block after the first, plus the
  /// final max and sum (at least one per task).
  Stats,
};

/// What every role knows about the task it is working on.
struct TaskState : TaskHeader {
  /// The first packed row of each Q tile.
  Value tileRow[ScheduleConfig::kQStages];
  llvm::SmallDenseMap<Counter, Value> counters;
};

class RoleProgramBuilder : IndexBuilder {
public:
  RoleProgramBuilder(func::FuncOp func, TileProgram program, bool ctaPair)
      : IndexBuilder(func), program(program), ctaPair(ctaPair) {}

  void build();

private:
  void createBuffers();
  /// A role's loop over its tasks; `body` returns nothing, the counters
  /// advance by the rules of `Counter`. The loop's results are the counters'
  /// final values.
  scf::ForOp buildTaskLoop(ArrayRef<Counter> counters,
                           function_ref<void(TaskState &)> body);
  /// A loop over the task's visited KV blocks k = 0 .. n-1 (block
  /// end - 1 - k, the last one first).
  void buildBlockLoop(Value lower, Value upper, ValueRange init,
                      function_ref<SmallVector<Value>(Value k, ValueRange)> body,
                      SmallVector<Value> *results = nullptr,
                      StringRef tag = {});
  Value keyOf(const TaskState &task, Value k) {
    return mul(sub(sub(task.end, index(1)), k), TileConfig::kBlockN);
  }

  /// The K/V ring items of block k's K and V. Two Q tiles: K(k) V(k) in
  /// block order. One Q tile: in the order the MMA warp reads them, K(0)
  /// K(1) V(0) K(2) V(1) ... V(n-1), S of the next block being computed
  /// before P·V of the previous one (the ring is then consumed in order,
  /// and a K is loaded as soon as the previous one's stage is free).
  Value kItemOf(const TaskState &task, Value k) {
    Value base = task.counters.lookup(Counter::Kv);
    if (qTiles == 2)
      return add(base, mul(k, 2));
    return add(base, arith::MaxSIOp::create(b, loc, sub(mul(k, 2), index(1)),
                                            index(0)));
  }
  Value vItemOf(const TaskState &task, Value k) {
    Value base = task.counters.lookup(Counter::Kv);
    if (qTiles == 2)
      return add(base, add(mul(k, 2), index(1)));
    return add(base, arith::MinSIOp::create(b, loc, add(mul(k, 2), index(2)),
                                            sub(mul(task.numBlocks, 2),
                                                index(1))));
  }
  /// One Q tile: the pairs of blocks (2j, 2j + 1) the MMA and softmax
  /// loops step over, and `body(k)` for block k = 2j + parity, guarded by
  /// k < n for the odd one (the last pair of an odd count has none).
  Value pairsOf(const TaskState &task) {
    return arith::CeilDivUIOp::create(b, loc, task.numBlocks, index(2));
  }
  void forBlockOfPair(const TaskState &task, Value j, int parity,
                      function_ref<void(Value k)> body);

  void buildLoadRole(const TaskState &task);
  /// The acquire, TMA load and commit of `tensor`'s tile of keys from `key`
  /// into ring item `item`.
  void loadKv(const TaskState &task, TileArgument tensor, Value key,
              Value item);
  void buildProducerTail(Value tasks, Value kvItems);
  void buildMmaRole(const TaskState &task);
  /// The softmax of Q tile `stage` (with one Q tile, of the task's tile).
  void buildSoftmaxRole(const TaskState &task, int stage);
  /// The softmax of block k of Q tile `tile` from S buffer `sp` (item
  /// `item` of it and of its P view): softcap, score_mod, mask, the online
  /// softmax, the statistics and P handed on. Returns the new row max and
  /// sum.
  SmallVector<Value> buildSoftmaxBlock(const TaskState &task, int tile,
                                       int sp, Value item, Value k,
                                       ValueRange carried);
  void buildCorrectionRole(const TaskState &task);
  void buildEpilogueRole(const TaskState &task);
  /// A split-KV part's end of Q stage `stage` (correction role): its O and
  /// LSE to the workspace, and the merge.
  void buildSplitFinal(const TaskState &task, int stage, Value rowMax,
                       Value rowSum, Value visited, Value last);
  /// A varlen tile's end of Q stage `stage` (correction role), or a dense
  /// one's that has no O staging (head dim 256): O and the LSE stored by
  /// address into the sequence's rows.
  void buildDirectFinal(const TaskState &task, int stage, Value rowMax,
                        Value rowSum, Value visited, Value last);
  /// What a finalize normalizes with: level B's scale, and FP8's factors
  /// (as the correction role's task re-made them) and shift.
  struct Normalization {
    Value factor, outFactor;
    FloatAttr scaleLog2;
    IntegerAttr probShift;
  };
  Normalization normalization() const {
    // A factor made at the function's top level is used as it is.
    auto remade = [&](Value factor) -> Value {
      Value made = factor ? factors.lookup(factor) : Value();
      return made ? made : factor;
    };
    NormalizeOp normalize = program.normalize;
    return {remade(normalize.getFactor()), remade(normalize.getOutFactor()),
            normalize.getScaleLog2Attr(), normalize.getProbShiftAttr()};
  }
  /// O's element: the inputs' but for FP8's (bf16 over e4m3).
  Type outElement() const {
    return cast<MemRefType>(program.arguments[kOut].getType()).getElementType();
  }
  /// Whether the correction warps store O themselves (split-KV parts,
  /// varlen tiles, and head dim 256, where shared memory has no room for a
  /// staging stage): no staging buffer and no epilogue role.
  bool storesODirectly() const {
    return program.splitWorkspace || program.cuSeqlensQ ||
           config.oStages() == 0;
  }

  TileProgram program;
  /// CTA pairs: a task is the pair's 512 rows, each CTA's 256 of them from
  /// its rank on; the K/V ring's items split between the two.
  bool ctaPair = false;
  /// Q tiles a task (the tile program's), and the configuration at its
  /// head dims and types.
  int64_t qTiles = ScheduleConfig::kQStages;
  ScheduleConfig config;

  /// Q and K's head dim, and V and O's.
  int64_t headDim = 0;
  int64_t valueHeadDim = 0;
  /// The sizes, task count and level-B ops the schedule starts from.
  ScheduleStart start;
  Value qBuffer, kvBuffer, oStaging;
  /// FP8: the task's descale factors, re-made in the softmax and correction
  /// roles' tasks (TaskFactors); the clones of level-B ops that read one
  /// map it.
  TaskFactors factors;
  /// Per Q tile: the statistics buffer and O. S and its P view: one per Q
  /// tile with two, one per block parity with one.
  Value stats[ScheduleConfig::kQStages];
  Value scores[2], probs[2], acc[ScheduleConfig::kQStages];
};

} // namespace

void RoleProgramBuilder::createBuffers() {
  MLIRContext *context = func.getContext();
  auto smem = [&](StringRef name, int64_t rows, int64_t cols, Type type,
                  int64_t stages) -> Value {
    return SmemAllocOp::create(b,
        loc, SmemType::get(context, rows, cols, type, stages),
        b.getStringAttr(name));
  };
  auto tmem = [&](StringRef name, int64_t cols) -> Value {
    return TmemAllocOp::create(b,
        loc, TmemType::get(context, 128, cols, b.getF32Type()),
        b.getStringAttr(name), IntegerAttr());
  };
  // One K/V stage until fa4-pipeline-stages sizes the ring.
  // K and V share the ring: its items are as wide as the wider (K's at
  // head dims (192, 128); V fills the first 128 columns of its items).
  qBuffer = smem("q", 128, headDim, start.element, qTiles);
  kvBuffer = smem("kv", 128, std::max(headDim, valueHeadDim), start.element, 1);
  if (ctaPair)
    kvBuffer.getDefiningOp<SmemAllocOp>().setPairHalf(true);
  // Split-KV parts (to the workspace, then the merge row by row), varlen
  // tiles and head dim 256 store O from the correction warps' registers:
  // no staging buffer, no epilogue.
  if (!storesODirectly())
    oStaging = smem("o_stage", 128, valueHeadDim, outElement(),
                    config.oStages());
  for (int s = 0; s < qTiles; ++s)
    stats[s] = smem(("stats" + Twine(s)).str(), 2, 128, b.getF32Type(), 1);
  // TMEM: S0, S1 (128 columns each), then O per Q tile (V's head dim):
  // 512 columns at head dims (192, 128) with two tiles, and at 256 with
  // one.
  for (int s = 0; s < 2; ++s)
    scores[s] = tmem(("S" + Twine(s)).str(), 128);
  for (int s = 0; s < qTiles; ++s)
    acc[s] = tmem(("O" + Twine(s)).str(), valueHeadDim);
  for (int s = 0; s < 2; ++s)
    probs[s] = TmemViewOp::create(b,
        loc, TmemType::get(context, 128, 128, start.element),
        b.getStringAttr("P" + Twine(s)), scores[s]);
}

scf::ForOp RoleProgramBuilder::buildTaskLoop(ArrayRef<Counter> counters,
                                             function_ref<void(TaskState &)> body) {
  SmallVector<Value> init(counters.size(), index(0));
  auto loop =
      scf::ForOp::create(b, loc, index(0), start.numTasks, index(1), init);
  loop->setAttr("fa4.task_loop", b.getUnitAttr());
  dropImplicitYield(loop);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());

  TaskState task;
  static_cast<TaskHeader &>(task) =
      buildTaskHeader(*this, program, start, loop.getInductionVar());
  // A pair's task is 512 rows (the block range covers them all, so both
  // CTAs visit the same blocks); this CTA's are the rank's 256.
  if (ctaPair)
    task.qRow = add(task.qRow,
                    mul(CtaRankOp::create(b, loc, b.getIndexType()),
                        qTiles * TileConfig::kBlockM));
  task.tileRow[0] = task.qRow;
  task.tileRow[1] = add(task.qRow, index(TileConfig::kBlockM));
  for (auto [counter, value] : llvm::zip(counters, loop.getRegionIterArgs()))
    task.counters[counter] = value;

  body(task);

  SmallVector<Value> next;
  for (Counter counter : counters) {
    Value value = task.counters[counter];
    switch (counter) {
    case Counter::Task:
      next.push_back(add(value, index(1)));
      break;
    case Counter::Kv:
      next.push_back(add(value, mul(task.numBlocks, 2)));
      break;
    case Counter::Block:
      next.push_back(add(value, task.numBlocks));
      break;
    case Counter::EvenBlock:
      next.push_back(add(value, pairsOf(task)));
      break;
    case Counter::OddBlock:
      next.push_back(
          add(value, arith::DivUIOp::create(b, loc, task.numBlocks, index(2))));
      break;
    case Counter::Stats:
      next.push_back(add(value, arith::MaxSIOp::create(b, loc, task.numBlocks,
                                                         index(1))));
      break;
    }
  }
  scf::YieldOp::create(b, loc, next);
  return loop;
}

void RoleProgramBuilder::buildBlockLoop(
    Value lower, Value upper, ValueRange init,
    function_ref<SmallVector<Value>(Value, ValueRange)> body,
    SmallVector<Value> *results, StringRef tag) {
  auto loop = scf::ForOp::create(b, loc, lower, upper, index(1), init);
  dropImplicitYield(loop);
  if (!tag.empty())
    loop->setAttr(tag, b.getUnitAttr());
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> yielded =
        body(loop.getInductionVar(), loop.getRegionIterArgs());
    scf::YieldOp::create(b, loc, yielded);
  }
  if (results)
    results->assign(loop.getResults().begin(), loop.getResults().end());
}

void RoleProgramBuilder::forBlockOfPair(const TaskState &task, Value j,
                                        int parity,
                                        function_ref<void(Value k)> body) {
  Value k = add(mul(j, 2), index(parity));
  if (parity == 0)
    return body(k);
  auto branch = scf::IfOp::create(
      b, loc, cmp(arith::CmpIPredicate::slt, k, task.numBlocks), false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(branch.thenBlock());
  body(k);
}

void RoleProgramBuilder::loadKv(const TaskState &task, TileArgument tensor,
                                Value key, Value item) {
  ProducerAcquireOp::create(b, loc, kvBuffer, item);
  TmaLoadOp::create(b, loc, program.arguments[tensor], task.tensorBatch,
                    task.kvHead, keyTensorRow(*this, task, key), kvBuffer, item,
                    Value(), Value(), program.blockTable,
                    clearFromRow(b, loc, program, task, tensor, key), 1);
  ProducerCommitOp::create(b, loc, kvBuffer, item);
}

void RoleProgramBuilder::buildLoadRole(const TaskState &task) {
  Value taskCount = task.counters.lookup(Counter::Task);
  for (int s = 0; s < qTiles; ++s) {
    Value item = add(mul(taskCount, qTiles), index(s));
    ProducerAcquireOp::create(b, loc, qBuffer, item);
    TmaLoadOp::create(b, loc, program.arguments[kQ], task.tensorBatch,
                      task.headGroup,
                      queryTensorRow(*this, task, task.tileRow[s],
                                     start.gqaRatio),
                      qBuffer, item, Value(), Value(), Value(), Value(),
                      start.gqaRatio);
    ProducerCommitOp::create(b, loc, qBuffer, item);
  }
  if (qTiles == 2) {
    buildBlockLoop(index(0), task.numBlocks, {}, [&](Value k, ValueRange) {
      Value key = keyOf(task, k);
      Value item = kItemOf(task, k);
      for (TileArgument tensor : {kK, kV}) {
        loadKv(task, tensor, key, item);
        item = add(item, index(1));
      }
      return SmallVector<Value>();
    });
    return;
  }
  // One Q tile: K(k), then V(k - 1), and the last V after the loop.
  buildBlockLoop(index(0), task.numBlocks, {}, [&](Value k, ValueRange) {
    loadKv(task, kK, keyOf(task, k), kItemOf(task, k));
    auto later = scf::IfOp::create(
        b, loc, cmp(arith::CmpIPredicate::sgt, k, index(0)), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(later.thenBlock());
    Value previous = sub(k, index(1));
    loadKv(task, kV, keyOf(task, previous), vItemOf(task, previous));
    return SmallVector<Value>();
  });
  auto any = scf::IfOp::create(
      b, loc, cmp(arith::CmpIPredicate::sgt, task.numBlocks, index(0)), false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(any.thenBlock());
  Value last = sub(task.numBlocks, index(1));
  loadKv(task, kV, keyOf(task, last), vItemOf(task, last));
}

/// The loader's tail, as FA4's and CUTLASS's producers have one: before the
/// warp exits it acquires every stage of each ring it fills once more, which
/// waits until the consumer has released the last item loaded into it, so
/// that no hand-off of the CTA is left in flight when the loader is gone. The
/// K/V ring has one stage here; fa4-pipeline-stages, which sizes it, extends
/// the tail (the acquire marked `fa4.producer_tail`) to every stage.
void RoleProgramBuilder::buildProducerTail(Value tasks, Value kvItems) {
  for (int s = 0; s < qTiles; ++s)
    ProducerAcquireOp::create(b, loc, qBuffer,
                              add(mul(tasks, qTiles), index(s)));
  auto kv = ProducerAcquireOp::create(b, loc, kvBuffer, kvItems);
  kv->setAttr("fa4.producer_tail", b.getUnitAttr());
}

/// The MMA warp issues, per KV block, a score group and a value group per Q
/// tile; each group carries `fa4.mma_group` so that fa4-pipeline-stages can
/// reorder them, and recomputes its counts from k alone. With one Q tile
/// the loop steps over pairs of blocks, the groups being the even block's
/// (S0, P0) and the odd one's (S1, P1): the same interleave then issues
/// S(k + 1) right after P·V of block k - 1, under block k's softmax
/// (fa4-pipeline-stages).
void RoleProgramBuilder::buildMmaRole(const TaskState &task) {
  Value taskCount = task.counters.lookup(Counter::Task);
  Value qItem[ScheduleConfig::kQStages];
  for (int s = 0; s < qTiles; ++s) {
    qItem[s] = add(mul(taskCount, qTiles), index(s));
    ConsumerWaitOp::create(b, loc, qBuffer, qItem[s]);
  }
  Value kvBase = task.counters.lookup(Counter::Kv);
  Value blockBase = task.counters.lookup(Counter::Block);
  // Tags every op `emit` appends to the current block with its group.
  auto group = [&](StringRef name, function_ref<void()> emit) {
    Block *block = b.getInsertionBlock();
    Operation *before = block->empty() ? nullptr : &block->back();
    emit();
    for (Operation *op = before ? before->getNextNode() : &block->front(); op;
         op = op->getNextNode())
      op->setAttr("fa4.mma_group", b.getStringAttr(name));
  };
  if (qTiles == 1) {
    Value parityBase[] = {task.counters.lookup(Counter::EvenBlock),
                          task.counters.lookup(Counter::OddBlock)};
    buildBlockLoop(
        index(0), pairsOf(task), {},
        [&](Value j, ValueRange) {
          for (int p = 0; p < 2; ++p)
            group(("score" + Twine(p)).str(), [&] {
              forBlockOfPair(task, j, p, [&](Value k) {
                Value kItem = kItemOf(task, k);
                ConsumerWaitOp::create(b, loc, kvBuffer, kItem);
                ScoreMmaAsyncOp::create(b, loc, qBuffer, qItem[0], kvBuffer,
                                        kItem, scores[p]);
                ProducerCommitOp::create(b, loc, scores[p],
                                         add(parityBase[p], j));
                ConsumerReleaseOp::create(b, loc, kvBuffer, kItem);
              });
            });
          for (int p = 0; p < 2; ++p)
            group(("value" + Twine(p)).str(), [&] {
              forBlockOfPair(task, j, p, [&](Value k) {
                Value vItem = vItemOf(task, k);
                Value block = add(blockBase, k);
                Value accumulate = cmp(arith::CmpIPredicate::ne, k, index(0));
                ConsumerWaitOp::create(b, loc, kvBuffer, vItem);
                ConsumerWaitOp::create(b, loc, probs[p], add(parityBase[p], j));
                ProducerAcquireOp::create(b, loc, acc[0], block);
                ValueMmaAsyncOp::create(b, loc, probs[p], kvBuffer, vItem,
                                        acc[0], accumulate);
                ProducerCommitOp::create(b, loc, acc[0], block);
                ConsumerReleaseOp::create(b, loc, kvBuffer, vItem);
              });
            });
          return SmallVector<Value>();
        },
        nullptr, "fa4.mma_stream");
    ConsumerReleaseOp::create(b, loc, qBuffer, qItem[0]);
    return;
  }
  buildBlockLoop(
      index(0), task.numBlocks, {},
      [&](Value k, ValueRange) {
        for (int s = 0; s < ScheduleConfig::kQStages; ++s)
          group(("score" + Twine(s)).str(), [&] {
            Value kItem = add(kvBase, mul(k, 2));
            Value block = add(blockBase, k);
            if (s == 0)
              ConsumerWaitOp::create(b, loc, kvBuffer, kItem);
            ScoreMmaAsyncOp::create(b, loc, qBuffer, qItem[s], kvBuffer, kItem,
                                      scores[s]);
            ProducerCommitOp::create(b, loc, scores[s], block);
            // K goes back to the loader after the last MMA that reads it.
            if (s == ScheduleConfig::kQStages - 1)
              ConsumerReleaseOp::create(b, loc, kvBuffer, kItem);
          });
        for (int s = 0; s < ScheduleConfig::kQStages; ++s)
          group(("value" + Twine(s)).str(), [&] {
            Value vItem = add(add(kvBase, mul(k, 2)), index(1));
            Value block = add(blockBase, k);
            // The first block of a task overwrites O; later ones accumulate.
            Value accumulate = cmp(arith::CmpIPredicate::ne, k, index(0));
            // The three gates: V landed, P written, O rescaled or released.
            if (s == 0)
              ConsumerWaitOp::create(b, loc, kvBuffer, vItem);
            ConsumerWaitOp::create(b, loc, probs[s], block);
            ProducerAcquireOp::create(b, loc, acc[s], block);
            ValueMmaAsyncOp::create(b, loc, probs[s], kvBuffer, vItem, acc[s],
                                      accumulate);
            ProducerCommitOp::create(b, loc, acc[s], block);
            if (s == ScheduleConfig::kQStages - 1)
              ConsumerReleaseOp::create(b, loc, kvBuffer, vItem);
          });
        return SmallVector<Value>();
      },
      nullptr, "fa4.mma_stream");
  for (int s = 0; s < qTiles; ++s)
    ConsumerReleaseOp::create(b, loc, qBuffer, qItem[s]);
}

SmallVector<Value>
RoleProgramBuilder::buildSoftmaxBlock(const TaskState &task, int tile, int sp,
                                      Value item, Value k, ValueRange carried) {
  Value statsBase = task.counters.lookup(Counter::Stats);
  ConsumerWaitOp::create(b, loc, scores[sp], item);
  Value s = TmemLoadOp::create(
      b, loc, RankedTensorType::get({128, 128}, b.getF32Type()), scores[sp],
      index(0));
  if (SoftcapOp softcap = program.softcap) {
    IRMapping mapping;
    mapping.map(softcap.getScores(), s);
    factors.mapOperands(softcap, mapping);
    s = b.clone(*softcap, mapping)->getResult(0);
  }
  if (ScoreModOp scoreMod = program.scoreMod) {
    IRMapping mapping;
    mapping.map(scoreMod.getScores(), s);
    mapping.map(scoreMod.getBatch(), task.batch);
    mapping.map(scoreMod.getHead(), task.headGroup);
    mapping.map(scoreMod.getRow(), task.tileRow[tile]);
    mapping.map(scoreMod.getCol(), keyOf(task, k));
    mapping.map(scoreMod.getSeqQ(), task.seqQ);
    mapping.map(scoreMod.getSeqK(), task.seqK);
    factors.mapOperands(scoreMod, mapping);
    s = b.clone(*scoreMod, mapping)->getResult(0);
  }
  if (MaskOp mask = program.mask) {
    // Only blocks straddling the band's edges pay for the mask.
    Value blockIndex = sub(sub(task.end, index(1)), k);
    Value straddles = arith::OrIOp::create(
        b, loc, cmp(arith::CmpIPredicate::slt, blockIndex, task.fullBegin),
        cmp(arith::CmpIPredicate::sge, blockIndex, task.fullEnd));
    auto branch = scf::IfOp::create(b, loc, s.getType(), straddles, true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.thenBlock());
      IRMapping mapping;
      mapping.map(mask.getScores(), s);
      mapping.map(mask.getRow(), task.tileRow[tile]);
      mapping.map(mask.getCol(), keyOf(task, k));
      mapping.map(mask.getSeqQ(), task.seqQ);
      mapping.map(mask.getSeqK(), task.seqK);
      if (mask.getBatch()) {
        mapping.map(mask.getBatch(), task.batch);
        mapping.map(mask.getHead(), task.headGroup);
      }
      scf::YieldOp::create(b, loc, b.clone(*mask, mapping)->getResult(0));
      b.setInsertionPointToStart(branch.elseBlock());
      scf::YieldOp::create(b, loc, s);
    }
    s = branch.getResult(0);
  }
  IRMapping mapping;
  mapping.map(program.softmax.getScores(), s);
  mapping.map(program.softmax.getRowMax(), carried[0]);
  mapping.map(program.softmax.getRowSum(), carried[1]);
  factors.mapOperands(program.softmax, mapping);
  auto softmax = cast<OnlineSoftmaxOp>(b.clone(*program.softmax, mapping));
  // From the second block on, correction needs this block's factor
  // before the value MMA may accumulate into O again.
  auto notFirst = scf::IfOp::create(
      b, loc, cmp(arith::CmpIPredicate::ne, k, index(0)), false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(notFirst.thenBlock());
    Value statsItem = sub(add(statsBase, k), index(1));
    ProducerAcquireOp::create(b, loc, stats[tile], statsItem);
    SmemStoreOp::create(b, loc, softmax.getAccScale(), stats[tile], statsItem,
                        Value(), b.getI64IntegerAttr(0));
    ProducerCommitOp::create(b, loc, stats[tile], statsItem);
  }
  TmemStoreOp::create(b, loc, softmax.getProbs(), probs[sp], index(0));
  ProducerCommitOp::create(b, loc, probs[sp], item);
  return {softmax.getNewRowMax(), softmax.getNewRowSum()};
}

void RoleProgramBuilder::buildSoftmaxRole(const TaskState &task, int stage) {
  // FP8: Q's and K's descales (the softmax's, the softcap's or the
  // score_mod's factor); V's is the correction role's.
  SmallVector<Operation *, 3> users{program.softmax};
  if (program.softcap)
    users.push_back(program.softcap);
  if (program.scoreMod)
    users.push_back(program.scoreMod);
  factors.remake(b, loc, func, program, task, users);
  Value statsBase = task.counters.lookup(Counter::Stats);
  auto rowType = RankedTensorType::get({128}, b.getF32Type());
  Value init[] = {splat(rowType, -std::numeric_limits<float>::infinity()),
                  splat(rowType, 0.0f)};
  SmallVector<Value> rowState;
  if (qTiles == 2) {
    Value blockBase = task.counters.lookup(Counter::Block);
    buildBlockLoop(
        index(0), task.numBlocks, init,
        [&](Value k, ValueRange carried) {
          return buildSoftmaxBlock(task, stage, stage, add(blockBase, k), k,
                                   carried);
        },
        &rowState);
  } else {
    // One Q tile: block 2j from S0, block 2j + 1 from S1, the row state
    // carried through both.
    Value parityBase[] = {task.counters.lookup(Counter::EvenBlock),
                          task.counters.lookup(Counter::OddBlock)};
    buildBlockLoop(
        index(0), pairsOf(task), init,
        [&](Value j, ValueRange carried) {
          SmallVector<Value> state =
              buildSoftmaxBlock(task, 0, 0, add(parityBase[0], j),
                                mul(j, 2), carried);
          Value k = add(mul(j, 2), index(1));
          auto odd = scf::IfOp::create(
              b, loc, TypeRange{rowType, rowType},
              cmp(arith::CmpIPredicate::slt, k, task.numBlocks), true);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(odd.thenBlock());
          scf::YieldOp::create(b, loc,
                               buildSoftmaxBlock(task, 0, 1,
                                                 add(parityBase[1], j), k,
                                                 state));
          b.setInsertionPointToStart(odd.elseBlock());
          scf::YieldOp::create(b, loc, state);
          return SmallVector<Value>(odd.getResults());
        },
        &rowState);
  }
  Value item = add(statsBase, arith::MaxSIOp::create(b,
                                  loc, sub(task.numBlocks, index(1)), index(0)));
  ProducerAcquireOp::create(b, loc, stats[stage], item);
  SmemStoreOp::create(b, loc, rowState[0], stats[stage], item, Value(),
                        b.getI64IntegerAttr(0));
  SmemStoreOp::create(b, loc, rowState[1], stats[stage], item, Value(),
                        b.getI64IntegerAttr(1));
  ProducerCommitOp::create(b, loc, stats[stage], item);
}

void RoleProgramBuilder::buildCorrectionRole(const TaskState &task) {
  factors.remake(b, loc, func, program, task, {program.normalize});
  Value blockBase = task.counters.lookup(Counter::Block);
  Value statsBase = task.counters.lookup(Counter::Stats);
  Value taskCount = task.counters.lookup(Counter::Task);
  auto rowType = RankedTensorType::get({128}, b.getF32Type());
  // Before block k may accumulate, O holds blocks < k in the old scale.
  buildBlockLoop(index(1), task.numBlocks, {}, [&](Value k, ValueRange) {
    Value item = sub(add(statsBase, k), index(1));
    Value previous = sub(add(blockBase, k), index(1));
    for (int s = 0; s < qTiles; ++s) {
      ConsumerWaitOp::create(b, loc, stats[s], item);
      Value accScale = SmemLoadOp::create(b, loc, rowType, stats[s], item,
                                            b.getI64IntegerAttr(0), UnitAttr(), IntegerAttr());
      ConsumerReleaseOp::create(b, loc, stats[s], item);
      // With two Q tiles the MMA warp issues S(k) of a tile after P·V(k - 1)
      // into its O, and the commit that fills S(k) covers every tensor-core
      // op issued before it (the PTX ISA's tcgen05.commit): the statistics
      // just waited on come from the softmax after it waited for S(k), so
      // O(k - 1) is already complete and its wait would cost the loop a
      // try_wait and a fence a tile for nothing (FA4's correction loop skips
      // it alike; fa4-emu's mutants had proved it harmless,
      // test/Emu/Inputs/harmless/). With one Q tile S(k) may be issued
      // before P·V(k - 1) (the pairs' order), so the wait stays.
      if (qTiles == 1)
        ConsumerWaitOp::create(b, loc, acc[s], previous);
      RescaleOOp::create(b, loc, acc[s], accScale);
      ConsumerReleaseOp::create(b, loc, acc[s], previous);
    }
    return SmallVector<Value>();
  });

  Value finalItem = add(statsBase, arith::MaxSIOp::create(b,
                                       loc, sub(task.numBlocks, index(1)),
                                       index(0)));
  Value last = sub(add(blockBase, task.numBlocks), index(1));
  Value visited = cmp(arith::CmpIPredicate::sgt, task.numBlocks, index(0));
  auto outType = RankedTensorType::get({128, valueHeadDim}, outElement());
  for (int s = 0; s < qTiles; ++s) {
    ConsumerWaitOp::create(b, loc, stats[s], finalItem);
    Value rowMax = SmemLoadOp::create(b, loc, rowType, stats[s], finalItem,
                                        b.getI64IntegerAttr(0), UnitAttr(), IntegerAttr());
    Value rowSum = SmemLoadOp::create(b, loc, rowType, stats[s], finalItem,
                                        b.getI64IntegerAttr(1), UnitAttr(), IntegerAttr());
    ConsumerReleaseOp::create(b, loc, stats[s], finalItem);
    if (program.splitWorkspace) {
      buildSplitFinal(task, s, rowMax, rowSum, visited, last);
      continue;
    }
    if (storesODirectly()) {
      buildDirectFinal(task, s, rowMax, rowSum, visited, last);
      continue;
    }
    Value item = add(mul(taskCount, qTiles), index(s));
    ProducerAcquireOp::create(b, loc, oStaging, item);
    // A task that sees no key never wrote O: its rows are 0 with LSE -inf.
    auto branch = scf::IfOp::create(b, loc, TypeRange{rowType}, visited, true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.thenBlock());
      ConsumerWaitOp::create(b, loc, acc[s], last);
      Normalization norm = normalization();
      Value lse = FinalizeOOp::create(b, loc, rowType, acc[s], rowMax, rowSum,
                                      oStaging, item, norm.factor,
                                      norm.outFactor, norm.scaleLog2,
                                      norm.probShift);
      ConsumerReleaseOp::create(b, loc, acc[s], last);
      scf::YieldOp::create(b, loc, lse);
      b.setInsertionPointToStart(branch.elseBlock());
      SmemStoreOp::create(b, loc, splat(outType, 0.0f), oStaging, item, Value(),
                            IntegerAttr());
      scf::YieldOp::create(b,
          loc, splat(rowType, -std::numeric_limits<float>::infinity()));
    }
    ProducerCommitOp::create(b, loc, oStaging, item);
    if (program.lseStore)
      StoreLseTileOp::create(b, loc, branch.getResult(0),
                             program.arguments[kLse], task.batch,
                             task.headGroup, task.tileRow[s], ValueRange(),
                             start.gqaRatio);
  }
}

void RoleProgramBuilder::buildSplitFinal(const TaskState &task, int stage,
                                         Value rowMax, Value rowSum,
                                         Value visited, Value last) {
  auto rowType = RankedTensorType::get({128}, b.getF32Type());
  Value workspace = program.splitWorkspace;
  // The part's O and LSE into the workspace (a part that saw no key writes
  // no O: its LSE of -inf gives it no weight), then its count: the last
  // part of each row merges them into O and the LSE.
  auto branch = scf::IfOp::create(b, loc, TypeRange{rowType}, visited, true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    ConsumerWaitOp::create(b, loc, acc[stage], last);
    Normalization norm = normalization();
    Value lse = FinalizePartialOOp::create(
        b, loc, rowType, acc[stage], rowMax, rowSum, program.arguments[kOut],
        workspace, task.batch, task.headGroup, task.tileRow[stage], task.split,
        norm.factor, norm.outFactor, norm.scaleLog2, norm.probShift,
        b.getI64IntegerAttr(start.gqaRatio),
        b.getI64IntegerAttr(program.numSplits));
    ConsumerReleaseOp::create(b, loc, acc[stage], last);
    scf::YieldOp::create(b, loc, lse);
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(
        b, loc, splat(rowType, -std::numeric_limits<float>::infinity()));
  }
  MergeSplitsOp::create(
      b, loc, branch.getResult(0), program.arguments[kOut],
      program.arguments.size() > kLse ? program.arguments[kLse] : Value(),
        workspace,
      task.batch, task.headGroup, task.tileRow[stage], task.split,
      start.gqaRatio, program.numSplits);
}

void RoleProgramBuilder::buildDirectFinal(const TaskState &task, int stage,
                                          Value rowMax, Value rowSum,
                                          Value visited, Value last) {
  auto rowType = RankedTensorType::get({128}, b.getF32Type());
  auto outType = RankedTensorType::get({128, valueHeadDim}, outElement());
  SmallVector<Value, 2> span = storeSpan(task);
  // O / row_sum straight from TMEM to the sequence's rows (a TMA box would
  // write into the next sequence's); a tile that saw no key is 0, LSE -inf.
  // A dense batch's rows are a sequence from row 0 of length seq_q
  // (fa4.finalize_o_rows always takes a span; fa4.store_o_tile without
  // one stores below seq_q alike).
  Value first = span.empty() ? index(0) : span[0];
  Value length = span.empty() ? task.seqQ : span[1];
  auto branch = scf::IfOp::create(b, loc, TypeRange{rowType}, visited, true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    ConsumerWaitOp::create(b, loc, acc[stage], last);
    Normalization norm = normalization();
    Value lse = FinalizeORowsOp::create(
        b, loc, rowType, acc[stage], rowMax, rowSum, program.arguments[kOut],
        task.tensorBatch, task.headGroup, task.tileRow[stage], first, length,
        norm.factor, norm.outFactor, norm.scaleLog2, norm.probShift,
        b.getI64IntegerAttr(start.gqaRatio));
    ConsumerReleaseOp::create(b, loc, acc[stage], last);
    scf::YieldOp::create(b, loc, lse);
    b.setInsertionPointToStart(branch.elseBlock());
    StoreOTileOp::create(b, loc, splat(outType, 0.0f), program.arguments[kOut],
                         task.tensorBatch, task.headGroup, task.tileRow[stage],
                         span, start.gqaRatio);
    scf::YieldOp::create(
        b, loc, splat(rowType, -std::numeric_limits<float>::infinity()));
  }
  if (program.lseStore)
    StoreLseTileOp::create(b, loc, branch.getResult(0), program.arguments[kLse],
                           task.tensorBatch, task.headGroup,
                           task.tileRow[stage], span, start.gqaRatio);
}

void RoleProgramBuilder::buildEpilogueRole(const TaskState &task) {
  Value taskCount = task.counters.lookup(Counter::Task);
  for (int s = 0; s < qTiles; ++s) {
    Value item = add(mul(taskCount, qTiles), index(s));
    ConsumerWaitOp::create(b, loc, oStaging, item);
    TmaStoreOp::create(b, loc, oStaging, item, program.arguments[kOut],
                         task.batch, task.headGroup, task.tileRow[s],
                         start.gqaRatio);
    // The stage goes back once the bulk copy has read it.
    TmaStoreWaitOp::create(b, loc);
    ConsumerReleaseOp::create(b, loc, oStaging, item);
  }
}

void RoleProgramBuilder::build() {
  qTiles = program.range.getRows() / TileConfig::kBlockM;
  // A pair's tasks are two CTAs' rows: the task count, the coordinates and
  // every task's block range (level B's, cloned) count in them.
  if (ctaPair)
    program.range.setRowsAttr(
        b.getI64IntegerAttr(2 * program.range.getRows()));
  start = ScheduleStart::build(*this, program);
  headDim = cast<MemRefType>(program.arguments[kQ].getType()).getDimSize(3);
  valueHeadDim =
      cast<MemRefType>(program.arguments[kV].getType()).getDimSize(3);
  config = ScheduleConfig::get(headDim,
                               start.element.getIntOrFloatBitWidth() / 8,
                               valueHeadDim,
                               outElement().getIntOrFloatBitWidth() / 8,
                               qTiles);
  config.ctaPair = ctaPair;
  createBuffers();

  auto specialize = WarpSpecializeOp::create(b, loc);
  specialize.setCtaPair(ctaPair);
  Block *roles = new Block();
  specialize.getRoles().push_back(roles);
  for (const RoleSpec &spec : ScheduleConfig::roles(qTiles)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(roles);
    auto role = RoleOp::create(b, loc, spec.name, spec.firstWarp, spec.numWarps,
                                 spec.registers);
    b.setInsertionPointToStart(&role.getBody().emplaceBlock());
    StringRef name = spec.name;
    if (name == role::kLoad) {
      scf::ForOp tasks = buildTaskLoop(
          {Counter::Task, Counter::Kv},
          [&](TaskState &task) { buildLoadRole(task); });
      buildProducerTail(tasks.getResult(0), tasks.getResult(1));
    }
    else if (name == role::kMma)
      buildTaskLoop(qTiles == 2
                        ? ArrayRef<Counter>{Counter::Task, Counter::Kv,
                                            Counter::Block}
                        : ArrayRef<Counter>{Counter::Task, Counter::Kv,
                                            Counter::Block, Counter::EvenBlock,
                                            Counter::OddBlock},
                    [&](TaskState &task) { buildMmaRole(task); });
    else if (name == role::kSoftmax0 || name == role::kSoftmax1)
      buildTaskLoop(qTiles == 2 ? ArrayRef<Counter>{Counter::Block,
                                                    Counter::Stats}
                                : ArrayRef<Counter>{Counter::EvenBlock,
                                                    Counter::OddBlock,
                                                    Counter::Stats},
                    [&](TaskState &task) {
                      buildSoftmaxRole(task,
                                       name == role::kSoftmax0 ? 0 : 1);
                    });
    else if (name == role::kCorrection)
      buildTaskLoop({Counter::Task, Counter::Block, Counter::Stats},
                    [&](TaskState &task) { buildCorrectionRole(task); });
    else if (name == role::kEpilogue && !storesODirectly())
      buildTaskLoop({Counter::Task},
                    [&](TaskState &task) { buildEpilogueRole(task); });
  }

  start.eraseLevelB();
}

namespace {
struct AssignWarpRolesPass
    : public fa4::impl::FA4AssignWarpRolesBase<AssignWarpRolesPass> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (getBackwardSpec(func)) {
      if (twoCta == Toggle::On) {
        func.emitError() << "fa4-assign-warp-roles: two-cta=on builds the "
                            "forward as CTA pairs; the backward's schedule "
                            "has one CTA a task";
        return signalPassFailure();
      }
      if (failed(checkModuleFamily(func, target::Family::Blackwell,
                                   getArgument())) ||
          failed(blackwell::scheduleBackward(func, getArgument())))
        return signalPassFailure();
      return;
    }
    // One or two Q tiles a task: fa4-tile's choice (its q-tiles-per-task,
    // one by default past head dim 192).
    FailureOr<std::optional<TileProgram>> read = TileProgram::readForSchedule(
        func, target::Family::Blackwell, getArgument(), /*qTilesPerTask=*/0);
    if (failed(read))
      return signalPassFailure();
    if (!*read)
      return; // not an attention kernel
    TileProgram program = **read;
    if (failed(checkFp8Factors(func, program, "Blackwell")))
      return signalPassFailure();
    // Past head dim 192 only one Q tile a task fits: two Q tiles' S (128
    // columns each) and O (V's head dim each) would take 768 of TMEM's 512
    // columns at V's 256, and two 64 KB Q stages leave the K/V ring one
    // 64 KB item at Q's 256.
    int64_t headDim =
        cast<MemRefType>(program.arguments[kQ].getType()).getDimSize(3);
    int64_t valueHeadDim =
        cast<MemRefType>(program.arguments[kV].getType()).getDimSize(3);
    int64_t qTiles = program.range.getRows() / TileConfig::kBlockM;
    if (qTiles > ScheduleConfig::qTilesFor(headDim, valueHeadDim)) {
      // What two tiles would take: S and O per tile in TMEM; two Q stages
      // and the ring's two K/V stages (no O staging) in shared memory.
      int64_t bytes =
          cast<MemRefType>(program.arguments[kQ].getType())
              .getElementTypeBitWidth() /
          8;
      ScheduleConfig two =
          ScheduleConfig::get(headDim, bytes, valueHeadDim, 0, qTiles);
      int64_t columns = 2 * (two.scoreColumns() +
                             blackwell::accumulatorColumns(valueHeadDim, 8 * bytes));
      int64_t smem = two.fixedSmemBytes(0) + 2 * two.kvItemBytes();
      std::string why;
      llvm::raw_string_ostream os(why);
      if (columns > blackwell::kTmemColumns)
        os << "two tiles' S and O would need " << columns
           << " TMEM columns of " << blackwell::kTmemColumns;
      if (smem > blackwell::kSmemBytesPerCta)
        os << (why.empty() ? "" : ", and ") << "two "
           << two.tileBytes(headDim) / 1024
           << " KB Q stages beside the K/V ring's two stages would need "
           << smem << " bytes of shared memory, more than the "
           << blackwell::kSmemBytesPerCta << " a CTA may use";
      if (why.empty())
        os << "two tiles a task are built up to head dim 192";
      program.range.emitOpError()
          << "covers tasks of two Q tiles at head dims (" << headDim << ", "
          << valueHeadDim << "), which the Blackwell schedule runs one Q "
          << "tile a task: " << why
          << " (fa4c --q-tiles-per-task, fa4-tile's q-tiles-per-task: 1, "
             "the default at these head dims)";
      return signalPassFailure();
    }
    FailureOr<bool> pair = choosePair(program, headDim, valueHeadDim, qTiles);
    if (failed(pair))
      return signalPassFailure();
    RoleProgramBuilder(func, program, *pair).build();
  }

  /// Whether the kernel runs as CTA pairs: `two-cta` on (refused, naming
  /// why, where the pair's schedule is not built), or auto for what FA4
  /// runs as pairs, dense hd128 MHA.
  FailureOr<bool> choosePair(TileProgram program, int64_t headDim,
                             int64_t valueHeadDim, int64_t qTiles) {
    if (twoCta == Toggle::Off)
      return false;
    std::string why;
    llvm::raw_string_ostream os(why);
    Type element =
        cast<MemRefType>(program.arguments[kQ].getType()).getElementType();
    // The pair splits V's head dim in two 64-column halves, one 128-byte
    // swizzle atom of 16-bit values each, the B operand of the pair's P·V.
    if (headDim != 128 || valueHeadDim != 128)
      os << "head dims (" << headDim << ", " << valueHeadDim
         << "): the pair's schedule is built for (128, 128) only (each CTA "
            "holds one 128-byte half of V's 128 columns and a 64-key half "
            "of K's 128-column rows)";
    else if (element.getIntOrFloatBitWidth() != 16)
      os << element << " inputs: fp16 and bf16 only";
    else if (qTiles != 2)
      os << qTiles << " Q tile a task: the pair multiplies two CTAs' two "
                      "tiles each";
    else if (program.range.getBlockN() != TileConfig::kBlockN)
      os << "blocks of " << program.range.getBlockN()
         << " keys: the pair's K halves are 64 of 128";
    else if (program.cuSeqlensQ)
      os << "varlen batches";
    else if (program.blockTable)
      os << "a paged K/V cache";
    else if (program.seqUsedK)
      os << "seqused_k (each sequence's own key count)";
    else if (program.numSplits > 1)
      os << "split-KV";
    if (!why.empty()) {
      if (twoCta == Toggle::Auto)
        return false;
      program.range->getParentOfType<func::FuncOp>().emitError()
          << "the attention cannot run as CTA pairs (two-cta=on): " << why
          << "; the 2-CTA forward is dense fp16/bf16 at head dim 128 "
             "(docs/TwoCta.md)";
      return failure();
    }
    // auto: where FA4 (4.0.0b36) runs its forward as pairs: head dim 128
    // without a causal mask or a window, and a GQA packing that divides the
    // 128-row tile. A pair task visits the union of both CTAs' key blocks
    // (the lower CTA's rows masking the blocks only the upper one needs), so
    // neither a mask_mod nor a block mask, whose skipped blocks differ from
    // one Q tile to the next, runs as pairs by default either.
    if (twoCta == Toggle::On)
      return true;
    return program.range.getMask() == MaskKind::none &&
           program.range.getMaskMod().empty() && !program.range.getBlockMask() &&
           TileConfig::kBlockM % program.range.getGqaRatio() == 0;
  }
};
} // namespace
