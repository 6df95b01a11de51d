//===- AssignWarpgroupRoles.cpp - the tile program on Hopper's warpgroups -===//
//
// Level B -> level C for sm_90a, in the FlashAttention-3 style: a producer
// warpgroup whose elected thread loads Q, then K and V into two rings, with
// TMA; two consumer warpgroups that each own 64 rows of the task's 128-row Q
// tile (three of a 192-row one: q-tile-rows) and run S = Q·Kᵀ, the online
// softmax, the rescale of O and O += P·V on their own registers (wgmma);
// each stages its 64 rows of O in shared memory and stores them with TMA. The hand-offs are the ring ops every target shares
// (fa4-insert-barriers makes them mbarriers), the task loop the one
// fa4-tile-scheduler makes persistent.
//
// FP8 (e4m3 Q, K, V): the same schedule with 8-bit rings, V's loaded
// transposed (sm_90a's FP8 wgmma reads B K-major only), and each consumer
// reading the task's descales itself before its first block.
//
//===----------------------------------------------------------------------===//

#include "fa4/Transforms/TileProgram.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Hopper/Backward.h"
#include "fa4/Target/Hopper/ScheduleConfig.h"
#include "fa4/Target/Hopper/Passes.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <functional>
#include <limits>

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4HOPPERWARPGROUPROLES
#include "fa4/Target/Hopper/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {


struct Task : TaskHeader {
  /// Tasks this CTA took before this one, and K/V ring items before its
  /// first block.
  Value taskCount, kvBase;
};

class WarpgroupProgramBuilder : IndexBuilder {
public:
  WarpgroupProgramBuilder(func::FuncOp func, TileProgram program,
                          const hopper::ScheduleConfig &config)
      : IndexBuilder(func), program(program), config(config) {}

  void build();

private:
  /// Key of the k-th visited block (the last one first, as level B).
  Value keyOf(const Task &task, Value k) {
    return mul(sub(sub(task.end, index(1)), k), config.blockN);
  }
  /// `op` cloned with `mapping`, its Q-tile-row results retyped to the
  /// warpgroup's 64 rows.
  Operation *cloneForWarpgroup(Operation *op, IRMapping &mapping);

  /// A role's loop over its tasks, carrying the task and K/V counts.
  scf::ForOp buildTaskLoop(function_ref<void(Task &)> body);
  void buildProducer(const Task &task);
  void buildConsumer(const Task &task, int64_t half);
  /// Which of the k-th visited block's scores the mask is applied to: a
  /// branch on whether the block straddles the band's edges, or decided by
  /// the caller (which branched once around the whole block).
  enum class Masking { IfStraddling, Masked, Unmasked };
  /// Whether the k-th visited block straddles the band's edges (i1).
  Value straddles(const Task &task, Value k);
  /// Softcap, score_mod and mask of the k-th visited block's scores `s`,
  /// then the online softmax.
  OnlineSoftmaxOp buildSoftmax(const Task &task, Value rowBegin, Value k,
                               Value s, Value rowMax, Value rowSum,
                               Masking masking = Masking::IfStraddling);
  /// FlashAttention-3's ping-pong: consumer `half` waits for its turn to
  /// issue its MMAs (named barrier 1 + half: its own 128 threads and the
  /// previous consumer's, which arrive there), and hands the turn to the
  /// next after issuing them, so that one's softmax runs while another's
  /// MMAs do. Three consumers take turns round robin (FlashAttention-3's
  /// scheduler barrier for three MMA warpgroups).
  void takeTurn(int64_t half) {
    NamedBarrierSyncOp::create(b, loc, 1 + half,
                               2 * hopper::ScheduleConfig::kThreadsPerRole);
  }
  void passTurn(int64_t half) {
    NamedBarrierArriveOp::create(b, loc, 1 + (half + 1) % config.consumers,
                                 2 * hopper::ScheduleConfig::kThreadsPerRole);
  }
  /// A consumer's row vectors, O and S: tensor<64xf32>, tensor<64xDxf32>,
  /// tensor<64x128xf32>.
  std::tuple<RankedTensorType, RankedTensorType, RankedTensorType>
  tileTypes() {
    constexpr int64_t kRows = hopper::ScheduleConfig::kRowsPerConsumer;
    Type f32 = b.getF32Type();
    return {RankedTensorType::get({kRows}, f32),
            RankedTensorType::get({kRows, config.valueHeadDim}, f32),
            RankedTensorType::get({kRows, config.blockN}, f32)};
  }
  /// The consumer's loop over the task's blocks, each MMA waited for at
  /// once, or software-pipelined; both give back max, sum and O.
  SmallVector<Value, 3> buildSequentialLoop(const Task &task, int64_t half,
                                            Value rowBegin);
  SmallVector<Value, 3> buildOverlappedLoop(const Task &task, int64_t half,
                                            Value rowBegin);

  TileProgram program;
  hopper::ScheduleConfig config;

  /// FP8: the task's descale factors, re-made in the consumer's task
  /// (TaskFactors); the clones of level-B ops that read one map it.
  TaskFactors factors;

  /// The sizes, task count and level-B ops the schedule starts from.
  ScheduleStart start;
  Value qBuffer, kBuffer, vBuffer;
  Value oStaging[hopper::ScheduleConfig::kMaxConsumers];
};

} // namespace

Operation *WarpgroupProgramBuilder::cloneForWarpgroup(Operation *op,
                                                      IRMapping &mapping) {
  // FP8's factors are operands of the softmax, the normalization, the
  // softcap and the score_mod: the consumer's task re-made them.
  factors.mapOperands(op, mapping);
  Operation *clone = b.clone(*op, mapping);
  for (OpResult result : clone->getResults()) {
    auto type = dyn_cast<RankedTensorType>(result.getType());
    if (!type || type.getDimSize(0) != config.qRows())
      continue;
    SmallVector<int64_t> shape(type.getShape());
    shape[0] = hopper::ScheduleConfig::kRowsPerConsumer;
    result.setType(RankedTensorType::get(shape, type.getElementType()));
  }
  return clone;
}

scf::ForOp
WarpgroupProgramBuilder::buildTaskLoop(function_ref<void(Task &)> body) {
  auto loop = scf::ForOp::create(b, loc, index(0), start.numTasks, index(1),
                                 ValueRange{index(0), index(0)});
  loop->setAttr("fa4.task_loop", b.getUnitAttr());
  dropImplicitYield(loop);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());

  Task task;
  static_cast<TaskHeader &>(task) =
      buildTaskHeader(*this, program, start, loop.getInductionVar());
  task.taskCount = loop.getRegionIterArgs()[0];
  task.kvBase = loop.getRegionIterArgs()[1];
  body(task);
  scf::YieldOp::create(b, loc,
                       ValueRange{add(task.taskCount, index(1)),
                                  add(task.kvBase, task.numBlocks)});
  return loop;
}

void WarpgroupProgramBuilder::buildProducer(const Task &task) {
  ProducerAcquireOp::create(b, loc, qBuffer, task.taskCount);
  TmaLoadOp::create(b, loc, program.arguments[kQ], task.tensorBatch,
                    task.headGroup,
                    queryTensorRow(*this, task, task.qRow, start.gqaRatio),
                    qBuffer, task.taskCount, Value(), Value(), Value(), Value(),
                    start.gqaRatio);
  ProducerCommitOp::create(b, loc, qBuffer, task.taskCount);
  auto loop = scf::ForOp::create(b, loc, index(0), task.numBlocks, index(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(loop.getBody()->getTerminator());
  Value k = loop.getInductionVar();
  Value key = keyOf(task, k);
  Value item = add(task.kvBase, k);
  for (auto [buffer, tensor] : {std::pair{kBuffer, kK}, {vBuffer, kV}}) {
    ProducerAcquireOp::create(b, loc, buffer, item);
    auto load = TmaLoadOp::create(
        b, loc, program.arguments[tensor], task.tensorBatch, task.kvHead,
        keyTensorRow(*this, task, key), buffer, item, Value(), Value(),
        program.blockTable, clearFromRow(b, loc, program, task, tensor, key),
        1);
    // FP8's V comes transposed, [head_dim, keys] (the module comment).
    if (tensor == kV && config.elementBytes == 1)
      load.setTransposed(true);
    ProducerCommitOp::create(b, loc, buffer, item);
  }
}

Value WarpgroupProgramBuilder::straddles(const Task &task, Value k) {
  Value blockIndex = sub(sub(task.end, index(1)), k);
  return arith::OrIOp::create(
      b, loc, cmp(arith::CmpIPredicate::slt, blockIndex, task.fullBegin),
      cmp(arith::CmpIPredicate::sge, blockIndex, task.fullEnd));
}

OnlineSoftmaxOp WarpgroupProgramBuilder::buildSoftmax(const Task &task,
                                                      Value rowBegin, Value k,
                                                      Value s, Value rowMax,
                                                      Value rowSum,
                                                      Masking masking) {
  Value key = keyOf(task, k);
  if (SoftcapOp softcap = program.softcap) {
    IRMapping mapping;
    mapping.map(softcap.getScores(), s);
    s = cloneForWarpgroup(softcap, mapping)->getResult(0);
  }
  if (ScoreModOp scoreMod = program.scoreMod) {
    IRMapping mapping;
    mapping.map(scoreMod.getScores(), s);
    mapping.map(scoreMod.getBatch(), task.batch);
    mapping.map(scoreMod.getHead(), task.headGroup);
    mapping.map(scoreMod.getRow(), rowBegin);
    mapping.map(scoreMod.getCol(), key);
    mapping.map(scoreMod.getSeqQ(), task.seqQ);
    mapping.map(scoreMod.getSeqK(), task.seqK);
    s = cloneForWarpgroup(scoreMod, mapping)->getResult(0);
  }
  auto applyMask = [&](MaskOp mask, Value scores) -> Value {
    IRMapping mapping;
    mapping.map(mask.getScores(), scores);
    mapping.map(mask.getRow(), rowBegin);
    mapping.map(mask.getCol(), key);
    mapping.map(mask.getSeqQ(), task.seqQ);
    mapping.map(mask.getSeqK(), task.seqK);
    if (mask.getBatch()) {
      mapping.map(mask.getBatch(), task.batch);
      mapping.map(mask.getHead(), task.headGroup);
    }
    return cloneForWarpgroup(mask, mapping)->getResult(0);
  };
  MaskOp mask = program.mask;
  if (mask && masking == Masking::Masked) {
    s = applyMask(mask, s);
  } else if (mask && masking == Masking::IfStraddling) {
    // Only blocks straddling the band's edges pay for the mask.
    auto branch =
        scf::IfOp::create(b, loc, s.getType(), straddles(task, k), true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    scf::YieldOp::create(b, loc, applyMask(mask, s));
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc, s);
    b.setInsertionPointAfter(branch);
    s = branch.getResult(0);
  }
  IRMapping mapping;
  mapping.map(program.softmax.getScores(), s);
  mapping.map(program.softmax.getRowMax(), rowMax);
  mapping.map(program.softmax.getRowSum(), rowSum);
  return cast<OnlineSoftmaxOp>(cloneForWarpgroup(program.softmax, mapping));
}

/// The consumer's KV loop without overlap, level B's loop on 64 rows: each
/// MMA completes before the softmax or the next MMA reads its result.
SmallVector<Value, 3>
WarpgroupProgramBuilder::buildSequentialLoop(const Task &task, int64_t half,
                                             Value rowBegin) {
  constexpr int64_t kRows = hopper::ScheduleConfig::kRowsPerConsumer;
  auto [rowType, accType, scoreType] = tileTypes();
  Value init[] = {splat(rowType, -std::numeric_limits<float>::infinity()),
                  splat(rowType, 0.0f), splat(accType, 0.0f)};
  auto loop =
      scf::ForOp::create(b, loc, index(0), task.numBlocks, index(1), init);
  dropImplicitYield(loop);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value k = loop.getInductionVar();
  ValueRange carried = loop.getRegionIterArgs();
  Value item = add(task.kvBase, k);
  ConsumerWaitOp::create(b, loc, kBuffer, item);
  Value s = WarpgroupScoreMmaOp::create(b, loc, scoreType, qBuffer,
                                        task.taskCount, half * kRows, kBuffer,
                                        item);
  // K goes back to the producer as soon as both halves have their scores.
  ConsumerReleaseOp::create(b, loc, kBuffer, item);
  OnlineSoftmaxOp softmax =
      buildSoftmax(task, rowBegin, k, s, carried[0], carried[1]);
  // O holds the earlier blocks in the old scale: rescale it in registers
  // before this block accumulates.
  Value acc =
      CorrectionOp::create(b, loc, accType, carried[2], softmax.getAccScale());
  ConsumerWaitOp::create(b, loc, vBuffer, item);
  acc = WarpgroupValueMmaOp::create(b, loc, softmax.getProbs(), vBuffer, item,
                                    acc);
  ConsumerReleaseOp::create(b, loc, vBuffer, item);
  scf::YieldOp::create(b, loc,
                       ValueRange{softmax.getNewRowMax(),
                                  softmax.getNewRowSum(), acc});
  return SmallVector<Value, 3>(loop.getResults());
}

/// The consumer's KV loop, software-pipelined as FlashAttention-3's
/// intra-warpgroup overlap: while the softmax of block k runs, the tensor
/// core computes S of block k and, before it, O += P·V of block k - 1:
///
///   S(0); softmax(0)
///   for k in 1 .. n-1:
///     issue S(k); issue O += P(k-1)·V(k-1)
///     wait for S(k) (one group may stay pending); release K(k)
///     softmax(k)
///     wait for O; release V(k-1); rescale O by block k's factor
///   O += P(n-1)·V(n-1)
///
/// The same arithmetic as level B's loop, block by block: O holds blocks
/// < k in block k-1's scale when block k's factor applies to it.
SmallVector<Value, 3>
WarpgroupProgramBuilder::buildOverlappedLoop(const Task &task, int64_t half,
                                             Value rowBegin) {
  constexpr int64_t kRows = hopper::ScheduleConfig::kRowsPerConsumer;
  auto [rowType, accType, scoreType] = tileTypes();
  Value minusInf = splat(rowType, -std::numeric_limits<float>::infinity());
  Value zeroRow = splat(rowType, 0.0f);
  Value zeroAcc = splat(accType, 0.0f);
  auto score = [&](Value item, bool async) -> Value {
    auto mma = WarpgroupScoreMmaOp::create(b, loc, scoreType, qBuffer,
                                           task.taskCount, half * kRows,
                                           kBuffer, item);
    if (async)
      mma.setAsync(true);
    return mma;
  };
  auto value = [&](Value probs, Value item, Value acc, bool async) -> Value {
    auto mma = WarpgroupValueMmaOp::create(b, loc, probs, vBuffer, item, acc);
    if (async)
      mma.setAsync(true);
    return mma;
  };
  Value visits = cmp(arith::CmpIPredicate::sgt, task.numBlocks, index(0));
  auto any = scf::IfOp::create(b, loc, TypeRange{rowType, rowType, accType},
                               visits, true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(any.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{minusInf, zeroRow, zeroAcc});

    b.setInsertionPointToStart(any.thenBlock());
    // Block 0: its scores, then its softmax (O is still 0: no rescale).
    Value first = task.kvBase;
    ConsumerWaitOp::create(b, loc, kBuffer, first);
    Value s0;
    if (config.pingpong) {
      takeTurn(half);
      s0 = score(first, true);
      passTurn(half);
      s0 = WarpgroupWaitOp::create(b, loc, s0, 0);
    } else {
      s0 = score(first, false);
    }
    ConsumerReleaseOp::create(b, loc, kBuffer, first);
    OnlineSoftmaxOp softmax0 =
        buildSoftmax(task, rowBegin, index(0), s0, minusInf, zeroRow);

    // Blocks 1 .. n-1, each in the loop of its masking: the straddling
    // blocks before the whole ones (the last keys first), the whole ones,
    // the straddling ones after them. No branch may lie between a block's
    // MMAs and its wait for P·V: ptxas waits for every wgmma group where
    // control flow splits or joins, which would put the wait for P·V(k-1)
    // before the softmax instead of after it (H200, Nsight Compute: 13 % of
    // the consumers' samples on that wait when the mask was a branch in the
    // block; LLVM hoists the MMAs out of a branch around the whole block).
    // FlashAttention-3/4 keep masked blocks out of the unmasked loop too.
    auto blocks = [&](Value lo, Value hi, Masking masking,
                      ValueRange init) -> ValueRange {
      auto loop = scf::ForOp::create(b, loc, lo, hi, index(1), init);
      dropImplicitYield(loop);
      OpBuilder::InsertionGuard inner(b);
      b.setInsertionPointToStart(loop.getBody());
      Value k = loop.getInductionVar();
      ValueRange carried = loop.getRegionIterArgs();
      Value item = add(task.kvBase, k);
      Value previous = sub(item, index(1));
      ConsumerWaitOp::create(b, loc, kBuffer, item);
      if (config.pingpong)
        takeTurn(half);
      Value s = score(item, true);
      ConsumerWaitOp::create(b, loc, vBuffer, previous);
      Value acc = value(carried[3], previous, carried[2], true);
      if (config.pingpong)
        passTurn(half);
      // S(k) was issued first: it is done once at most one group is left.
      s = WarpgroupWaitOp::create(b, loc, s, 1);
      ConsumerReleaseOp::create(b, loc, kBuffer, item);
      OnlineSoftmaxOp softmax = buildSoftmax(task, rowBegin, k, s, carried[0],
                                             carried[1], masking);
      acc = WarpgroupWaitOp::create(b, loc, acc, 0);
      ConsumerReleaseOp::create(b, loc, vBuffer, previous);
      // O holds blocks < k in block k-1's scale: move it to block k's.
      acc = CorrectionOp::create(b, loc, accType, acc, softmax.getAccScale());
      scf::YieldOp::create(b, loc,
                           ValueRange{softmax.getNewRowMax(),
                                      softmax.getNewRowSum(), acc,
                                      softmax.getProbs()});
      return loop.getResults();
    };
    SmallVector<Value, 4> state{softmax0.getNewRowMax(),
                                softmax0.getNewRowSum(), zeroAcc,
                                softmax0.getProbs()};
    if (!program.mask) {
      state = llvm::to_vector<4>(
          blocks(index(1), task.numBlocks, Masking::Unmasked, state));
    } else {
      // The k-th visited block is block end-1-k: it straddles for k below
      // end - fullEnd and from end - fullBegin on (an empty or inverted
      // whole range leaves every block masked).
      auto clamp = [&](Value v, Value lo, Value hi) {
        return arith::MinSIOp::create(
            b, loc, arith::MaxSIOp::create(b, loc, v, lo), hi);
      };
      Value wholeFrom = clamp(sub(task.end, task.fullEnd), index(1),
                              task.numBlocks);
      Value wholeTo = clamp(sub(task.end, task.fullBegin), wholeFrom,
                            task.numBlocks);
      state = llvm::to_vector<4>(
          blocks(index(1), wholeFrom, Masking::Masked, state));
      state = llvm::to_vector<4>(
          blocks(wholeFrom, wholeTo, Masking::Unmasked, state));
      state = llvm::to_vector<4>(
          blocks(wholeTo, task.numBlocks, Masking::Masked, state));
    }
    ArrayRef<Value> results = state;
    Value last = sub(add(task.kvBase, task.numBlocks), index(1));
    ConsumerWaitOp::create(b, loc, vBuffer, last);
    Value acc = value(results[3], last, results[2], false);
    ConsumerReleaseOp::create(b, loc, vBuffer, last);
    scf::YieldOp::create(b, loc, ValueRange{results[0], results[1], acc});
  }
  return SmallVector<Value, 3>(any.getResults());
}

/// A consumer's task: its Q rows against every visited block, then its 64
/// rows of O (staged, one TMA store) and its LSE rows.
void WarpgroupProgramBuilder::buildConsumer(const Task &task, int64_t half) {
  Value rowBegin =
      add(task.qRow, index(half * hopper::ScheduleConfig::kRowsPerConsumer));
  factors.remake(b, loc, func, program, task);
  ConsumerWaitOp::create(b, loc, qBuffer, task.taskCount);
  // Max, sum and O after the task's last block.
  SmallVector<Value, 3> rows =
      config.overlap ? buildOverlappedLoop(task, half, rowBegin)
                     : buildSequentialLoop(task, half, rowBegin);
  Value loopMax = rows[0], loopSum = rows[1], loopAcc = rows[2];
  ConsumerReleaseOp::create(b, loc, qBuffer, task.taskCount);

  IRMapping mapping;
  mapping.map(program.normalize.getAcc(), loopAcc);
  mapping.map(program.normalize.getRowMax(), loopMax);
  mapping.map(program.normalize.getRowSum(), loopSum);
  auto normalize =
      cast<NormalizeOp>(cloneForWarpgroup(program.normalize, mapping));
  if (Value workspace = program.splitWorkspace) {
    // A split-KV part: its O (f32, the tile program's normalize) and LSE to
    // the workspace, then its count; the last part of each row merges them
    // into O and the LSE.
    StorePartialOOp::create(b, loc, normalize.getOut(),
                            program.arguments[kOut], workspace, task.batch,
                            task.headGroup, rowBegin, task.split,
                            start.gqaRatio, program.numSplits, 0);
    MergeSplitsOp::create(
        b, loc, normalize.getLse(), program.arguments[kOut],
        program.arguments.size() > kLse ? program.arguments[kLse] : Value(),
        workspace,
        task.batch, task.headGroup, rowBegin, task.split, start.gqaRatio,
        program.numSplits);
    return;
  }
  if (program.cuSeqlensQ || !config.oStaged) {
    // Varlen: the fragment straight to the sequence's rows (a TMA box would
    // write into the next sequence's). Without staging (head dims (192,
    // 128)): the fragment to its rows below seq_q.
    SmallVector<Value, 2> span = storeSpan(task);
    StoreOTileOp::create(b, loc, normalize.getOut(), program.arguments[kOut],
                         task.tensorBatch, task.headGroup, rowBegin, span,
                         start.gqaRatio);
    if (program.lseStore)
      StoreLseTileOp::create(b, loc, normalize.getLse(),
                             program.arguments[kLse], task.tensorBatch,
                             task.headGroup, rowBegin, span, start.gqaRatio);
    return;
  }
  // The consumer's rows of O go out through shared memory and one TMA store; the
  // stage is written again only after the store has read it.
  Value staging = oStaging[half];
  ProducerAcquireOp::create(b, loc, staging, task.taskCount);
  SmemStoreOp::create(b, loc, normalize.getOut(), staging, task.taskCount,
                      Value(), IntegerAttr());
  ProducerCommitOp::create(b, loc, staging, task.taskCount);
  ConsumerWaitOp::create(b, loc, staging, task.taskCount);
  TmaStoreOp::create(b, loc, staging, task.taskCount, program.arguments[kOut],
                     task.batch, task.headGroup, rowBegin, start.gqaRatio);
  TmaStoreWaitOp::create(b, loc);
  ConsumerReleaseOp::create(b, loc, staging, task.taskCount);
  if (program.lseStore)
    StoreLseTileOp::create(b, loc, normalize.getLse(), program.arguments[kLse],
                           task.batch, task.headGroup, rowBegin, ValueRange(),
                           start.gqaRatio);
}

void WarpgroupProgramBuilder::build() {
  start = ScheduleStart::build(*this, program);

  MLIRContext *context = func.getContext();
  Type outElement =
      cast<MemRefType>(program.arguments[kOut].getType()).getElementType();
  auto smem = [&](StringRef name, int64_t rows, int64_t cols, int64_t stages,
                  Type element = Type()) -> Value {
    return SmemAllocOp::create(
        b, loc,
        SmemType::get(context, rows, cols, element ? element : start.element,
                      stages),
        b.getStringAttr(name));
  };
  qBuffer = smem("q", config.qRows(), config.headDim, 1);
  kBuffer = smem("k", config.blockN, config.headDim, config.kvStages());
  // FP8's V stages are V transposed: [head_dim, keys].
  vBuffer = config.elementBytes == 1
                ? smem("v", config.valueHeadDim, config.blockN,
                       config.kvStages())
                : smem("v", config.blockN, config.valueHeadDim,
                       config.kvStages());
  // A split-KV kernel writes O without staging (the parts to the
  // workspace, the merge row by row), a varlen one from the fragments.
  for (int64_t half = 0; half < config.consumers &&
                         !program.splitWorkspace && !program.cuSeqlensQ &&
                         config.oStaged;
       ++half)
    oStaging[half] = smem(("o" + Twine(half)).str(),
                          hopper::ScheduleConfig::kRowsPerConsumer,
                          config.valueHeadDim, 1, outElement);

  auto specialize = WarpSpecializeOp::create(b, loc);
  Block *roles = new Block();
  specialize.getRoles().push_back(roles);
  for (const RoleSpec &spec : config.roles()) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(roles);
    auto role = RoleOp::create(b, loc, spec.name, spec.firstWarp,
                               spec.numWarps, spec.registers);
    b.setInsertionPointToStart(&role.getBody().emplaceBlock());
    if (spec.name == hopper::role::kProducer) {
      // Its elected thread does all of its work: the other three warps only
      // hand their registers to the consumers.
      role->setAttr("fa4.single_warp", b.getUnitAttr());
      scf::ForOp tasks =
          buildTaskLoop([&](Task &task) { buildProducer(task); });
      // The producer's tail: it waits until the consumers released the last
      // item of every stage, so no hand-off is in flight when it exits.
      ProducerAcquireOp::create(b, loc, qBuffer, tasks.getResult(0));
      for (int64_t s = 0; s < config.kvStages(); ++s)
        for (Value buffer : {kBuffer, vBuffer})
          ProducerAcquireOp::create(b, loc, buffer,
                                    add(tasks.getResult(1), index(s)));
    } else {
      int64_t half = hopper::ScheduleConfig::consumerIndex(spec);
      // The ping-pong starts with consumer0's turn, which the last consumer
      // gives it.
      if (config.pingpong && half == config.consumers - 1)
        passTurn(half);
      buildTaskLoop([&](Task &task) { buildConsumer(task, half); });
    }
  }

  start.eraseLevelB();
}

namespace {
struct HopperWarpgroupRolesPass
    : public fa4::impl::FA4HopperWarpgroupRolesBase<HopperWarpgroupRolesPass> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (getBackwardSpec(func)) {
      if (failed(checkModuleFamily(func, target::Family::Hopper,
                                   getArgument())) ||
          failed(hopper::scheduleBackward(func, getArgument())))
        return signalPassFailure();
      return;
    }
    FailureOr<std::optional<TileProgram>> read = TileProgram::readForSchedule(
        func, target::Family::Hopper, getArgument(), /*qTilesPerTask=*/1);
    if (failed(read))
      return signalPassFailure();
    if (!*read)
      return; // not an attention kernel
    TileProgram program = **read;
    if (failed(checkFp8Factors(func, program, "Hopper")))
      return signalPassFailure();
    int64_t ratio = program.range.getGqaRatio();
    if (hopper::ScheduleConfig::kRowsPerConsumer % ratio != 0) {
      program.range.emitOpError()
          << "packs " << ratio
          << " query heads per tile; the Hopper schedule stores O in "
             "64-row halves, so the packing must divide 64";
      return signalPassFailure();
    }
    auto qType = cast<MemRefType>(program.arguments[kQ].getType());
    auto vType = cast<MemRefType>(program.arguments[kV].getType());
    hopper::ScheduleConfig config = hopper::ScheduleConfig::get(
        qType.getDimSize(3), qType.getElementTypeBitWidth() / 8,
        vType.getDimSize(3), program.range.getBlockN());
    // A 192-row tile: three consumers, for what fa4-tile builds it
    // (q-tile-rows; a tile program written by hand is held to the same).
    if (program.range.getRows() == target::kWideQTileRows) {
      std::string problem = target::wideQTileProblem(
          getTargetOrDefault(func), 8 * config.elementBytes, config.headDim,
          config.valueHeadDim, config.blockN,
          program.splitWorkspace || program.cuSeqlensQ || program.blockTable ||
              program.seqUsedK || program.range.getBlockMask());
      if (!problem.empty()) {
        program.range.emitOpError()
            << "covers 192-row tasks (three consumer warpgroups): "
            << problem;
        return signalPassFailure();
      }
      config.consumers = 3;
    }
    config.outElementBytes =
        cast<MemRefType>(program.arguments[kOut].getType())
            .getElementTypeBitWidth() /
        8;
    int64_t stages = kvStages;
    if (stages < 0) {
      func.emitError() << "kv-stages must be 0 (as many as fit) or a stage "
                          "count, got "
                       << stages;
      return signalPassFailure();
    }
    config.chooseOStaging(stages);
    // A block asked for (block-n) may leave no room for one K and one V.
    if (config.maxKvStages() < 1) {
      int64_t widest = hopper::ScheduleConfig::widestBlockN(
          config.headDim, config.valueHeadDim, config.elementBytes, 1, 256);
      program.range.emitOpError()
          << "K/V blocks of " << config.blockN << " keys at head dims ("
          << config.headDim << ", " << config.valueHeadDim
          << ") leave no room for one K/V stage: a stage is "
          << config.kvPairBytes() << " bytes beside Q's "
          << config.tileBytes(config.headDim)
          << " in shared memory (block-n: at most " << widest << " keys)";
      return signalPassFailure();
    }
    // Which block the stage counts below are of, when it is not the usual.
    std::string blocks =
        config.blockN == TileConfig::kBlockN
            ? std::string()
            : " with K/V blocks of " + std::to_string(config.blockN) + " keys";
    if (stages > 0) {
      // Where shared memory would hold more, the ring's own cap binds.
      if (stages > config.maxKvStages() &&
          config.maxKvStages() == hopper::ScheduleConfig::kMaxKvStages) {
        func.emitError() << "kv-stages=" << stages
                         << " is more than the Hopper schedule's ring takes ("
                         << hopper::ScheduleConfig::kMaxKvStages
                         << " stages at most: deeper rings buy nothing once "
                            "the loads run ahead)";
        return signalPassFailure();
      }
      if (stages > config.maxKvStages()) {
        InFlightDiagnostic diag = func.emitError();
        diag << "kv-stages=" << stages
                         << " does not fit in shared memory at head dim "
                         << config.headDim;
        if (config.valueHeadDim != config.headDim)
          diag << " (V's " << config.valueHeadDim << ")";
        diag << blocks << " (at most "
                         << config.maxKvStages() << ")";
        return signalPassFailure();
      }
      config.kvStagesOverride = stages;
    }
    // The options' values were checked where they are declared (Toggle);
    // auto is the overlapped loop, which fits every variant.
    config.overlap = overlap != Toggle::Off;
    if (pingpong == Toggle::On && !config.overlap) {
      func.emitError()
          << "pingpong=on needs the overlapped loop, which overlap=off turns "
             "off";
      return signalPassFailure();
    }
    config.pingpong = config.overlap && pingpong != Toggle::Off;
    WarpgroupProgramBuilder(func, program, config).build();
  }
};
} // namespace
