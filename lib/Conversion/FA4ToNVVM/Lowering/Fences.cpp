//===- Fences.cpp - tcgen05 fences where a path needs them ----------------===//
//
// lowerBarrier puts `tcgen05.fence::after_thread_sync` after every mbarrier
// wait and `::before_thread_sync` before every arrive of a role that touches
// tensor memory. The PTX ISA asks for less: an after fence between a thread
// synchronization and the tensor-core operations (tcgen05.ld/st/mma/cp/
// commit/dealloc) it orders after it, a before fence between such operations
// and the synchronization that orders them before another thread's. Where a
// path between the two holds none, the fence is an issue slot for nothing
// (ptxas emits each as a NOP): the correction warps' steady state, which
// meets the softmax for the statistics, reads them from shared memory, and
// arrives twice without touching tensor memory unless it rescales O, paid
// six a KV tile.
//
// placeTensorFences moves them along the paths of a lowered role (structured
// control flow, before its conversion to branches): an after fence goes down
// to the first tensor-core operation after the wait on each path (into the
// rescale branch, say), a before fence is dropped where no tensor-core
// operation came since the last one, and a branch that leaves tensor-core
// work unfenced where its sibling does not ends in its own before fence, so
// that the join is clean when an arrive comes next. A loop whose body would
// otherwise fence in each trip what a pending fence before it covers once
// gets that fence before it; an issuing role's elected-thread branches on
// one condition share one fence. Only the fences lowerBarrier marked
// (kMovableFence) move; every other fence stays and counts as one.
//
// fa4-emu checks the result: its tcgen05 ordering check reports a tensor
// memory access of another warp that a missing fence leaves unordered.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace {

/// Where a thread stands on one path: a wait whose after fence is still to
/// come (unless one of `consumedIf` holds: the branches on it that did
/// tensor-core work fenced it), tensor-core work that no before fence has
/// covered yet. An issuing role's tensor-core work is all under its elected
/// thread's branches, one condition: the first fences what a wait left
/// pending and those after it need none.
struct FenceState {
  bool afterPending = false;
  bool unfencedWork = false;
  SmallVector<Value, 2> consumedIf;

  /// The state where paths from either meet.
  FenceState join(const FenceState &other) const {
    FenceState joined;
    joined.unfencedWork = unfencedWork || other.unfencedWork;
    if (!afterPending || !other.afterPending) {
      joined.afterPending = afterPending || other.afterPending;
      joined.consumedIf = afterPending
                              ? consumedIf
                              : (other.afterPending ? other.consumedIf
                                                    : SmallVector<Value, 2>());
      return joined;
    }
    joined.afterPending = true;
    for (Value condition : consumedIf)
      if (llvm::is_contained(other.consumedIf, condition))
        joined.consumedIf.push_back(condition);
    return joined;
  }
  bool operator==(const FenceState &other) const {
    return afterPending == other.afterPending &&
           unfencedWork == other.unfencedWork && consumedIf == other.consumedIf;
  }
};

bool isMovable(Operation *op, NVVM::Tcgen05FenceKind kind) {
  auto fence = dyn_cast<NVVM::Tcgen05FenceOp>(op);
  return fence && fence.getKind() == kind &&
         op->hasAttr(mlir::fa4::nvvm::kMovableFence);
}

/// A tcgen05 operation other than a fence, as an NVVM op or inside inline
/// assembly (the pair's multicast commit). `tcgen05.wait::ld/st` and
/// `tcgen05.commit` are ones (a before fence comes after them: a store is
/// handed on once waited for) but need no after fence: they wait for, or
/// track, the thread's own earlier operations and touch no tensor memory
/// (emu-mutants.py proves such a fence harmless).
bool isTensorCoreWork(Operation *op, bool orderedByAfterFence = false) {
  auto counts = [&](StringRef mnemonic) {
    return !mnemonic.starts_with("fence") &&
           !(orderedByAfterFence &&
             (mnemonic.starts_with("wait") || mnemonic.starts_with("commit")));
  };
  StringRef name = op->getName().getStringRef();
  if (name.consume_front("nvvm.tcgen05."))
    return counts(name);
  if (auto assembly = dyn_cast<LLVM::InlineAsmOp>(op)) {
    StringRef text = assembly.getAsmString();
    for (size_t at = text.find("tcgen05."); at != StringRef::npos;
         at = text.find("tcgen05.", at + 1))
      if (counts(text.substr(at + strlen("tcgen05."))))
        return true;
  }
  return false;
}

bool holdsTensorCoreWork(Operation *op) {
  return op
      ->walk([](Operation *inner) {
        return isTensorCoreWork(inner) ? WalkResult::interrupt()
                                       : WalkResult::advance();
      })
      .wasInterrupted();
}

void createFence(OpBuilder &b, Location loc, NVVM::Tcgen05FenceKind kind) {
  NVVM::Tcgen05FenceOp::create(b, loc, kind);
}

/// Whether, after `op` in its block, a marked before fence (an arrive)
/// comes before any tensor-core work.
bool arriveComesNext(Operation *op) {
  for (Operation *next = op->getNextNode(); next; next = next->getNextNode()) {
    if (isMovable(next, NVVM::Tcgen05FenceKind::BEFORE_THREAD_SYNC))
      return true;
    if (isa<NVVM::Tcgen05FenceOp>(next) || isTensorCoreWork(next) ||
        (next->getNumRegions() && holdsTensorCoreWork(next)))
      return false;
    if (next->getNumRegions() &&
        next->walk([](NVVM::Tcgen05FenceOp) { return WalkResult::interrupt(); })
            .wasInterrupted())
      return false;
  }
  return false;
}

/// One pass over a role: with `apply` the fences move, else the role is
/// only read (for a loop's fixed point, and to count the after fences a
/// loop's body would take).
struct Placer {
  bool apply;
  /// After fences this pass put before tensor-core work.
  int afterFencesAdded = 0;

  /// The state after `block` from `state`.
  FenceState place(Block &block, FenceState state) {
    for (Operation &op : llvm::make_early_inc_range(block))
      state = placeOp(&op, state);
    return state;
  }

  /// The state at the entry of `op`'s regions when `state` reaches `op`:
  /// they may run any number of times, in any order.
  static FenceState regionsEntry(Operation *op, FenceState state) {
    // A condition the regions define is a new value each trip: what it
    // said about the last trip says nothing about this one.
    auto definedOutside = [&](FenceState joined) {
      llvm::erase_if(joined.consumedIf, [&](Value condition) {
        return op->isAncestor(condition.getParentBlock()->getParentOp());
      });
      return joined;
    };
    FenceState entry = state;
    for (;;) {
      FenceState next = entry;
      for (Region &region : op->getRegions())
        for (Block &block : region)
          next = next.join(Placer{false}.place(block, entry));
      next = definedOutside(next);
      if (next == entry)
        return entry;
      entry = next;
    }
  }

  /// After fences `op`'s regions take from `state` on.
  static int afterFencesIn(Operation *op, FenceState state) {
    Placer count{false};
    FenceState entry = regionsEntry(op, state);
    for (Region &region : op->getRegions())
      for (Block &block : region)
        count.place(block, entry);
    return count.afterFencesAdded;
  }

  FenceState placeOp(Operation *op, FenceState state) {
    OpBuilder b(op);
    if (isMovable(op, NVVM::Tcgen05FenceKind::AFTER_THREAD_SYNC)) {
      if (apply)
        op->erase();
      state.afterPending = true;
      state.consumedIf.clear();
      return state;
    }
    if (isMovable(op, NVVM::Tcgen05FenceKind::BEFORE_THREAD_SYNC)) {
      if (!state.unfencedWork) {
        if (apply)
          op->erase();
      } else if (apply) {
        op->removeAttr(mlir::fa4::nvvm::kMovableFence);
      }
      state.unfencedWork = false;
      return state;
    }
    if (auto fence = dyn_cast<NVVM::Tcgen05FenceOp>(op)) {
      if (fence.getKind() == NVVM::Tcgen05FenceKind::AFTER_THREAD_SYNC) {
        state.afterPending = false;
        state.consumedIf.clear();
      } else {
        state.unfencedWork = false;
      }
      return state;
    }
    if (op->getNumRegions() == 0) {
      if (isTensorCoreWork(op, /*orderedByAfterFence=*/true) &&
          state.afterPending) {
        if (apply)
          createFence(b, op->getLoc(),
                      NVVM::Tcgen05FenceKind::AFTER_THREAD_SYNC);
        ++afterFencesAdded;
        state.afterPending = false;
        state.consumedIf.clear();
      }
      if (isTensorCoreWork(op))
        state.unfencedWork = true;
      return state;
    }
    if (auto branch = dyn_cast<scf::IfOp>(op)) {
      Value condition = branch.getCondition();
      FenceState thenEntry = state;
      if (thenEntry.afterPending &&
          llvm::is_contained(thenEntry.consumedIf, condition)) {
        thenEntry.afterPending = false;
        thenEntry.consumedIf.clear();
      }
      FenceState thenState = place(branch.getThenRegion().front(), thenEntry);
      bool hasElse = !branch.getElseRegion().empty();
      FenceState elseState =
          hasElse ? place(branch.getElseRegion().front(), state) : state;
      // Work left unfenced on one side only, and the next thing after the
      // branch is an arrive that would fence it: that side fences it before
      // the join, which the other side (the common path, as often as not:
      // the correction's rescale) then crosses with nothing to fence.
      // (Not where the unfenced side is a missing else: the work came
      // before the branch, and the arrive after it fences it.)
      if (thenState.unfencedWork != elseState.unfencedWork &&
          (thenState.unfencedWork || hasElse) && arriveComesNext(op)) {
        if (apply) {
          Region &dirty = thenState.unfencedWork ? branch.getThenRegion()
                                                 : branch.getElseRegion();
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(dirty.front().getTerminator());
          createFence(b, op->getLoc(),
                      NVVM::Tcgen05FenceKind::BEFORE_THREAD_SYNC);
        }
        thenState.unfencedWork = elseState.unfencedWork = false;
      }
      FenceState joined = thenState.join(elseState);
      if (joined.afterPending && !thenState.afterPending &&
          !llvm::is_contained(joined.consumedIf, condition))
        joined.consumedIf.push_back(condition);
      return joined;
    }
    // A loop or any other op with regions. A pending after fence goes before
    // it when its body would otherwise fence in each trip what the fence
    // there fences once (not when the body waits again before its work).
    if (state.afterPending) {
      FenceState settled = state;
      settled.afterPending = false;
      settled.consumedIf.clear();
      if (afterFencesIn(op, state) > afterFencesIn(op, settled)) {
        if (apply)
          createFence(b, op->getLoc(),
                      NVVM::Tcgen05FenceKind::AFTER_THREAD_SYNC);
        ++afterFencesAdded;
        state = settled;
      }
    }
    FenceState entry = regionsEntry(op, state);
    if (apply)
      for (Region &region : op->getRegions())
        for (Block &block : region)
          place(block, entry);
    return entry;
  }
};

} // namespace

void mlir::fa4::nvvm::placeTensorFences(Block &roleBlock) {
  Placer{true}.place(roleBlock, FenceState());
}
