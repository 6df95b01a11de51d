//===- MutateProtocol.cpp - break a level-C schedule on purpose -----------===//
//
// Each mutation is a plausible protocol bug applied to a finished schedule
// (after the pass that produced the part it breaks), so that the simulator's
// tests can show the report that names it. Test-only: the production passes
// know nothing of these.
//
//===----------------------------------------------------------------------===//

#include "TestPasses.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mlir::fa4;

namespace {

constexpr StringRef kMutations[] = {
    "drop-o-rescaled-gate",   "release-kv-early", "wrong-phase",
    "tma-barrier-as-threads", "p-aliases-next-s", "release-o-before-rescale",
    "release-v-before-wait",  "wait-leaves-s-running", "no-first-turn"};

/// The name of the mbarrier array `barrier` is.
StringRef barrierName(Value barrier) {
  auto alloc = barrier.getDefiningOp<MBarrierAllocOp>();
  return alloc ? alloc.getName() : StringRef();
}

bool inRole(Operation *op, StringRef name) {
  auto role = op->getParentOfType<RoleOp>();
  return role && role.getName() == name;
}

/// The value MMA's gate on O: the MMA warp no longer waits for correction to
/// hand O back before accumulating into it.
LogicalResult dropORescaledGate(func::FuncOp func) {
  SmallVector<MBarrierWaitOp> gates;
  func.walk([&](MBarrierWaitOp wait) {
    StringRef name = barrierName(wait.getBarrier());
    if (inRole(wait, "mma") && wait.getPrior() && name.starts_with("O") &&
        name.ends_with("_empty"))
      gates.push_back(wait);
  });
  for (MBarrierWaitOp wait : gates)
    wait.erase();
  return success(!gates.empty());
}

/// A K stage goes back to the loader after the first score MMA reading it,
/// not after the last.
LogicalResult releaseKvEarly(func::FuncOp func) {
  bool moved = false;
  func.walk([&](MmaCommitOp commit) {
    if (barrierName(commit.getBarrier()) != "kv_empty")
      return;
    Operation *previous = commit->getPrevNode();
    while (previous && !isa<ScoreMmaAsyncOp>(previous))
      previous = previous->getPrevNode();
    if (previous && llvm::is_contained(previous->getOperands(), commit.getCount())) {
      commit->moveBefore(previous);
      moved = true;
    }
  });
  return success(moved);
}

/// The first wait for S waits for the parity of the phase before.
LogicalResult wrongPhase(func::FuncOp func) {
  MBarrierWaitOp first;
  func.walk([&](MBarrierWaitOp wait) {
    StringRef name = barrierName(wait.getBarrier());
    if (!first && !wait.getPrior() && name.starts_with("S") &&
        name.ends_with("_full"))
      first = wait;
  });
  if (!first)
    return failure();
  OpBuilder b(first);
  int64_t stages = first.getBarrier().getType().getStages();
  Value count = arith::AddIOp::create(
      b, first.getLoc(), first.getCount(),
      arith::ConstantIndexOp::create(b, first.getLoc(), stages));
  first.getCountMutable().assign(count);
  return success();
}

/// TMA barriers count thread arrivals instead of transaction bytes.
LogicalResult tmaBarrierAsThreads(func::FuncOp func) {
  bool changed = false;
  func.walk([&](MBarrierAllocOp alloc) {
    MBarrierType type = alloc.getBarrier().getType();
    if (type.getKind() != BarrierKind::tma)
      return;
    alloc.getBarrier().setType(MBarrierType::get(
        func.getContext(), BarrierKind::threads, type.getStages()));
    changed = true;
  });
  // The schedule's barrier table says so too: the mutant is a protocol
  // error for fa4-sim to find, not IR that its verifier refuses.
  func.walk([&](WarpSpecializeOp specialize) {
    auto table = specialize->getAttrOfType<ArrayAttr>(kBarriersAttrName);
    if (!table)
      return;
    SmallVector<Attribute> entries;
    for (Attribute entry : table) {
      auto barrier = cast<BarrierInfoAttr>(entry);
      entries.push_back(
          barrier.getKind() != BarrierKind::tma
              ? entry
              : BarrierInfoAttr::get(func.getContext(), barrier.getName(),
                                     BarrierKind::threads, barrier.getCount(),
                                     barrier.getStages(),
                                     barrier.getProducers(),
                                     barrier.getConsumers()));
    }
    specialize->setAttr(kBarriersAttrName,
                        ArrayAttr::get(func.getContext(), entries));
  });
  return success(changed);
}

/// P0 is written over S1 and P1 over S0: a P lands on the other Q tile's S
/// before it is consumed.
LogicalResult pAliasesNextS(func::FuncOp func) {
  SmallVector<TmemViewOp> views;
  func.walk([&](TmemViewOp view) { views.push_back(view); });
  if (views.size() != 2 || views[0].getSource() == views[1].getSource())
    return failure();
  Value first = views[0].getSource();
  views[0].getSourceMutable().assign(views[1].getSource());
  views[1].getSourceMutable().assign(first);
  return success();
}

/// Correction hands O back to the value MMA before rescaling it.
LogicalResult releaseOBeforeRescale(func::FuncOp func) {
  SmallVector<std::pair<MBarrierArriveOp, Operation *>> moves;
  func.walk([&](MBarrierArriveOp arrive) {
    StringRef name = barrierName(arrive.getBarrier());
    if (!inRole(arrive, "correction") || !name.starts_with("O") ||
        !name.ends_with("_empty"))
      return;
    // The rescale: `needs_rescale` and the `scf.if` it guards, right before.
    auto rescale = dyn_cast_or_null<scf::IfOp>(arrive->getPrevNode());
    Operation *needed = rescale ? rescale->getPrevNode() : nullptr;
    if (needed && isa<NeedsRescaleOp>(needed) &&
        rescale.getCondition() == needed->getResult(0))
      moves.push_back({arrive, needed});
  });
  for (auto [arrive, rescale] : moves)
    arrive->moveBefore(rescale);
  return success(!moves.empty());
}

/// Hopper: a consumer hands V back before the wait for the async value MMA
/// that reads it. (K released before its score MMA's wait would not race:
/// the producer takes V of the same block first, which comes back later.)
LogicalResult releaseVBeforeWait(func::FuncOp func) {
  SmallVector<std::pair<MBarrierArriveOp, WarpgroupWaitOp>> moves;
  func.walk([&](MBarrierArriveOp arrive) {
    if (barrierName(arrive.getBarrier()) != "v_empty")
      return;
    auto wait = dyn_cast_or_null<WarpgroupWaitOp>(arrive->getPrevNode());
    if (wait)
      moves.push_back({arrive, wait});
  });
  for (auto [arrive, wait] : moves)
    arrive->moveBefore(wait);
  return success(!moves.empty());
}

/// Hopper: the wait for S lets two groups stay pending, S's among them.
LogicalResult waitLeavesSRunning(func::FuncOp func) {
  bool changed = false;
  func.walk([&](WarpgroupWaitOp wait) {
    if (wait.getPendingValue().getDefiningOp<WarpgroupScoreMmaOp>()) {
      wait.setPending(2);
      changed = true;
    }
  });
  return success(changed);
}

/// Hopper's ping-pong: consumer1 never hands consumer0 its first turn.
LogicalResult noFirstTurn(func::FuncOp func) {
  SmallVector<NamedBarrierArriveOp> first;
  func.walk([&](NamedBarrierArriveOp arrive) {
    if (isa<RoleOp>(arrive->getParentOp()))
      first.push_back(arrive);
  });
  for (NamedBarrierArriveOp arrive : first)
    arrive.erase();
  return success(!first.empty());
}

struct MutateProtocolPass
    : public PassWrapper<MutateProtocolPass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MutateProtocolPass)

  MutateProtocolPass() = default;
  MutateProtocolPass(const MutateProtocolPass &other) : PassWrapper(other) {}

  StringRef getArgument() const final { return "fa4-test-mutate-protocol"; }
  StringRef getDescription() const final {
    return "Test only: break a level-C schedule's protocol in a named way, "
           "to check that fa4-sim catches it";
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (getBackwardSpec(func)) {
      // Nothing here breaks a backward: refused, not ignored.
      func.emitError() << "protocol mutation '" << mutation.getValue()
                       << "' breaks the forward's schedule; the backward's "
                          "are broken by test/Sim/Inputs/drop-wait.py (level "
                          "C) and test/Emu/Inputs/mutate-ptx.py (level D)";
      return signalPassFailure();
    }
    if (!getKernelSpec(func))
      return;
    StringRef name = mutation;
    LogicalResult applied = failure();
    if (name == "drop-o-rescaled-gate")
      applied = dropORescaledGate(func);
    else if (name == "release-kv-early")
      applied = releaseKvEarly(func);
    else if (name == "wrong-phase")
      applied = wrongPhase(func);
    else if (name == "tma-barrier-as-threads")
      applied = tmaBarrierAsThreads(func);
    else if (name == "p-aliases-next-s")
      applied = pAliasesNextS(func);
    else if (name == "release-o-before-rescale")
      applied = releaseOBeforeRescale(func);
    else if (name == "release-v-before-wait")
      applied = releaseVBeforeWait(func);
    else if (name == "wait-leaves-s-running")
      applied = waitLeavesSRunning(func);
    else if (name == "no-first-turn")
      applied = noFirstTurn(func);
    else {
      func.emitError() << "unknown protocol mutation '" << name
                       << "' (expected one of: "
                       << llvm::join(ArrayRef<StringRef>(kMutations), ", ")
                       << ")";
      return signalPassFailure();
    }
    if (failed(applied)) {
      func.emitError() << "protocol mutation '" << name
                       << "' found nothing to break: it applies to a level-C "
                          "schedule past the pass that builds its target";
      return signalPassFailure();
    }
  }

  Option<std::string> mutation{*this, "mutation",
                               llvm::cl::desc("The breakage to apply")};
};

} // namespace

ArrayRef<StringRef> mlir::fa4::test::protocolMutations() { return kMutations; }

std::unique_ptr<Pass>
mlir::fa4::test::createMutateProtocolPass(const std::string &mutation) {
  auto pass = std::make_unique<MutateProtocolPass>();
  pass->mutation = mutation;
  return pass;
}

void mlir::fa4::test::registerTestPasses() {
  PassRegistration<MutateProtocolPass>();
}
