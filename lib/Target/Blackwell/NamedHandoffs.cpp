//===- NamedHandoffs.cpp - lock-step hand-offs at named barriers ----------===//
//
// See the pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Blackwell/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4NAMEDHANDOFFS
#include "fa4/Target/Blackwell/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {

struct NamedHandoffsPass
    : public fa4::impl::FA4NamedHandoffsBase<NamedHandoffsPass> {
  using Base::Base;
  void runOnOperation() override;
};

/// The one role that holds every op of `ops`, or null.
RoleOp soleRole(ArrayRef<Operation *> ops) {
  RoleOp role;
  for (Operation *op : ops) {
    auto mine = op->getParentOfType<RoleOp>();
    if (!mine || (role && mine != role))
      return RoleOp();
    role = mine;
  }
  return role;
}

/// Whether `arrive` is preceded, in its block and with no arrive or region
/// between, by a wait on `barrier` (with `prior`, or not) for its item.
bool waitedFirst(Operation *arrive, Value barrier, bool prior) {
  Value count = cast<MBarrierArriveOp>(arrive).getCount();
  for (Operation *op = arrive->getPrevNode(); op; op = op->getPrevNode()) {
    auto wait = dyn_cast<MBarrierWaitOp>(op);
    if (wait && wait.getBarrier() == barrier && wait.getPrior() == prior &&
        wait.getCount() == count)
      return true;
    if (isa<MBarrierArriveOp>(op) || op->getNumRegions())
      return false;
  }
  return false;
}

/// Whether the one-stage ring of `full` and `empty` runs in lock step: each
/// arrive of its producer on `full` follows its wait on `empty` for the same
/// item, and each release of its consumer on `empty` follows its wait on
/// `full` for that item. The producer then cannot arrive for item n + 1
/// before the consumer has waited for item n, so arrivals and waits
/// alternate — all a named barrier (a count, no phases) can tell apart.
bool lockStep(ArrayRef<Operation *> arrives, MBarrierAllocOp full,
              MBarrierAllocOp empty) {
  for (Operation *arrive : arrives)
    if (!waitedFirst(arrive, empty.getBarrier(), /*prior=*/true))
      return false;
  for (Operation *user : empty.getBarrier().getUsers())
    if (isa<MBarrierArriveOp>(user) &&
        !waitedFirst(user, full.getBarrier(), /*prior=*/false))
      return false;
  return true;
}

} // namespace

void NamedHandoffsPass::runOnOperation() {
  func::FuncOp func = getOperation();
  WarpSpecializeOp specialize;
  func.walk([&](WarpSpecializeOp op) { specialize = op; });
  if (!specialize)
    return;

  // Ids the kernel already uses (0 is the CTA-wide barrier).
  llvm::SmallBitVector used(16);
  used.set(0);
  func.walk([&](Operation *op) {
    if (auto sync = dyn_cast<NamedBarrierSyncOp>(op))
      used.set(sync.getId());
    if (auto arrive = dyn_cast<NamedBarrierArriveOp>(op))
      used.set(arrive.getId());
  });

  llvm::StringMap<MBarrierAllocOp> byName;
  SmallVector<MBarrierAllocOp> allocs;
  func.walk([&](MBarrierAllocOp alloc) {
    byName[alloc.getName()] = alloc;
    allocs.push_back(alloc);
  });

  llvm::StringSet<> replaced;
  for (MBarrierAllocOp full : allocs) {
    MBarrierType type = full.getBarrier().getType();
    StringRef name = full.getName();
    if (type.getKind() != BarrierKind::threads || type.getStages() != 1 ||
        !name.ends_with("_full"))
      continue;
    MBarrierAllocOp empty = byName.lookup(
        (name.drop_back(strlen("_full")) + "_empty").str());
    if (!empty)
      continue;
    SmallVector<Operation *> arrives, waits;
    bool other = false;
    for (Operation *user : full.getBarrier().getUsers()) {
      if (isa<MBarrierArriveOp>(user))
        arrives.push_back(user);
      else if (auto wait = dyn_cast<MBarrierWaitOp>(user); wait && !wait.getPrior())
        waits.push_back(user);
      else
        other = true;
    }
    RoleOp producer = soleRole(arrives), consumer = soleRole(waits);
    if (other || !producer || !consumer || producer == consumer ||
        int64_t(full.getCount()) != producer.getNumThreads() ||
        !lockStep(arrives, full, empty))
      continue;
    int id = used.find_first_unset();
    if (id < 0)
      break;
    used.set(id);
    int64_t threads = producer.getNumThreads() + consumer.getNumThreads();
    for (Operation *arrive : arrives) {
      OpBuilder b(arrive);
      NamedBarrierArriveOp::create(b, arrive->getLoc(), id, threads);
      arrive->erase();
    }
    for (Operation *wait : waits) {
      OpBuilder b(wait);
      NamedBarrierSyncOp::create(b, wait->getLoc(), id, threads);
      wait->erase();
    }
    replaced.insert(name);
    full.erase();
  }
  if (replaced.empty())
    return;
  // The barrier table lists the kernel's mbarriers.
  if (auto table = specialize->getAttrOfType<ArrayAttr>(kBarriersAttrName)) {
    SmallVector<Attribute> kept;
    for (Attribute entry : table)
      if (auto info = dyn_cast<BarrierInfoAttr>(entry);
          !info || !replaced.contains(info.getName()))
        kept.push_back(entry);
    specialize->setAttr(kBarriersAttrName,
                        ArrayAttr::get(func.getContext(), kept));
  }
}
