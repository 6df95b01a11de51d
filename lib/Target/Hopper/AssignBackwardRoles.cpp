//===- AssignBackwardRoles.cpp - the backward on Hopper's warpgroups -------===//
//
// Level B -> level C of fa4.attention_backward for sm_90a, in the
// FlashAttention-3 style (docs/Backward.md, "The Hopper schedule"):
//
//   fa4.prepare_backward            a kernel: delta = rowsum(O ∘ dO), the dQ
//                                   accumulator cleared
//   fa4.warp_specialize             the main kernel, one task per (batch,
//                                   K/V head, 128 keys):
//     producer   its elected thread loads K and V once per task, then Q and
//                dO for each visited step of 64 packed query rows into
//                two-stage rings (TMA);
//     consumer h owns keys [64h, 64h + 64) of the task and holds its dK and
//                dV in registers; per step it computes Sᵀ = K·Qᵀ and
//                dPᵀ = V·dOᵀ (the forward's score MMA with the operands
//                swapped, so that Pᵀ and dSᵀ are in the A-operand layout
//                of the next MMAs), Pᵀ from the LSE, dSᵀ, then
//                dV += Pᵀ·dO and dK += dSᵀ·Q from registers; it stages dSᵀ
//                in its own shared buffer and computes its keys' share of
//                dQ = dS·K from there, which it adds to the f32
//                accumulator; after the task's last step it stores its rows
//                of dK (times the scale) and dV;
//   fa4.finish_dq                   a kernel: dQ = accumulator · scale.
//
// The pointwise ops are level B's, cloned onto the transposed 64 × 64 tiles
// (`transposed`: rows are keys, columns packed query rows), so the schedule
// computes what the tile program did. Every MMA completes before its result
// is read (no overlap yet); dQ's parts are added in any order, or, in the
// deterministic order, each K/V head's tasks run on one CTA in ascending
// order and each element of dQ is added to by one thread.
//
//===----------------------------------------------------------------------===//

#include "fa4/Target/Hopper/Backward.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Hopper/ScheduleConfig.h"
#include "fa4/Transforms/TileConfig.h"
#include "fa4/Transforms/TileProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::fa4;

namespace {

/// Rows of a query step and keys of a consumer: one wgmma row block.
constexpr int64_t kStep = hopper::ScheduleConfig::kRowsPerConsumer;

/// The level-B ops the schedule clones: their attributes and regions are
/// the variant's.
struct BackwardTemplates {
  QBlockRangeOp range;
  MaskOp mask;                 // null without a mask
  SoftcapOp softcap;           // null without a softcap
  ScoreModOp scoreMod;         // null without a score_mod
  ProbsFromLseOp probs;
  SoftmaxGradOp softmaxGrad;
  SoftcapGradOp softcapGrad;   // null without a softcap
  ScoreModGradOp scoreModGrad; // null without a score_mod
};

/// The first op of type `Op` in `func` (level B builds each once per
/// query loop; the masked loop's come first).
template <typename Op> Op firstOf(func::FuncOp func) {
  Op found;
  func.walk([&](Op op) {
    found = op;
    return WalkResult::interrupt();
  });
  return found;
}

/// One role's view of a task: its coordinates and ring counts.
struct BackwardTask {
  Value batch, kvHead, col;
  /// Tasks this CTA took before this one, and Q/dO ring items before the
  /// task's first step.
  Value taskCount, stepBase;
};

class BackwardProgramBuilder : IndexBuilder {
public:
  BackwardProgramBuilder(func::FuncOp func, BackwardSpecAttr spec,
                         BackwardTemplates templates)
      : IndexBuilder(func), spec(spec), t(templates) {}

  LogicalResult build();

private:
  Value argument(BackwardArgument role) {
    return func.getArgument(spec.getArguments()[role]);
  }
  RankedTensorType tile(int64_t rows, int64_t cols, Type element) {
    return RankedTensorType::get({rows, cols}, element);
  }
  /// A role's loop over its tasks, carrying the task and step counts;
  /// `body` returns the steps the task took.
  scf::ForOp buildTaskLoop(function_ref<Value(BackwardTask &)> body);
  /// One step: its head group, first packed row, query block, the group's
  /// block range and the step's ring item.
  struct Step {
    Value head, row, block;
    QBlockRangeOp range;
    Value item;
  };
  /// For each head group of the task's K/V head and each of its query
  /// blocks that sees the task's keys, ascending: `step`, carrying `init`
  /// (ring items count on from `task.stepBase`). Returns the steps taken,
  /// then the carried values.
  SmallVector<Value>
  forEachStep(const BackwardTask &task, ValueRange init,
              function_ref<SmallVector<Value>(const Step &, ValueRange)> step);
  Value buildProducer(const BackwardTask &task);
  Value buildConsumer(const BackwardTask &task, int64_t half);
  /// One step of consumer `half`: dK and dV after it.
  SmallVector<Value> buildConsumerStep(const BackwardTask &task, int64_t half,
                                       const Step &at, Value dkIn, Value dvIn);
  /// Op `op` cloned with `mapping`, transposed, its results `type`.
  Operation *cloneTransposed(Operation *op, IRMapping &mapping, Type type);

  BackwardSpecAttr spec;
  BackwardTemplates t;
  Value batches, seqQ, seqK, numTasks, nBlocks;
  int64_t kvHeads = 1, groupsPerKv = 1, packing = 1, headDim = 0;
  Type element;
  Value kBuffer, vBuffer, qBuffer, doBuffer;
  Value dsBuffer[hopper::ScheduleConfig::kConsumers];
};

} // namespace

scf::ForOp
BackwardProgramBuilder::buildTaskLoop(function_ref<Value(BackwardTask &)> body) {
  // The persistent loop (the tile scheduler gives it each CTA's share):
  // over tasks (batch, K/V head, K/V block); in the deterministic order
  // over (batch, K/V head) pairs instead, the pair's K/V blocks walked in
  // ascending order inside, so that one CTA adds every dQ part of a K/V
  // head, in the same order on every run.
  bool deterministic = spec.getDeterministic();
  Value outerCount =
      deterministic ? Value(mul(batches, kvHeads)) : Value(numTasks);
  auto loop = scf::ForOp::create(b, loc, index(0), outerCount, index(1),
                                 ValueRange{index(0), index(0)});
  loop->setAttr("fa4.task_loop", b.getUnitAttr());
  dropImplicitYield(loop);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  // Task = (batch · kv_heads + kv_head) · n_blocks + n_block.
  auto task = [&](Value head, Value nBlock, ValueRange counts) {
    BackwardTask task;
    task.kvHead = arith::RemUIOp::create(b, loc, head, index(kvHeads));
    task.batch = arith::DivUIOp::create(b, loc, head, index(kvHeads));
    task.col = mul(nBlock, TileConfig::kBlockN);
    task.taskCount = counts[0];
    task.stepBase = counts[1];
    Value steps = body(task);
    return SmallVector<Value>{add(task.taskCount, index(1)),
                              add(task.stepBase, steps)};
  };
  Value position = loop.getInductionVar();
  if (!deterministic) {
    Value nBlock = arith::RemUIOp::create(b, loc, position, nBlocks);
    Value head = arith::DivUIOp::create(b, loc, position, nBlocks);
    scf::YieldOp::create(b, loc, task(head, nBlock, loop.getRegionIterArgs()));
    return loop;
  }
  auto blocks = scf::ForOp::create(b, loc, index(0), nBlocks, index(1),
                                   loop.getRegionIterArgs());
  dropImplicitYield(blocks);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(blocks.getBody());
    scf::YieldOp::create(b, loc,
                         task(position, blocks.getInductionVar(),
                              blocks.getRegionIterArgs()));
  }
  scf::YieldOp::create(b, loc, blocks.getResults());
  return loop;
}

SmallVector<Value> BackwardProgramBuilder::forEachStep(
    const BackwardTask &task, ValueRange init,
    function_ref<SmallVector<Value>(const Step &, ValueRange)> step) {
  // The query heads of the K/V head: groupsPerKv groups of `packing`
  // packed heads, one after the other, as level B visits them.
  SmallVector<Value> groupInit{index(0)};
  groupInit.append(init.begin(), init.end());
  auto groups = scf::ForOp::create(b, loc, index(0), index(groupsPerKv),
                                   index(1), groupInit);
  dropImplicitYield(groups);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(groups.getBody());
  Value group = groups.getInductionVar();
  ValueRange carried = groups.getRegionIterArgs();
  Step at;
  at.head = add(mul(task.kvHead, groupsPerKv), group);
  IRMapping mapping;
  mapping.map(t.range.getCol(), task.col);
  mapping.map(t.range.getSeqQ(), seqQ);
  mapping.map(t.range.getSeqK(), seqK);
  at.range = cast<QBlockRangeOp>(b.clone(*t.range, mapping));
  at.range.setRows(kStep);
  Value count = sub(at.range.getEnd(), at.range.getBegin());
  auto steps =
      scf::ForOp::create(b, loc, index(0), count, index(1), carried.drop_front());
  dropImplicitYield(steps);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(steps.getBody());
    Value i = steps.getInductionVar();
    at.block = add(at.range.getBegin(), i);
    at.row = mul(at.block, kStep);
    at.item = add(add(task.stepBase, carried[0]), i);
    scf::YieldOp::create(b, loc, step(at, steps.getRegionIterArgs()));
  }
  SmallVector<Value> next{add(carried[0], count)};
  next.append(steps.getResults().begin(), steps.getResults().end());
  scf::YieldOp::create(b, loc, next);
  return SmallVector<Value>(groups.getResults());
}

Value BackwardProgramBuilder::buildProducer(const BackwardTask &task) {
  for (auto [buffer, role] : {std::pair{kBuffer, kBwdK}, {vBuffer, kBwdV}}) {
    ProducerAcquireOp::create(b, loc, buffer, task.taskCount);
    TmaLoadOp::create(b, loc, argument(role), task.batch, task.kvHead,
                      task.col, buffer, task.taskCount, Value(), Value(),
                      Value(), Value(), 1);
    ProducerCommitOp::create(b, loc, buffer, task.taskCount);
  }
  return forEachStep(task, ValueRange(),
                     [&](const Step &at, ValueRange) -> SmallVector<Value> {
                       for (auto [buffer, role] : {std::pair{qBuffer, kBwdQ},
                                                   {doBuffer, kBwdDout}}) {
                         ProducerAcquireOp::create(b, loc, buffer, at.item);
                         TmaLoadOp::create(b, loc, argument(role), task.batch,
                                           at.head, at.row, buffer, at.item,
                                           Value(), Value(), Value(), Value(),
                                           packing);
                         ProducerCommitOp::create(b, loc, buffer, at.item);
                       }
                       return {};
                     })[0];
}

Operation *BackwardProgramBuilder::cloneTransposed(Operation *op,
                                                   IRMapping &mapping,
                                                   Type type) {
  Operation *clone = b.clone(*op, mapping);
  clone->getResult(0).setType(type);
  if (!isa<SoftcapOp, SoftcapGradOp>(clone))
    clone->setAttr("transposed", b.getUnitAttr());
  return clone;
}

Value BackwardProgramBuilder::buildConsumer(const BackwardTask &task,
                                            int64_t half) {
  auto gradType = tile(kStep, headDim, b.getF32Type());
  Value keyBegin = add(task.col, index(half * kStep));

  ConsumerWaitOp::create(b, loc, kBuffer, task.taskCount);
  ConsumerWaitOp::create(b, loc, vBuffer, task.taskCount);
  // dK and dV of the warpgroup's keys, across the task's steps.
  Value zero = splat(gradType, 0.0f);
  SmallVector<Value> done = forEachStep(
      task, ValueRange{zero, zero},
      [&](const Step &at, ValueRange carried) -> SmallVector<Value> {
        return buildConsumerStep(task, half, at, carried[0], carried[1]);
      });
  ConsumerReleaseOp::create(b, loc, kBuffer, task.taskCount);
  ConsumerReleaseOp::create(b, loc, vBuffer, task.taskCount);
  // dK with respect to K carries the softmax scale; dV does not.
  auto kvType = tile(kStep, headDim, element);
  Value dkOut = ConvertTileOp::create(b, loc, kvType, done[1],
                                      spec.getScale());
  Value dvOut = ConvertTileOp::create(b, loc, kvType, done[2],
                                      APFloat(1.0f));
  StoreKvTileOp::create(b, loc, dkOut, argument(kBwdDk), task.batch,
                        task.kvHead, keyBegin);
  StoreKvTileOp::create(b, loc, dvOut, argument(kBwdDv), task.batch,
                        task.kvHead, keyBegin);
  return done[0];
}

SmallVector<Value>
BackwardProgramBuilder::buildConsumerStep(const BackwardTask &task,
                                          int64_t half, const Step &at,
                                          Value dkIn, Value dvIn) {
  Type f32 = b.getF32Type();
  auto scoreType = tile(kStep, kStep, f32);
  auto lowType = tile(kStep, kStep, element);
  auto rowType = RankedTensorType::get({kStep}, f32);
  int64_t keyOffset = half * kStep;
  Value keyBegin = add(task.col, index(keyOffset));
  Value row = at.row, block = at.block;
  QBlockRangeOp range = at.range;
  ConsumerWaitOp::create(b, loc, qBuffer, at.item);
  ConsumerWaitOp::create(b, loc, doBuffer, at.item);
  // The LSE and delta of the step's packed rows, along the tiles' columns.
  Value lse = LoadRowTileOp::create(b, loc, rowType, argument(kBwdLse),
                                    task.batch, at.head, row, packing,
                                    /*transposed=*/true);
  Value delta = LoadRowTileOp::create(b, loc, rowType, argument(kBwdDelta),
                                      task.batch, at.head, row, packing,
                                      /*transposed=*/true);
  // Sᵀ = K·Qᵀ for the warpgroup's keys.
  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ issued together; Pᵀ is computed while dPᵀ
  // is still on the tensor core.
  auto scoreMma = WarpgroupScoreMmaOp::create(b, loc, scoreType, kBuffer,
                                              task.taskCount, keyOffset,
                                              qBuffer, at.item);
  scoreMma.setAsync(true);
  auto dprobsMma = WarpgroupScoreMmaOp::create(b, loc, scoreType, vBuffer,
                                               task.taskCount, keyOffset,
                                               doBuffer, at.item);
  dprobsMma.setAsync(true);
  Value raw = WarpgroupWaitOp::create(b, loc, scoreMma, 1);
  // The scores' mods at the step's place: packed rows from `row`, keys
  // from the warpgroup's first.
  auto place = [&](IRMapping &mapping, Value rowOf, Value colOf,
                   Value seqQOf, Value seqKOf) {
    mapping.map(rowOf, row);
    mapping.map(colOf, keyBegin);
    mapping.map(seqQOf, seqQ);
    mapping.map(seqKOf, seqK);
  };
  Value scores = raw;
  if (t.softcap) {
    IRMapping mapping;
    mapping.map(t.softcap.getScores(), raw);
    scores = cloneTransposed(t.softcap, mapping, scoreType)->getResult(0);
  }
  if (t.scoreMod) {
    IRMapping mapping;
    mapping.map(t.scoreMod.getScores(), raw);
    mapping.map(t.scoreMod.getBatch(), task.batch);
    mapping.map(t.scoreMod.getHead(), at.head);
    place(mapping, t.scoreMod.getRow(), t.scoreMod.getCol(),
          t.scoreMod.getSeqQ(), t.scoreMod.getSeqK());
    scores = cloneTransposed(t.scoreMod, mapping, scoreType)->getResult(0);
  }
  Value visible = scores;
  if (t.mask) {
    // Only steps straddling the band's edges pay for the mask.
    Value straddles = arith::OrIOp::create(
        b, loc,
        cmp(arith::CmpIPredicate::slt, block, range.getFullBegin()),
        cmp(arith::CmpIPredicate::sge, block, range.getFullEnd()));
    auto branch = scf::IfOp::create(b, loc, scoreType, straddles, true);
    OpBuilder::InsertionGuard maskGuard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    IRMapping mapping;
    mapping.map(t.mask.getScores(), scores);
    place(mapping, t.mask.getRow(), t.mask.getCol(), t.mask.getSeqQ(),
          t.mask.getSeqK());
    if (t.mask.getBatch()) {
      mapping.map(t.mask.getBatch(), task.batch);
      mapping.map(t.mask.getHead(), at.head);
    }
    scf::YieldOp::create(
        b, loc, cloneTransposed(t.mask, mapping, scoreType)->getResult(0));
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc, scores);
    b.setInsertionPointAfter(branch);
    visible = branch.getResult(0);
  }
  IRMapping probsMapping;
  probsMapping.map(t.probs.getScores(), visible);
  probsMapping.map(t.probs.getLse(), lse);
  Value probs =
      cloneTransposed(t.probs, probsMapping, scoreType)->getResult(0);
  // dSᵀ = Pᵀ ∘ (dPᵀ − delta), back through the mods.
  Value dprobs = WarpgroupWaitOp::create(b, loc, dprobsMma, 0);
  IRMapping gradMapping;
  gradMapping.map(t.softmaxGrad.getProbs(), probs);
  gradMapping.map(t.softmaxGrad.getDprobs(), dprobs);
  gradMapping.map(t.softmaxGrad.getDelta(), delta);
  Value ds =
      cloneTransposed(t.softmaxGrad, gradMapping, scoreType)->getResult(0);
  if (t.softcapGrad) {
    IRMapping mapping;
    mapping.map(t.softcapGrad.getGrad(), ds);
    mapping.map(t.softcapGrad.getCapped(), scores);
    ds = cloneTransposed(t.softcapGrad, mapping, scoreType)->getResult(0);
  }
  if (t.scoreModGrad) {
    IRMapping mapping;
    mapping.map(t.scoreModGrad.getGrad(), ds);
    mapping.map(t.scoreModGrad.getScores(), raw);
    mapping.map(t.scoreModGrad.getBatch(), task.batch);
    mapping.map(t.scoreModGrad.getHead(), at.head);
    place(mapping, t.scoreModGrad.getRow(), t.scoreModGrad.getCol(),
          t.scoreModGrad.getSeqQ(), t.scoreModGrad.getSeqK());
    ds = cloneTransposed(t.scoreModGrad, mapping, scoreType)->getResult(0);
  }
  // dSᵀ staged in the warpgroup's own buffer first (the MMAs below read
  // the registers it comes from: nothing may touch them until they are
  // done), for dQ = dS·K, which reads it back as its transposed A operand.
  Value probsLow =
      ConvertTileOp::create(b, loc, lowType, probs, APFloat(1.0f));
  Value dsLow = ConvertTileOp::create(b, loc, lowType, ds, APFloat(1.0f));
  Value staging = dsBuffer[half];
  ProducerAcquireOp::create(b, loc, staging, at.item);
  SmemStoreOp::create(b, loc, dsLow, staging, at.item, Value(),
                      IntegerAttr());
  ProducerCommitOp::create(b, loc, staging, at.item);
  // Past 64 columns of head dim the two warpgroups share dQ's step (as
  // FA3): each reads both warpgroups' dSᵀ, all 128 keys, and computes its
  // own 64 columns of the head dim, so that every element of dQ is added
  // to the accumulator once per step, not once per warpgroup. At 64 the
  // halves of a column box are not box-aligned: each warpgroup adds its
  // own keys' share of all 64 columns.
  // In the deterministic order the warpgroups share it at 64 too, the
  // first computing all 64 columns over the 128 keys and the second none:
  // every element of dQ then has one thread adding to it, the same on every
  // task of the K/V head, whose adds the PTX memory model keeps in program
  // order (writes to one location by one thread are coherence-ordered as
  // the program orders them).
  bool shared = headDim > kStep || spec.getDeterministic();
  SmallVector<Value, 2> read{staging};
  if (shared)
    read.assign({dsBuffer[0], dsBuffer[1]});
  for (Value buffer : read)
    ConsumerWaitOp::create(b, loc, buffer, at.item);
  // dV += Pᵀ·dO and dK += dSᵀ·Q (Pᵀ and dSᵀ from registers) and the first
  // 64 columns of the warpgroup's dQ, issued together.
  auto partType = [&](int64_t column) {
    return tile(kStep, std::min(kStep, headDim - column), f32);
  };
  SmallVector<int64_t, 2> columns;
  if (shared) {
    if (half * kStep < headDim)
      columns.push_back(half * kStep);
  } else {
    for (int64_t column = 0; column < headDim; column += kStep)
      columns.push_back(column);
  }
  auto dqMma = [&](int64_t column) {
    auto mma = WarpgroupTransposedMmaOp::create(
        b, loc, partType(column), read[0], at.item,
        shared ? read[1] : Value(), shared ? at.item : Value(), kBuffer,
        task.taskCount, shared ? 0 : keyOffset);
    mma.setColumnOffset(column);
    return mma;
  };
  auto dvMma = WarpgroupValueMmaOp::create(b, loc, probsLow, doBuffer,
                                           at.item, dvIn);
  dvMma.setAsync(true);
  auto dkMma =
      WarpgroupValueMmaOp::create(b, loc, dsLow, qBuffer, at.item, dkIn);
  dkMma.setAsync(true);
  WarpgroupTransposedMmaOp firstPart;
  if (!columns.empty()) {
    firstPart = dqMma(columns.front());
    firstPart.setAsync(true);
  }
  int64_t after = columns.empty() ? 0 : 1;
  Value dvOut = WarpgroupWaitOp::create(b, loc, dvMma, 1 + after);
  ConsumerReleaseOp::create(b, loc, doBuffer, at.item);
  Value dkOut = WarpgroupWaitOp::create(b, loc, dkMma, after);
  ConsumerReleaseOp::create(b, loc, qBuffer, at.item);
  // Each 64 columns of dQ's part added to the accumulator before the next
  // is computed (their registers beside dK and dV).
  for (int64_t column : columns) {
    Value part = column == columns.front()
                     ? Value(WarpgroupWaitOp::create(b, loc, firstPart, 0))
                     : Value(dqMma(column));
    auto accumulate =
        AccumulateDqOp::create(b, loc, part, argument(kBwdDqAccum),
                               task.batch, at.head, row, packing);
    accumulate.setColumn(column);
  }
  for (Value buffer : read)
    ConsumerReleaseOp::create(b, loc, buffer, at.item);
  return {dkOut, dvOut};
}

LogicalResult BackwardProgramBuilder::build() {
  auto qType = cast<MemRefType>(argument(kBwdQ).getType());
  auto kType = cast<MemRefType>(argument(kBwdK).getType());
  headDim = qType.getDimSize(3);
  element = qType.getElementType();
  kvHeads = kType.getDimSize(2);
  packing = t.range.getGqaRatio();
  int64_t qHeads = qType.getDimSize(2);
  if (kStep % packing != 0)
    return t.range.emitOpError()
           << "packs " << packing
           << " query heads per row block; the Hopper backward's steps are "
           << kStep << " rows, so the packing must divide " << kStep;
  groupsPerKv = qHeads / kvHeads / packing;

  // The old body goes once the new one is built (the templates are in it).
  Block &body = func.getBody().front();
  SmallVector<Operation *> levelB;
  for (Operation &op : body.without_terminator())
    levelB.push_back(&op);
  b.setInsertionPointToStart(&body);
  Value zero = index(0), one = index(1);
  batches = memref::DimOp::create(b, loc, argument(kBwdQ), zero);
  seqQ = memref::DimOp::create(b, loc, argument(kBwdQ), one);
  seqK = memref::DimOp::create(b, loc, argument(kBwdK), one);
  nBlocks = arith::CeilDivUIOp::create(b, loc, seqK,
                                       index(TileConfig::kBlockN));
  numTasks = arith::MulIOp::create(b, loc, mul(batches, kvHeads), nBlocks);

  // 1. delta and the cleared accumulator.
  PrepareBackwardOp::create(b, loc, argument(kBwdOut), argument(kBwdDout),
                            argument(kBwdDelta), argument(kBwdDqAccum));

  // 2. The main kernel.
  MLIRContext *context = func.getContext();
  auto smem = [&](StringRef name, int64_t rows, int64_t cols,
                  int64_t stages) -> Value {
    return SmemAllocOp::create(
        b, loc, SmemType::get(context, rows, cols, element, stages),
        b.getStringAttr(name));
  };
  kBuffer = smem("k", TileConfig::kBlockN, headDim, 1);
  vBuffer = smem("v", TileConfig::kBlockN, headDim, 1);
  qBuffer = smem("q", kStep, headDim, 2);
  doBuffer = smem("do", kStep, headDim, 2);
  for (int64_t half = 0; half < hopper::ScheduleConfig::kConsumers; ++half)
    dsBuffer[half] = smem(("ds" + Twine(half)).str(), kStep, kStep, 1);

  auto specialize = WarpSpecializeOp::create(b, loc);
  Block *roles = new Block();
  specialize.getRoles().push_back(roles);
  for (const RoleSpec &role : hopper::ScheduleConfig::backwardRoles()) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(roles);
    auto op = RoleOp::create(b, loc, role.name, role.firstWarp, role.numWarps,
                             role.registers);
    b.setInsertionPointToStart(&op.getBody().emplaceBlock());
    if (role.name == hopper::role::kProducer) {
      op->setAttr("fa4.single_warp", b.getUnitAttr());
      scf::ForOp tasks = buildTaskLoop(
          [&](BackwardTask &task) { return buildProducer(task); });
      // The producer's tail: every stage released, no hand-off in flight.
      for (Value buffer : {kBuffer, vBuffer})
        ProducerAcquireOp::create(b, loc, buffer, tasks.getResult(0));
      for (int64_t s = 0; s < 2; ++s)
        for (Value buffer : {qBuffer, doBuffer})
          ProducerAcquireOp::create(b, loc, buffer,
                                    add(tasks.getResult(1), index(s)));
    } else {
      int64_t half = role.name == hopper::role::kConsumer0 ? 0 : 1;
      buildTaskLoop(
          [&](BackwardTask &task) { return buildConsumer(task, half); });
    }
  }

  // 3. dQ from the accumulator.
  FinishDqOp::create(b, loc, argument(kBwdDqAccum), argument(kBwdDq),
                     spec.getScale());

  for (Operation *op : llvm::reverse(levelB)) {
    op->dropAllUses();
    op->erase();
  }
  return success();
}

LogicalResult mlir::fa4::hopper::scheduleBackward(func::FuncOp func,
                                                  StringRef pass) {
  BackwardSpecAttr spec = getBackwardSpec(func);
  BackwardTemplates t;
  t.range = firstOf<QBlockRangeOp>(func);
  t.mask = firstOf<MaskOp>(func);
  t.softcap = firstOf<SoftcapOp>(func);
  t.scoreMod = firstOf<ScoreModOp>(func);
  t.probs = firstOf<ProbsFromLseOp>(func);
  t.softmaxGrad = firstOf<SoftmaxGradOp>(func);
  t.softcapGrad = firstOf<SoftcapGradOp>(func);
  t.scoreModGrad = firstOf<ScoreModGradOp>(func);
  if (!t.range || !t.probs || !t.softmaxGrad)
    return func.emitOpError()
           << "carries fa4.backward_spec but holds no backward tile program "
              "(fa4.q_block_range, fa4.probs_from_lse, fa4.softmax_grad) for "
           << pass << " to schedule";
  if (firstOf<WarpSpecializeOp>(func))
    return func.emitOpError() << "is already scheduled (it holds "
                                 "fa4.warp_specialize)";
  for (Value role : {func.getArgument(spec.getArguments()[kBwdQ]),
                     func.getArgument(spec.getArguments()[kBwdK])}) {
    auto type = cast<MemRefType>(role.getType());
    if (type.getRank() != 4 || type.isDynamicDim(2) || type.isDynamicDim(3))
      return func.emitOpError()
             << "has Q or K of type " << type
             << "; the Hopper backward needs rank-4 memrefs with static "
                "heads and head dim";
  }
  return BackwardProgramBuilder(func, spec, t).build();
}
