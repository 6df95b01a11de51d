//===- PipelineStages.cpp - ring depths and the MMA warp's interleave ------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Target/Blackwell/Passes.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <algorithm>

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4PIPELINESTAGES
#include "fa4/Target/Blackwell/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

/// Clones the ops of `group` from `body`, with the block index `k` mapped to
/// `blockIndex`, at `b`'s insertion point.
static void emitGroup(OpBuilder &b, scf::ForOp stream, StringRef group,
                      Value blockIndex) {
  IRMapping mapping;
  mapping.map(stream.getInductionVar(), blockIndex);
  for (Operation &op : stream.getBody()->without_terminator()) {
    auto name = op.getAttrOfType<StringAttr>("fa4.mma_group");
    if (name && name.getValue() == group)
      b.clone(op, mapping)->removeAttr("fa4.mma_group");
  }
}

/// The interleave moves whole groups: every op of the stream must belong to
/// one, and nothing may flow out of the loop or from one group to another.
static LogicalResult checkStream(scf::ForOp stream) {
  static constexpr StringRef kGroups[] = {"score0", "score1", "value0", "value1"};
  if (stream.getNumResults() != 0)
    return stream.emitOpError()
           << "an fa4.mma_stream loop may not yield values";
  for (Operation &op : stream.getBody()->without_terminator()) {
    auto name = op.getAttrOfType<StringAttr>("fa4.mma_group");
    if (!name || !llvm::is_contained(kGroups, name.getValue()))
      return op.emitOpError()
             << "in an fa4.mma_stream loop needs an fa4.mma_group of score0, "
                "score1, value0 or value1 (as fa4-assign-warp-roles writes)";
    for (Value operand : op.getOperands()) {
      Operation *producer = operand.getDefiningOp();
      if (!producer || producer->getBlock() != stream.getBody())
        continue;
      auto from = producer->getAttrOfType<StringAttr>("fa4.mma_group");
      if (from && from != name)
        return op.emitOpError() << "in group " << name << " uses a value of group "
                                << from << ": groups are reordered independently";
    }
  }
  return success();
}

/// S0(0) S1(0) | for k in [1, n): O0(k-1) S0(k) O1(k-1) S1(k) | O0(n-1) O1(n-1).
/// While softmax0 works on S0(k), the tensor core runs O1(k-1) and S1(k);
/// while softmax1 works on S1(k), it runs O0(k) and S0(k+1).
/// A one-Q-tile stream steps over pairs of blocks (its groups 0 and 1 are
/// blocks 2k and 2k + 1), so the same order is S(0) S(1) | O(0) S(2) O(1)
/// S(3) ...: S(b + 1) follows O(b - 1), and the tensor core computes it
/// while the softmax works on S(b).
static void interleave(scf::ForOp stream) {
  OpBuilder b(stream);
  Location loc = stream.getLoc();
  Value n = stream.getUpperBound();
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, n, zero);

  auto prologue = scf::IfOp::create(b, loc, any, false);
  b.setInsertionPointToStart(prologue.thenBlock());
  emitGroup(b, stream, "score0", zero);
  emitGroup(b, stream, "score1", zero);

  b.setInsertionPointAfter(prologue);
  auto steady = scf::ForOp::create(b, loc, one, n, one);
  steady->setAttr("fa4.mma_interleaved", b.getUnitAttr());
  b.setInsertionPointToStart(steady.getBody());
  Value k = steady.getInductionVar();
  Value previous = arith::SubIOp::create(b, loc, k, one);
  emitGroup(b, stream, "value0", previous);
  emitGroup(b, stream, "score0", k);
  emitGroup(b, stream, "value1", previous);
  emitGroup(b, stream, "score1", k);

  b.setInsertionPointAfter(steady);
  auto epilogue = scf::IfOp::create(b, loc, any, false);
  b.setInsertionPointToStart(epilogue.thenBlock());
  Value last = arith::SubIOp::create(b, loc, n, one);
  emitGroup(b, stream, "value0", last);
  emitGroup(b, stream, "value1", last);
  stream.erase();
}

/// The forward's K/V ring: as many stages as fit (or `kvStages`), and the
/// loader's tail extended to each.
static LogicalResult sizeKvRing(func::FuncOp func, int64_t kvStages) {
  SmemAllocOp kvAlloc;
  func.walk([&](ScoreMmaAsyncOp mma) {
    kvAlloc = mma.getKey().getDefiningOp<SmemAllocOp>();
  });
  if (!kvAlloc) {
    func.emitError() << "fa4-pipeline-stages expects score MMAs reading a "
                        "K/V ring made by fa4.smem_alloc";
    return failure();
  }
  // Q's head dim from the score MMAs' query, V's from the value MMAs'
  // accumulator (K and V share the ring, which is as wide as the wider).
  SmemType kvType = kvAlloc.getBuffer().getType();
  int64_t headDim = kvType.getCols(), valueHeadDim = kvType.getCols();
  func.walk([&](ScoreMmaAsyncOp mma) {
    headDim = mma.getQuery().getType().getCols();
  });
  func.walk([&](ValueMmaAsyncOp mma) {
    valueHeadDim = mma.getAcc().getType().getCols();
  });
  // O's element from its staging buffer (FP8's O is 16-bit over 8-bit
  // inputs).
  // Q tiles a task from the Q ring's stages (one a tile).
  int64_t outBytes = 0, qTiles = 0;
  func.walk([&](SmemAllocOp alloc) {
    if (alloc.getName() == "o_stage")
      outBytes =
          alloc.getBuffer().getType().getElementType().getIntOrFloatBitWidth() /
          8;
    if (alloc.getName() == "q")
      qTiles = alloc.getBuffer().getType().getStages();
  });
  ScheduleConfig config = ScheduleConfig::get(
      headDim, kvType.getElementType().getIntOrFloatBitWidth() / 8,
      valueHeadDim, outBytes,
      std::clamp<int64_t>(qTiles, 1, ScheduleConfig::kQStages));
  config.ctaPair = kvAlloc.getPairHalf();
  int64_t stages = kvStages > 0 ? int64_t(kvStages) : config.kvStages();
  // Refused before the ring is built: the loader's tail grows by a stage
  // each, and a count past what fits would only be found after that.
  if (kvStages > 0 && stages > config.kvStages()) {
    InFlightDiagnostic diag = kvAlloc.emitError();
    diag << "kv-stages=" << stages << " does not fit in shared memory at head "
         << "dim " << headDim;
    // The Hopper schedule's words: V's head dim where it has its own.
    if (valueHeadDim != headDim)
      diag << " (V's " << valueHeadDim << ")";
    diag << " (at most " << config.kvStages() << ")";
    return failure();
  }
  if (stages < 2) {
    kvAlloc.emitError() << "the K/V ring needs at least 2 stages (a K and "
                           "a V in flight), got "
                        << stages;
    return failure();
  }
  kvAlloc.getBuffer().setType(SmemType::get(
      func.getContext(), kvType.getRows(), kvType.getCols(),
      kvType.getElementType(), stages));
  // The loader's tail acquires every stage of the ring once more.
  func.walk([&](ProducerAcquireOp tail) {
    if (!tail->hasAttr("fa4.producer_tail") ||
        tail.getBuffer() != kvAlloc.getBuffer())
      return;
    OpBuilder b(tail->getContext());
    b.setInsertionPointAfter(tail);
    for (int64_t s = 1; s < stages; ++s) {
      Value item = arith::AddIOp::create(
          b, tail.getLoc(), tail.getCount(),
          arith::ConstantIndexOp::create(b, tail.getLoc(), s));
      ProducerAcquireOp::create(b, tail.getLoc(), tail.getBuffer(), item);
    }
  });

  return success();
}

/// The shared memory the buffers take, against a CTA's; recorded on the
/// warp-specialize op as fa4.smem_bytes.
static LogicalResult checkSmemBudget(func::FuncOp func,
                                   WarpSpecializeOp specialize) {
  int64_t bytes = ScheduleConfig::kBarrierBytes;
  func.walk([&](SmemAllocOp alloc) {
    bytes += alloc.getCtaStageBytes() * alloc.getBuffer().getType().getStages();
  });
  if (bytes > blackwell::kSmemBytesPerCta) {
    InFlightDiagnostic diag = func.emitError()
                              << "shared memory overflow: the buffers need "
                              << bytes << " bytes, more than the "
                              << blackwell::kSmemBytesPerCta
                              << " a CTA may use (";
    bool first = true;
    func.walk([&](SmemAllocOp alloc) {
      SmemType type = alloc.getBuffer().getType();
      diag << (first ? "" : ", ") << alloc.getName() << ": "
           << type.getStages() << " x " << alloc.getCtaStageBytes();
      first = false;
    });
    diag << ", barriers: " << ScheduleConfig::kBarrierBytes << ")";
    return failure();
  }
  Builder builder(func.getContext());
  specialize->setAttr("fa4.smem_bytes", builder.getI64IntegerAttr(bytes));
  return success();
}

namespace {
struct PipelineStagesPass
    : public fa4::impl::FA4PipelineStagesBase<PipelineStagesPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (failed(checkModuleFamily(func, target::Family::Blackwell, getArgument())))
      return signalPassFailure();
    WarpSpecializeOp specialize;
    func.walk([&](WarpSpecializeOp op) { specialize = op; });
    if (!specialize)
      return;
    // The backward's rings are sized by its schedule (two Q/dO stages, one
    // K/V): only the budget is checked.
    if (!getBackwardSpec(func) && failed(sizeKvRing(func, kvStages)))
      return signalPassFailure();
    if (failed(checkSmemBudget(func, specialize)))
      return signalPassFailure();
    if (getBackwardSpec(func))
      return;
    SmallVector<scf::ForOp> streams;
    func.walk([&](scf::ForOp loop) {
      if (loop->hasAttr("fa4.mma_stream"))
        streams.push_back(loop);
    });
    for (scf::ForOp stream : streams)
      if (failed(checkStream(stream)))
        return signalPassFailure();
    for (scf::ForOp stream : streams)
      interleave(stream);
  }
};
} // namespace
