//===- AssignWarpgroupRoles.cpp - the tile program on Hopper's warpgroups -===//
//
// Level B -> level C for sm_90a, in the FlashAttention-3 style: a producer
// warpgroup whose elected thread loads Q, then K and V into two rings, with
// TMA; two consumer warpgroups that each own 64 rows of the task's 128-row Q
// tile and run S = Q·Kᵀ, the online softmax, the rescale of O and O += P·V
// on their own registers (wgmma); each stages its half of O in shared memory
// and stores it with TMA. The hand-offs are the ring ops every target shares
// (fa4-insert-barriers makes them mbarriers), the task loop the one
// fa4-tile-scheduler makes persistent.
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/Hopper/HopperConfig.h"
#include "fa4/Transforms/Passes.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <limits>

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4HOPPERWARPGROUPROLES
#include "fa4/Transforms/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {

enum Argument { kQ, kK, kV, kOut, kLse };

/// The level-B ops the consumers re-issue on their half of the tile.
struct TileProgram {
  KvBlockRangeOp range;
  OnlineSoftmaxOp softmax;
  NormalizeOp normalize;
  MaskOp mask;
  SoftcapOp softcap;
  ScoreModOp scoreMod;
  StoreLseTileOp lseStore;
  SmallVector<Value, 5> arguments;
};

struct Task {
  Value batch, kvHead, qRow, begin, fullBegin, fullEnd, end, numBlocks;
  /// Tasks this CTA took before this one, and K/V ring items before its
  /// first block.
  Value taskCount, kvBase;
};

class WarpgroupProgramBuilder {
public:
  WarpgroupProgramBuilder(func::FuncOp func, TileProgram program,
                          const hopper::ScheduleConfig &config)
      : func(func), program(program), config(config), loc(func.getLoc()),
        b(func.getContext()) {}

  void build();

private:
  Value index(int64_t value) {
    Value &constant = indexConstants[value];
    if (!constant) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&func.getBody().front());
      constant = arith::ConstantIndexOp::create(b, loc, value);
    }
    return constant;
  }
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
  /// Key of the k-th visited block (the last one first, as level B).
  Value keyOf(const Task &task, Value k) {
    return mul(sub(sub(task.end, index(1)), k), TileConfig::kBlockN);
  }
  /// `op` cloned with `mapping`, its 128-row tile results retyped to the
  /// warpgroup's 64 rows.
  Operation *cloneForWarpgroup(Operation *op, IRMapping &mapping);

  /// A role's loop over its tasks, carrying the task and K/V counts.
  scf::ForOp buildTaskLoop(function_ref<void(Task &)> body);
  void buildProducer(const Task &task);
  void buildConsumer(const Task &task, int64_t half);

  func::FuncOp func;
  TileProgram program;
  hopper::ScheduleConfig config;
  Location loc;
  OpBuilder b;
  llvm::SmallDenseMap<int64_t, Value> indexConstants;

  int64_t gqaRatio = 1, kvHeads = 1;
  Type element;
  Value batchSize, seqQ, seqK, numTasks;
  Value qBuffer, kBuffer, vBuffer;
  Value oStaging[hopper::ScheduleConfig::kConsumers];
};

} // namespace

static void dropImplicitYield(scf::ForOp loop) {
  Block *body = loop.getBody();
  if (!body->empty() && isa<scf::YieldOp>(body->back()))
    body->back().erase();
}

Operation *WarpgroupProgramBuilder::cloneForWarpgroup(Operation *op,
                                                      IRMapping &mapping) {
  Operation *clone = b.clone(*op, mapping);
  for (OpResult result : clone->getResults()) {
    auto type = dyn_cast<RankedTensorType>(result.getType());
    if (!type || type.getDimSize(0) != TileConfig::kBlockM)
      continue;
    SmallVector<int64_t> shape(type.getShape());
    shape[0] = hopper::ScheduleConfig::kRowsPerConsumer;
    result.setType(RankedTensorType::get(shape, type.getElementType()));
  }
  return clone;
}

scf::ForOp
WarpgroupProgramBuilder::buildTaskLoop(function_ref<void(Task &)> body) {
  auto loop = scf::ForOp::create(b, loc, index(0), numTasks, index(1),
                                 ValueRange{index(0), index(0)});
  loop->setAttr("fa4.task_loop", b.getUnitAttr());
  dropImplicitYield(loop);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());

  KvBlockRangeOp range = program.range;
  Type indexType = b.getIndexType();
  auto coords = TaskCoordsOp::create(
      b, loc, indexType, indexType, indexType, loop.getInductionVar(),
      batchSize, seqQ, seqK,
      TaskOrderAttr::get(b.getContext(), TaskOrder::static_order),
      b.getI64IntegerAttr(kvHeads), b.getI64IntegerAttr(gqaRatio),
      range.getRowsAttr(), range.getBlockNAttr(), range.getMaskAttr(),
      range.getWindowLeftAttr(), range.getWindowRightAttr());
  IRMapping none;
  range.getMaskMod().cloneInto(&coords.getMaskMod(), none);
  Task task;
  task.batch = coords.getBatchIndex();
  task.kvHead = coords.getKvHead();
  task.qRow = mul(coords.getMBlock(), range.getRows());
  IRMapping mapping;
  mapping.map(range.getRowBegin(), task.qRow);
  mapping.map(range.getSeqQ(), seqQ);
  mapping.map(range.getSeqK(), seqK);
  if (range.getBlockMask()) {
    mapping.map(range.getBatch(), task.batch);
    mapping.map(range.getKvHead(), task.kvHead);
  }
  auto blocks = cast<KvBlockRangeOp>(b.clone(*range, mapping));
  task.begin = blocks.getBegin();
  task.fullBegin = blocks.getFullBegin();
  task.fullEnd = blocks.getFullEnd();
  task.end = blocks.getEnd();
  task.numBlocks = sub(task.end, task.begin);
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
  TmaLoadOp::create(b, loc, program.arguments[kQ], task.batch, task.kvHead,
                    task.qRow, qBuffer, task.taskCount, Value(), Value(),
                    gqaRatio);
  ProducerCommitOp::create(b, loc, qBuffer, task.taskCount);
  auto loop = scf::ForOp::create(b, loc, index(0), task.numBlocks, index(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(loop.getBody()->getTerminator());
  Value k = loop.getInductionVar();
  Value key = keyOf(task, k);
  Value item = add(task.kvBase, k);
  for (auto [buffer, tensor] : {std::pair{kBuffer, kK}, {vBuffer, kV}}) {
    ProducerAcquireOp::create(b, loc, buffer, item);
    TmaLoadOp::create(b, loc, program.arguments[tensor], task.batch,
                      task.kvHead, key, buffer, item, Value(), Value(), 1);
    ProducerCommitOp::create(b, loc, buffer, item);
  }
}

void WarpgroupProgramBuilder::buildConsumer(const Task &task, int64_t half) {
  constexpr int64_t kRows = hopper::ScheduleConfig::kRowsPerConsumer;
  int64_t headDim = config.headDim;
  Value rowBegin = add(task.qRow, index(half * kRows));
  auto rowType = RankedTensorType::get({kRows}, b.getF32Type());
  auto accType = RankedTensorType::get({kRows, headDim}, b.getF32Type());
  auto scoreType =
      RankedTensorType::get({kRows, TileConfig::kBlockN}, b.getF32Type());

  ConsumerWaitOp::create(b, loc, qBuffer, task.taskCount);
  Value init[] = {splat(rowType, -std::numeric_limits<float>::infinity()),
                  splat(rowType, 0.0f), splat(accType, 0.0f)};
  auto loop =
      scf::ForOp::create(b, loc, index(0), task.numBlocks, index(1), init);
  dropImplicitYield(loop);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value k = loop.getInductionVar();
    ValueRange carried = loop.getRegionIterArgs();
    Value item = add(task.kvBase, k);
    Value key = keyOf(task, k);

    ConsumerWaitOp::create(b, loc, kBuffer, item);
    Value s = WarpgroupScoreMmaOp::create(b, loc, scoreType, qBuffer,
                                          task.taskCount, half * kRows,
                                          kBuffer, item);
    // K goes back to the producer as soon as both halves have their scores.
    ConsumerReleaseOp::create(b, loc, kBuffer, item);
    if (SoftcapOp softcap = program.softcap) {
      IRMapping mapping;
      mapping.map(softcap.getScores(), s);
      s = cloneForWarpgroup(softcap, mapping)->getResult(0);
    }
    if (ScoreModOp scoreMod = program.scoreMod) {
      IRMapping mapping;
      mapping.map(scoreMod.getScores(), s);
      mapping.map(scoreMod.getBatch(), task.batch);
      mapping.map(scoreMod.getHead(), task.kvHead);
      mapping.map(scoreMod.getRow(), rowBegin);
      mapping.map(scoreMod.getCol(), key);
      mapping.map(scoreMod.getSeqQ(), seqQ);
      mapping.map(scoreMod.getSeqK(), seqK);
      s = cloneForWarpgroup(scoreMod, mapping)->getResult(0);
    }
    if (MaskOp mask = program.mask) {
      // Only blocks straddling the band's edges pay for the mask.
      Value blockIndex = sub(sub(task.end, index(1)), k);
      Value straddles = arith::OrIOp::create(
          b, loc, cmp(arith::CmpIPredicate::slt, blockIndex, task.fullBegin),
          cmp(arith::CmpIPredicate::sge, blockIndex, task.fullEnd));
      auto branch = scf::IfOp::create(b, loc, s.getType(), straddles, true);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.thenBlock());
      IRMapping mapping;
      mapping.map(mask.getScores(), s);
      mapping.map(mask.getRow(), rowBegin);
      mapping.map(mask.getCol(), key);
      mapping.map(mask.getSeqQ(), seqQ);
      mapping.map(mask.getSeqK(), seqK);
      if (mask.getBatch()) {
        mapping.map(mask.getBatch(), task.batch);
        mapping.map(mask.getHead(), task.kvHead);
      }
      scf::YieldOp::create(b, loc,
                           cloneForWarpgroup(mask, mapping)->getResult(0));
      b.setInsertionPointToStart(branch.elseBlock());
      scf::YieldOp::create(b, loc, s);
      b.setInsertionPointAfter(branch);
      s = branch.getResult(0);
    }
    IRMapping mapping;
    mapping.map(program.softmax.getScores(), s);
    mapping.map(program.softmax.getRowMax(), carried[0]);
    mapping.map(program.softmax.getRowSum(), carried[1]);
    auto softmax =
        cast<OnlineSoftmaxOp>(cloneForWarpgroup(program.softmax, mapping));
    // O holds the earlier blocks in the old scale: rescale it in registers
    // before this block accumulates.
    Value acc = CorrectionOp::create(b, loc, accType, carried[2],
                                     softmax.getAccScale());
    ConsumerWaitOp::create(b, loc, vBuffer, item);
    acc = WarpgroupValueMmaOp::create(b, loc, softmax.getProbs(), vBuffer, item,
                                      acc);
    ConsumerReleaseOp::create(b, loc, vBuffer, item);
    scf::YieldOp::create(b, loc,
                         ValueRange{softmax.getNewRowMax(),
                                    softmax.getNewRowSum(), acc});
  }
  ConsumerReleaseOp::create(b, loc, qBuffer, task.taskCount);

  IRMapping mapping;
  mapping.map(program.normalize.getAcc(), loop.getResult(2));
  mapping.map(program.normalize.getRowMax(), loop.getResult(0));
  mapping.map(program.normalize.getRowSum(), loop.getResult(1));
  auto normalize =
      cast<NormalizeOp>(cloneForWarpgroup(program.normalize, mapping));
  // The half of O goes out through shared memory and one TMA store; the
  // stage is written again only after the store has read it.
  Value staging = oStaging[half];
  ProducerAcquireOp::create(b, loc, staging, task.taskCount);
  SmemStoreOp::create(b, loc, normalize.getOut(), staging, task.taskCount,
                      Value(), IntegerAttr());
  ProducerCommitOp::create(b, loc, staging, task.taskCount);
  ConsumerWaitOp::create(b, loc, staging, task.taskCount);
  TmaStoreOp::create(b, loc, staging, task.taskCount, program.arguments[kOut],
                     task.batch, task.kvHead, rowBegin, gqaRatio);
  TmaStoreWaitOp::create(b, loc);
  ConsumerReleaseOp::create(b, loc, staging, task.taskCount);
  if (program.lseStore)
    StoreLseTileOp::create(b, loc, normalize.getLse(), program.arguments[kLse],
                           task.batch, task.kvHead, rowBegin, gqaRatio);
}

void WarpgroupProgramBuilder::build() {
  Block &entry = func.getBody().front();
  SmallVector<Operation *> levelB;
  for (Operation &op : entry.without_terminator())
    levelB.push_back(&op);

  auto qType = cast<MemRefType>(program.arguments[kQ].getType());
  auto kType = cast<MemRefType>(program.arguments[kK].getType());
  element = qType.getElementType();
  kvHeads = kType.getDimSize(2);
  gqaRatio = program.range.getGqaRatio();

  b.setInsertionPoint(entry.getTerminator());
  if (!levelB.empty())
    b.setInsertionPoint(levelB.front());
  batchSize = memref::DimOp::create(b, loc, program.arguments[kQ], 0);
  seqQ = memref::DimOp::create(b, loc, program.arguments[kQ], 1);
  seqK = memref::DimOp::create(b, loc, program.arguments[kK], 1);
  numTasks = TaskCountOp::create(
      b, loc, b.getIndexType(), batchSize, seqQ, b.getI64IntegerAttr(kvHeads),
      b.getI64IntegerAttr(gqaRatio), program.range.getRowsAttr());

  MLIRContext *context = func.getContext();
  auto smem = [&](StringRef name, int64_t rows, int64_t stages) -> Value {
    return SmemAllocOp::create(
        b, loc, SmemType::get(context, rows, config.headDim, element, stages),
        b.getStringAttr(name));
  };
  qBuffer = smem("q", TileConfig::kBlockM, 1);
  kBuffer = smem("k", TileConfig::kBlockN, config.kvStages());
  vBuffer = smem("v", TileConfig::kBlockN, config.kvStages());
  for (int64_t half = 0; half < hopper::ScheduleConfig::kConsumers; ++half)
    oStaging[half] = smem(("o" + Twine(half)).str(),
                          hopper::ScheduleConfig::kRowsPerConsumer, 1);

  auto specialize = WarpSpecializeOp::create(b, loc);
  Block *roles = new Block();
  specialize.getRoles().push_back(roles);
  for (const RoleSpec &spec : hopper::ScheduleConfig::roles()) {
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
      int64_t half = spec.name == hopper::role::kConsumer0 ? 0 : 1;
      buildTaskLoop([&](Task &task) { buildConsumer(task, half); });
    }
  }

  for (Operation *op : llvm::reverse(levelB)) {
    op->dropAllUses();
    op->erase();
  }
}

namespace {
struct HopperWarpgroupRolesPass
    : public fa4::impl::FA4HopperWarpgroupRolesBase<HopperWarpgroupRolesPass> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto spec = func->getAttrOfType<DictionaryAttr>("fa4.spec");
    if (!spec)
      return; // not an attention kernel
    TileProgram program;
    func.walk([&](Operation *op) {
      if (auto range = dyn_cast<KvBlockRangeOp>(op); range && !program.range)
        program.range = range;
      else if (auto softmax = dyn_cast<OnlineSoftmaxOp>(op);
               softmax && !program.softmax)
        program.softmax = softmax;
      else if (auto normalize = dyn_cast<NormalizeOp>(op);
               normalize && !program.normalize)
        program.normalize = normalize;
      else if (auto mask = dyn_cast<MaskOp>(op); mask && !program.mask)
        program.mask = mask;
      else if (auto softcap = dyn_cast<SoftcapOp>(op);
               softcap && !program.softcap)
        program.softcap = softcap;
      else if (auto scoreMod = dyn_cast<ScoreModOp>(op);
               scoreMod && !program.scoreMod)
        program.scoreMod = scoreMod;
      else if (auto store = dyn_cast<StoreLseTileOp>(op);
               store && !program.lseStore)
        program.lseStore = store;
    });
    auto arguments = spec.getAs<DenseI64ArrayAttr>("arguments");
    if (!program.range || !program.softmax || !program.normalize ||
        !arguments || arguments.size() < 4) {
      func.emitError() << "fa4-hopper-warpgroup-roles expects the tile "
                          "program fa4-tile writes (fa4.kv_block_range, "
                          "fa4.online_softmax and fa4.normalize under a "
                          "function with fa4.spec)";
      return signalPassFailure();
    }
    if (program.range.getRows() != TileConfig::kBlockM) {
      program.range.emitOpError()
          << "covers tasks of " << program.range.getRows()
          << " rows; the Hopper schedule runs one 128-row Q tile per task "
             "(fa4-tile q-tiles-per-task=1)";
      return signalPassFailure();
    }
    int64_t ratio = program.range.getGqaRatio();
    if (hopper::ScheduleConfig::kRowsPerConsumer % ratio != 0) {
      program.range.emitOpError()
          << "packs " << ratio
          << " query heads per K/V head; the Hopper schedule stores O in "
             "64-row halves, so the ratio must divide 64";
      return signalPassFailure();
    }
    for (int64_t position : arguments.asArrayRef()) {
      if (position < 0 || position >= func.getNumArguments()) {
        func.emitError() << "fa4.spec names argument #" << position
                         << ", which the function does not have";
        return signalPassFailure();
      }
      program.arguments.push_back(func.getArgument(position));
    }
    if (program.lseStore && program.arguments.size() <= kLse) {
      func.emitError() << "the tile program stores an LSE that fa4.spec does "
                          "not name";
      return signalPassFailure();
    }
    auto qType = cast<MemRefType>(program.arguments[kQ].getType());
    hopper::ScheduleConfig config = hopper::ScheduleConfig::get(
        qType.getDimSize(3), qType.getElementTypeBitWidth() / 8);
    int64_t stages = kvStages;
    if (stages < 0) {
      func.emitError() << "kv-stages must be 0 (as many as fit) or a stage "
                          "count, got "
                       << stages;
      return signalPassFailure();
    }
    if (stages > 0) {
      if (stages > config.maxKvStages()) {
        func.emitError() << "kv-stages=" << stages
                         << " does not fit in shared memory at head dim "
                         << config.headDim << " (at most "
                         << config.maxKvStages() << ")";
        return signalPassFailure();
      }
      config.kvStagesOverride = stages;
    }
    WarpgroupProgramBuilder(func, program, config).build();
  }
};
} // namespace
