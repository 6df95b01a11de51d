//===- TileScheduler.cpp - the persistent task loop ------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4TILESCHEDULER
#include "fa4/Transforms/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {
struct TileSchedulerPass
    : public fa4::impl::FA4TileSchedulerBase<TileSchedulerPass> {
  using Base::Base;
  /// The option is checked once, whatever the input holds.
  LogicalResult initialize(MLIRContext *context) override {
    if (smCount >= 0 && smCount < (int64_t(1) << 31))
      return success();
    emitError(UnknownLoc::get(context))
        << "fa4-tile-scheduler: sm-count must be 0 (the module's chip's) or in "
           "[1, 2^31), got "
        << static_cast<int64_t>(smCount);
    return failure();
  }
  void runOnOperation() override {
    func::FuncOp func = getOperation();

    // The persistent grid: the option's SM count, else the chip's.
    int64_t sms = smCount > 0 ? int64_t(smCount)
                              : getTargetOrDefault(func).smCount;
    WarpSpecializeOp specialize;
    func.walk([&](WarpSpecializeOp op) { specialize = op; });
    if (!specialize)
      return;
    OpBuilder top(specialize);
    Location loc = specialize.getLoc();
    Value cta = CtaIdOp::create(top, loc, top.getIndexType());
    Value grid = GridSizeOp::create(top, loc, top.getIndexType(),
                                        top.getI64IntegerAttr(sms));

    TaskOrder order = TaskOrder::static_order;
    specialize.walk([&](scf::ForOp loop) {
      if (!loop->hasAttr("fa4.task_loop"))
        return;
      // Each CTA takes positions cta, cta + grid, ... of the order; every role
      // of the CTA walks the same positions, so their rings stay in step.
      loop.getLowerBoundMutable().assign(cta);
      loop.getStepMutable().assign(grid);
      for (auto coords : loop.getBody()->getOps<TaskCoordsOp>()) {
        // A varlen grid walks its slots in its own order (each sequence's
        // last tiles first).
        if (coords.getCuSeqlens())
          continue;
        // Masked tasks (causal, windowed, a mask_mod) differ in work:
        // heaviest first.
        order = coords.getMask() == MaskKind::none && coords.getMaskMod().empty()
                    ? TaskOrder::static_order
                    : TaskOrder::lpt;
        coords.setOrder(order);
      }
    });
    specialize->setAttr(kGridAttrName,
                        GridAttr::get(func.getContext(), sms, order));
  }
};
} // namespace
