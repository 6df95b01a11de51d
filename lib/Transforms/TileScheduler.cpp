//===- TileScheduler.cpp - the persistent task loop ------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Support/TileScheduler.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

#include <algorithm>

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
/// same mapping, so their rings stay in step. The round's parity is carried
/// by the loop (no division); the mirrored position of t = cta + k·grid is
/// k·grid + grid - 1 - cta = t + (grid - 1 - 2·cta). Returns the loop,
/// rebuilt with the parity as its last iter_arg.
static scf::ForOp dealInSnake(scf::ForOp loop, Value cta, Value grid) {
  Location loc = loop.getLoc();
  IRRewriter rewriter(loop.getContext());
  rewriter.setInsertionPoint(loop);
  auto c = [&](OpBuilder &b, int64_t value) -> Value {
    return arith::ConstantIndexOp::create(b, loc, value);
  };
  // Loop invariants: t + ahead is the end of t's round, t + back its
  // mirror (back = grid - 1 - 2·cta wraps below zero for the upper half of
  // the grid; index arithmetic is modular and the sum is in range).
  Value ahead = arith::SubIOp::create(rewriter, loc, grid, cta);
  Value back = arith::SubIOp::create(
      rewriter, loc, arith::SubIOp::create(rewriter, loc, ahead, c(rewriter, 1)),
      cta);
  SmallVector<NamedAttribute> attrs(loop->getDiscardableAttrs());
  FailureOr<LoopLikeOpInterface> rebuilt = loop.replaceWithAdditionalYields(
      rewriter, ValueRange{c(rewriter, 0)},
      /*replaceInitOperandUsesInLoop=*/false,
      [&](OpBuilder &b, Location, ArrayRef<BlockArgument> parity) {
        return SmallVector<Value>{
            arith::SubIOp::create(b, loc, c(b, 1), parity.front())};
      });
  auto snake = cast<scf::ForOp>(rebuilt->getOperation());
  for (const NamedAttribute &attr : attrs)
    snake->setAttr(attr.getName(), attr.getValue());
  OpBuilder b = OpBuilder::atBlockBegin(snake.getBody());
  Value position = snake.getInductionVar();
  Value parity = snake.getRegionIterArgs().back();
  Value roundEnd = arith::AddIOp::create(b, loc, position, ahead);
  Value whole = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule,
                                      roundEnd, snake.getUpperBound());
  Value odd = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, parity,
                                    c(b, 0));
  Value mirrored = arith::AddIOp::create(b, loc, position, back);
  Value dealt = arith::SelectOp::create(
      b, loc, arith::AndIOp::create(b, loc, odd, whole), mirrored, position);
  position.replaceUsesWithIf(dealt, [&](OpOperand &use) {
    Operation *user = use.getOwner();
    return user != dealt.getDefiningOp() && user != roundEnd.getDefiningOp() &&
           user != mirrored.getDefiningOp();
  });
  return snake;
}

/// One key's K and V bytes (K's and V's head dims may differ), from the
/// kernel's fa4.spec; 0 where the function has none or a dynamic head dim.
static int64_t kvBytesPerKey(func::FuncOp func) {
  KernelSpecAttr spec = getKernelSpec(func);
  if (!spec)
    return 0;
  int64_t bits = 0;
  for (int64_t tensor : {1, 2}) { // K and V (fa4.spec: Q, K, V, O, ...)
    ArrayRef<int64_t> positions = spec.getArguments();
    if (static_cast<int64_t>(positions.size()) <= tensor ||
        positions[tensor] < 0 ||
        positions[tensor] >= static_cast<int64_t>(func.getNumArguments()))
      return 0;
    auto type =
        dyn_cast<MemRefType>(func.getArgument(positions[tensor]).getType());
    if (!type || type.getRank() != 4 || type.isDynamicDim(3) ||
        !type.getElementType().isIntOrFloat())
      return 0;
    bits += type.getDimSize(3) * type.getElementType().getIntOrFloatBitWidth();
  }
  return bits / 8;
}

/// Whether `grid=auto` gives the kernel a CTA per task: Hopper's dense
/// causal forward (no mask_mod, paged cache, seqused_k, split-KV or varlen)
/// in fp16 or bf16 at Q/K head dims 96 to 256, in e4m3 at 192 and 256
/// (H100 run 52: (192, 128) causal +1-7 %, (256, 256) +5-28 % at 1k-8k
/// and -3 % at 1 x 16k; hd96 e4m3 lost 4-10 % and hd128 was within 2 %,
/// run 49). On the H200 (run 47, bf16, 16 heads,
/// 16k tokens a batch; docs/Hopper.md "A CTA per task") a CTA per task in
/// L2 sections took hd128 causal 1.05-1.08x the persistent snake's rate at
/// 1k-16k, hd96 1.02x, the fp16 seed problem 1.12x; hd64 causal lost 8 %
/// at 16 x 1k (its tasks are half as long, so a CTA's start weighs more)
/// and non-causal lost up to 9 % at 512-1k (static order, nothing to
/// balance).
static bool perTaskPays(func::FuncOp func, WarpSpecializeOp specialize) {
  if (getTargetOrDefault(func).family != target::Family::Hopper)
    return false;
  KernelSpecAttr spec = getKernelSpec(func);
  if (!spec || spec.getSequsedK() || spec.getBlockTable() ||
      spec.getSplits() > 1 || spec.isVarlen())
    return false;
  ArrayRef<int64_t> positions = spec.getArguments();
  if (positions.size() < 2 || positions[1] < 0 ||
      positions[1] >= static_cast<int64_t>(func.getNumArguments()))
    return false;
  auto key = dyn_cast<MemRefType>(func.getArgument(positions[1]).getType());
  // The measured head dims and element types: Q/K head dims 96, 128 (H200
  // run 47), 192 and 256 (H100 run 49: +13-47 % causal), fp16 and bf16;
  // FP8 at 192 and 256 (run 52) but not below (run 49: within ±2 % at
  // hd128; run 52: hd96 -4-10 %); not head dims 32 and 64 (run 47: hd64
  // 0.92-1.02).
  if (!key || key.getRank() != 4 || key.isDynamicDim(3) ||
      !key.getElementType().isIntOrFloat())
    return false;
  unsigned bits = key.getElementType().getIntOrFloatBitWidth();
  int64_t headDim = key.getDimSize(3);
  if (!(bits == 16 && headDim >= 96) && !(bits == 8 && headDim >= 192))
    return false;
  bool causal = false, other = false;
  specialize.walk([&](TaskCoordsOp coords) {
    (coords.isCausalShaped() ? causal : other) = true;
  });
  // (A backward's task loops number their tasks themselves: no coords.)
  return causal && !other;
}

namespace {
struct TileSchedulerPass
    : public fa4::impl::FA4TileSchedulerBase<TileSchedulerPass> {
  using Base::Base;
  /// The option is checked once, whatever the input holds.
  LogicalResult initialize(MLIRContext *context) override {
    if (l2SectionBytes < -1) {
      emitError(UnknownLoc::get(context))
          << "fa4-tile-scheduler: l2-section-bytes must be -1 (the grid's "
             "default), 0 (no sections) or a byte count, got "
          << static_cast<int64_t>(l2SectionBytes);
      return failure();
    }
    if (gridPolicy != "persistent" && gridPolicy != "per-task" &&
        gridPolicy != "auto") {
      emitError(UnknownLoc::get(context))
          << "fa4-tile-scheduler: grid must be persistent, per-task or auto, "
             "got '"
          << gridPolicy << "'";
      return failure();
    }
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

    WarpSpecializeOp specialize;
    func.walk([&](WarpSpecializeOp op) { specialize = op; });
    if (!specialize)
      return;
    // The persistent grid: the option's SM count, else the chip's; a
    // per-task grid: no cap. `auto` takes the per-task grid where it pays
    // whether or not an SM count is given: the SM count sizes a persistent
    // grid, and the runtime and the torch op give the GPU's own, which must
    // not turn the measured choice off.
    bool perTask = gridPolicy == "per-task" ||
                   (gridPolicy == "auto" && perTaskPays(func, specialize));
    int64_t sms = perTask       ? kPerTaskSmCount
                  : smCount > 0 ? int64_t(smCount)
                                : getTargetOrDefault(func).smCount;
    // CTA pairs: the grid and the CTA's index count clusters of two, each
    // on two SMs (an odd SM count leaves one out); a per-task grid keeps
    // its mark of no cap, a cluster per task.
    if (specialize.getCtaPair() && !perTask) {
      if (sms < 2) {
        specialize.emitOpError()
            << "runs as CTA pairs, a cluster on two SMs, but sm-count is "
            << sms << " (give at least 2, or two-cta=off)";
        return signalPassFailure();
      }
      sms /= 2;
    }
    OpBuilder top(specialize);
    Location loc = specialize.getLoc();
    Value cta = CtaIdOp::create(top, loc, top.getIndexType());
    Value grid = GridSizeOp::create(top, loc, top.getIndexType(),
                                        top.getI64IntegerAttr(sms));

    // The LPT order's sections: the keys of one head group's K and V that
    // fit the L2 budget.
    int64_t budget = l2SectionBytes >= 0 ? int64_t(l2SectionBytes)
                     : perTask           ? kDefaultL2SectionBytes
                                         : 0;
    int64_t keyBytes = kvBytesPerKey(func);
    // (At most 2^31 - 1: the kernel's index arithmetic is 32 bits wide; at
    // least 1 where sections are asked for.)
    int64_t l2Keys =
        budget > 0 && keyBytes > 0
            ? std::clamp<int64_t>(budget / keyBytes, 1, (int64_t(1) << 31) - 1)
            : 0;

    TaskOrder order = TaskOrder::static_order;
    bool hopperForward =
        getTargetOrDefault(func).family == target::Family::Hopper;
    // Whether each task loop is dealt in a snake: every role's must be, or
    // none, or the roles of a CTA would walk different tasks.
    SmallVector<std::pair<scf::ForOp, bool>> dealt;
    bool failed = false;
    SmallVector<scf::ForOp> taskLoops;
    specialize.walk([&](scf::ForOp loop) {
      if (loop->hasAttr("fa4.task_loop"))
        taskLoops.push_back(loop);
    });
    for (scf::ForOp loop : taskLoops) {
      if (failed)
        break;
      if (!loop.getInductionVar().getType().isIndex()) {
        loop.emitOpError() << "is a task loop over "
                           << loop.getInductionVar().getType()
                           << "; task positions are index values";
        failed = true;
        break;
      }
      // Each CTA takes positions cta, cta + grid, ... of the order; every role
      // of the CTA walks the same positions, so their rings stay in step.
      loop.getLowerBoundMutable().assign(cta);
      loop.getStepMutable().assign(grid);
      bool varlen = false, heaviestFirst = false;
      for (auto coords : loop.getBody()->getOps<TaskCoordsOp>()) {
        // A varlen grid walks its slots in its own order (each sequence's
        // last tiles first).
        if (coords.getCuSeqlens()) {
          varlen = true;
          continue;
        }
        // Causal tasks and a mask_mod's differ in work: heaviest first. A
        // window's differ only at the sequence's ends (its band is as wide
        // everywhere else) and keep the static order: finding the m_block
        // of an LPT rank takes a search over every m_block per task (a
        // window's work rises, plateaus and falls), which on the H200 cost
        // more than the whole attention (hd128, window (256, 0), 16 heads
        // at 4 x 4k: 1.17 ms against 0.9 ms for no mask; Nsight Compute:
        // the search's integer ops and the waits behind them were most of
        // the samples, bench/h200/results/run40/windows).
        // A window unbounded on the left is causal's shape (its work never
        // falls as the m_block rises) and takes causal's order.
        bool causalShaped = coords.isCausalShaped();
        bool weighed = causalShaped || !coords.getMaskMod().empty();
        order = weighed ? TaskOrder::lpt : TaskOrder::static_order;
        coords.setOrder(order);
        // Sections where the order is causal's (a closed form): a
        // mask_mod's search for its m_blocks holds registers the section's
        // index arithmetic would push into spills.
        // A section's consecutive head groups share a K/V head
        // groups_per_kv at a time: the budget counts K/V heads.
        if (causalShaped && l2Keys > 0)
          coords.setL2Keys(std::min<int64_t>(
              l2Keys * static_cast<int64_t>(coords.getGroupsPerKv()),
              (int64_t(1) << 31) - 1));
        // The forward deals its LPT order in a snake where the H200
        // measured it (run 32): Hopper, causal. A mask_mod's order finds a
        // task's m_block by a search whose registers the snake's index
        // arithmetic pushes into spills; Blackwell's roles run on budgets
        // it overflows in a mask_mod variant, and no Blackwell GPU has
        // measured what it would buy.
        heaviestFirst |= order == TaskOrder::lpt && hopperForward && causalShaped;
      }
      // A schedule that numbers its tasks itself (the backward's) says so
      // on the loop.
      if (Attribute attr = loop->getAttr(kTaskOrderAttrName)) {
        auto taskOrder = dyn_cast<TaskOrderAttr>(attr);
        if (!taskOrder || varlen) {
          loop.emitOpError()
              << "has " << kTaskOrderAttrName << " = " << attr
              << (varlen ? ", but a varlen task loop walks its own order"
                         : ", not a #fa4.task_order");
          failed = true;
          break;
        }
        heaviestFirst |= taskOrder.getValue() == TaskOrder::lpt;
        if (heaviestFirst)
          order = TaskOrder::lpt;
      }
      // Heaviest first, dealt in a snake. On the H200 (132 CTAs, 16
      // heads, batch x seq = 16k) round robin over the forward's lpt order
      // left the busiest CTA 3-12 % over the mean at causal 4k-16k, the
      // snake 1-3 %, and round robin over the backward's tasks numbered
      // blocks-fastest 30-60 % (bench/h200/results/run31, run32).
      if (heaviestFirst)
        loop = dealInSnake(loop, cta, grid);
      dealt.push_back({loop, heaviestFirst});
    }
    if (failed)
      return signalPassFailure();
    for (auto [loop, snake] : dealt)
      if (snake != dealt.front().second) {
        loop.emitOpError()
            << "is " << (snake ? "" : "not ")
            << "dealt in a snake (heaviest first) while the first task loop "
            << (snake ? "is not" : "is")
            << ": every role's task loop must walk the same order";
        return signalPassFailure();
      }
    specialize->setAttr(kGridAttrName,
                        GridAttr::get(func.getContext(), sms, order));
  }
};
} // namespace
