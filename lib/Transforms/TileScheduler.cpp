//===- TileScheduler.cpp - the persistent task loop ------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4TILESCHEDULER
#include "fa4/Transforms/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

/// A task loop over positions ordered heaviest first, dealt out in a
/// snake: round k of the grid (positions k·grid to (k+1)·grid) goes to the
/// CTAs in order when k is even and in reverse when odd, so that the CTA
/// with the heaviest task of one round has the lightest of the next. The
/// last round, if partial, is dealt in order (mirrored, it would name
/// positions past the end and skip others). Every role's loop gets the
/// same mapping, so their rings stay in step.
static void dealInSnake(scf::ForOp loop, Value cta, Value grid) {
  OpBuilder b = OpBuilder::atBlockBegin(loop.getBody());
  Location loc = loop.getLoc();
  Value position = loop.getInductionVar();
  auto c = [&](int64_t value) -> Value {
    return arith::ConstantIndexOp::create(b, loc, value);
  };
  Value round = arith::DivUIOp::create(
      b, loc, arith::SubIOp::create(b, loc, position, cta), grid);
  Value roundStart = arith::MulIOp::create(b, loc, round, grid);
  Value full = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ule,
      arith::AddIOp::create(b, loc, roundStart, grid), loop.getUpperBound());
  Value odd = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ne,
      arith::RemUIOp::create(b, loc, round, c(2)), c(0));
  Value mirrored = arith::AddIOp::create(
      b, loc, roundStart,
      arith::SubIOp::create(b, loc, arith::SubIOp::create(b, loc, grid, c(1)),
                            cta));
  Value dealt = arith::SelectOp::create(
      b, loc, arith::AndIOp::create(b, loc, odd, full), mirrored, position);
  position.replaceAllUsesExcept(
      dealt, SmallPtrSet<Operation *, 2>{round.getDefiningOp()->getOperand(0)
                                             .getDefiningOp(),
                                         dealt.getDefiningOp()});
}

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
      if (auto taskOrder =
              loop->getAttrOfType<TaskOrderAttr>(kTaskOrderAttrName);
          taskOrder && taskOrder.getValue() == TaskOrder::lpt) {
        dealInSnake(loop, cta, grid);
        order = TaskOrder::lpt;
      }
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
      // Heaviest first, dealt in a snake: round robin over an lpt order
      // left the busiest CTA 3-12 % over the mean at causal 4k-16k (16
      // heads; 8 at GQA 32/8), the snake under 1-3 %.
      if (order == TaskOrder::lpt &&
          !loop->hasAttr(kTaskOrderAttrName) &&
          !loop.getBody()->getOps<TaskCoordsOp>().empty() &&
          !(*loop.getBody()->getOps<TaskCoordsOp>().begin()).getCuSeqlens())
        dealInSnake(loop, cta, grid);
    });
    specialize->setAttr(kGridAttrName,
                        GridAttr::get(func.getContext(), sms, order));
  }
};
} // namespace
