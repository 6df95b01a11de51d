//===- InsertBarriers.cpp - ring hand-offs to mbarriers --------------------===//
//
// See the pass description in Passes.td. The kind of each barrier follows
// from who completes it; choosing it anywhere else is how a TMA transfer ends
// up waited on by a thread-arrival barrier.
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4INSERTBARRIERS
#include "fa4/Transforms/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {

/// The hand-offs of one buffer and the barriers they become.
struct Ring {
  SmallVector<Operation *> handoffs;
  llvm::SetVector<RoleOp> producers, consumers;
  Value full, empty;
};

/// A role that issues tensor-core ops completes its hand-offs by commit.
bool issuesTensorCoreOps(RoleOp role) {
  bool found = false;
  role.walk([&](Operation *op) {
    if (isa<ScoreMmaAsyncOp, ValueMmaAsyncOp, TransposedMmaAsyncOp>(op))
      found = true;
  });
  return found;
}

StringRef bufferName(Value buffer) {
  Operation *def = buffer.getDefiningOp();
  if (auto smem = dyn_cast_or_null<SmemAllocOp>(def))
    return smem.getName();
  if (auto tmem = dyn_cast_or_null<TmemAllocOp>(def))
    return tmem.getName();
  if (auto view = dyn_cast_or_null<TmemViewOp>(def))
    return view.getName();
  return "buffer";
}

int64_t stagesOf(Value buffer) {
  if (auto smem = dyn_cast<SmemType>(buffer.getType()))
    return smem.getStages();
  return 1;
}

/// The TMA loads into `buffer` that a producer commit closes: those since the
/// previous hand-off in the same block.
SmallVector<TmaLoadOp> loadsBefore(ProducerCommitOp commit) {
  SmallVector<TmaLoadOp> loads;
  for (Operation *op = commit->getPrevNode(); op; op = op->getPrevNode()) {
    if (isa<ProducerAcquireOp, ProducerCommitOp>(op))
      break;
    if (auto load = dyn_cast<TmaLoadOp>(op);
        load && load.getBuffer() == commit.getBuffer())
      loads.push_back(load);
  }
  return loads;
}

struct InsertBarriersPass
    : public fa4::impl::FA4InsertBarriersBase<InsertBarriersPass> {
  using Base::Base;

  void runOnOperation() override;
};

} // namespace

void InsertBarriersPass::runOnOperation() {
  func::FuncOp func = getOperation();
  WarpSpecializeOp specialize;
  func.walk([&](WarpSpecializeOp op) { specialize = op; });
  if (!specialize)
    return;

  llvm::MapVector<Value, Ring> rings;
  // Found before any rewriting, while hand-offs still delimit them.
  DenseMap<Operation *, SmallVector<TmaLoadOp>> commitLoads;
  bool misplaced = false;
  func.walk([&](Operation *op) {
    if (!isa<ProducerAcquireOp, ProducerCommitOp, ConsumerWaitOp,
             ConsumerReleaseOp>(op))
      return;
    auto role = op->getParentOfType<RoleOp>();
    if (!role) {
      op->emitOpError() << "hands off between roles, so it must be inside an "
                           "fa4.role";
      misplaced = true;
      return;
    }
    Ring &ring = rings[op->getOperand(0)];
    ring.handoffs.push_back(op);
    if (auto commit = dyn_cast<ProducerCommitOp>(op))
      commitLoads[op] = loadsBefore(commit);
    if (isa<ProducerAcquireOp, ProducerCommitOp>(op))
      ring.producers.insert(role);
    else
      ring.consumers.insert(role);
  });
  if (misplaced)
    return signalPassFailure();

  MLIRContext *context = func.getContext();
  OpBuilder allocs(specialize);
  SmallVector<Attribute> table;
  auto roleNames = [&](const llvm::SetVector<RoleOp> &roles) {
    SmallVector<StringAttr> names;
    for (RoleOp role : roles)
      names.push_back(role.getNameAttr());
    return names;
  };
  auto makeBarrier = [&](StringRef name, BarrierKind kind, int64_t count,
                         int64_t stages, const llvm::SetVector<RoleOp> &from,
                         const llvm::SetVector<RoleOp> &to) -> Value {
    table.push_back(BarrierInfoAttr::get(context, name, kind, count, stages,
                                         roleNames(from), roleNames(to)));
    return MBarrierAllocOp::create(allocs,
        func.getLoc(), MBarrierType::get(context, kind, stages),
        allocs.getStringAttr(name), count);
  };

  for (auto &[buffer, ring] : rings) {
    int64_t stages = stagesOf(buffer);
    StringRef name = bufferName(buffer);
    bool hasFull = false, hasEmpty = false, loadedByTma = false;
    for (Operation *op : ring.handoffs) {
      hasFull |= isa<ProducerCommitOp, ConsumerWaitOp>(op);
      hasEmpty |= isa<ProducerAcquireOp, ConsumerReleaseOp>(op);
      if (isa<ProducerCommitOp>(op))
        loadedByTma |= !commitLoads[op].empty();
    }
    if (ring.producers.size() != 1) {
      func.emitError() << "buffer '" << name << "' has "
                       << ring.producers.size()
                       << " producer roles; a ring has exactly one";
      return signalPassFailure();
    }
    if (ring.consumers.empty()) {
      func.emitError() << "buffer '" << name
                       << "' has no consumer role; a ring needs one to wait "
                          "on what its producer hands off";
      return signalPassFailure();
    }
    RoleOp producer = ring.producers.front();
    if (hasFull) {
      BarrierKind kind = loadedByTma ? BarrierKind::tma
                         : issuesTensorCoreOps(producer) ? BarrierKind::tcgen05
                                                         : BarrierKind::threads;
      int64_t count = kind == BarrierKind::threads ? producer.getNumThreads() : 1;
      ring.full = makeBarrier((name + "_full").str(), kind, count, stages,
                              ring.producers, ring.consumers);
    }
    if (hasEmpty) {
      bool byTensorCore = llvm::any_of(ring.consumers, issuesTensorCoreOps);
      int64_t count = 0;
      for (RoleOp consumer : ring.consumers)
        count += byTensorCore ? 1 : consumer.getNumThreads();
      ring.empty = makeBarrier(
          (name + "_empty").str(),
          byTensorCore ? BarrierKind::tcgen05 : BarrierKind::threads,
          std::max<int64_t>(count, 1), stages, ring.consumers, ring.producers);
    }
  }
  specialize->setAttr(kBarriersAttrName, ArrayAttr::get(context, table));

  for (auto &[buffer, ring] : rings) {
    for (Operation *op : ring.handoffs) {
      OpBuilder b(op);
      Location loc = op->getLoc();
      Value count = op->getOperand(1);
      auto role = op->getParentOfType<RoleOp>();
      if (isa<ConsumerWaitOp>(op)) {
        MBarrierWaitOp::create(b, loc, ring.full, count, false);
      } else if (isa<ProducerAcquireOp>(op)) {
        MBarrierWaitOp::create(b, loc, ring.empty, count, true);
      } else if (isa<ProducerCommitOp>(op)) {
        ArrayRef<TmaLoadOp> loads = commitLoads[op];
        if (!loads.empty()) {
          // One elected thread announces every byte the loads will deliver.
          int64_t bytes = 0;
          for (TmaLoadOp load : loads) {
            bytes += load.getTileType().getStageBytes();
            load.getBarrierMutable().assign(ring.full);
            load.getBarrierCountMutable().assign(count);
          }
          OpBuilder before(loads.back());
          MBarrierExpectTxOp::create(before, loc, ring.full, count, bytes);
        } else if (issuesTensorCoreOps(role)) {
          MmaCommitOp::create(b, loc, ring.full, count);
        } else {
          MBarrierArriveOp::create(b, loc, ring.full, count);
        }
      } else {
        if (issuesTensorCoreOps(role)) {
          MmaCommitOp::create(b, loc, ring.empty, count);
        } else {
          MBarrierArriveOp::create(b, loc, ring.empty, count);
        }
      }
      op->erase();
    }
  }
}
