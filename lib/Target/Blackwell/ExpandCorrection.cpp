//===- ExpandCorrection.cpp - the correction role's TMEM round trips -------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Blackwell/Passes.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include <limits>

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4EXPANDCORRECTION
#include "fa4/Target/Blackwell/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

/// There is no "scale TMEM" instruction: each chunk goes TMEM -> registers ->
/// TMEM. The vote skips all of it when every row's factor is exactly 1.
static void expandRescale(RescaleOOp rescale, bool densePairs) {
  OpBuilder b(rescale);
  Location loc = rescale.getLoc();
  TmemType type = rescale.getAcc().getType();
  Value needed =
      NeedsRescaleOp::create(b, loc, b.getI1Type(), rescale.getAccScale());
  auto guard = scf::IfOp::create(b, loc, needed, false);
  b.setInsertionPointToStart(guard.thenBlock());
  int64_t width = densePairs &&
                          type.getCols() % ScheduleConfig::kPairRescaleChunk == 0
                      ? ScheduleConfig::kPairRescaleChunk
                      : ScheduleConfig::kRescaleChunk;
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value columns = arith::ConstantIndexOp::create(b, loc, type.getCols());
  Value chunk = arith::ConstantIndexOp::create(b, loc, width);
  auto loop = scf::ForOp::create(b, loc, zero, columns, chunk);
  b.setInsertionPointToStart(loop.getBody());
  auto chunkType = RankedTensorType::get({type.getLanes(), width},
                                         type.getElementType());
  Value column = loop.getInductionVar();
  Value values = TmemLoadOp::create(b, loc, chunkType, rescale.getAcc(), column);
  Value scaled = CorrectionOp::create(b, loc, chunkType, values,
                                        rescale.getAccScale());
  TmemStoreOp::create(b, loc, scaled, rescale.getAcc(), column);
  rescale.erase();
}

/// Chunk by chunk as well: O / row_sum of 16 columns at a time goes straight
/// to the staging buffer. Every chunk's normalize gives the same LSE; the
/// loop carries it out.
static void expandFinalize(FinalizeOOp finalize) {
  OpBuilder b(finalize);
  Location loc = finalize.getLoc();
  TmemType type = finalize.getAcc().getType();
  Type outElement = finalize.getStaging().getType().getElementType();
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value columns = arith::ConstantIndexOp::create(b, loc, type.getCols());
  Value chunk =
      arith::ConstantIndexOp::create(b, loc, ScheduleConfig::kNormalizeChunk);
  Value noLse = arith::ConstantOp::create(b,
      loc, DenseElementsAttr::get(cast<ShapedType>(finalize.getLse().getType()),
                                  -std::numeric_limits<float>::infinity()));
  auto loop = scf::ForOp::create(b, loc, zero, columns, chunk, ValueRange{noLse});
  b.setInsertionPointToStart(loop.getBody());
  Value column = loop.getInductionVar();
  auto chunkType = RankedTensorType::get(
      {type.getLanes(), ScheduleConfig::kNormalizeChunk}, type.getElementType());
  auto outType = RankedTensorType::get(
      {type.getLanes(), ScheduleConfig::kNormalizeChunk}, outElement);
  Value values = TmemLoadOp::create(b, loc, chunkType, finalize.getAcc(), column);
  auto normalize = NormalizeOp::create(
      b, loc, outType, finalize.getLse().getType(), values,
      finalize.getRowMax(), finalize.getRowSum(), finalize.getFactor(),
      finalize.getOutFactor(), finalize.getScaleLog2Attr(),
      finalize.getProbShiftAttr());
  SmemStoreOp::create(b, loc, normalize.getOut(), finalize.getStaging(),
                        finalize.getCount(), column, IntegerAttr());
  scf::YieldOp::create(b, loc, normalize.getLse());
  finalize.getLse().replaceAllUsesWith(loop.getResult(0));
  finalize.erase();
}

/// The chunks of a finalize that stores from registers (split-KV's and
/// varlen's): each 16 columns of O loaded from TMEM and normalized to
/// `outElement`, handed to `store` with its column; unrolled (a constant
/// column each, which the stores take as an attribute). Every chunk's
/// normalize gives the same LSE, which replaces the finalize's.
template <typename Finalize>
static void expandUnrolledFinalize(
    Finalize finalize, Type outElement,
    function_ref<void(OpBuilder &, Value, int64_t)> store) {
  OpBuilder b(finalize);
  Location loc = finalize.getLoc();
  TmemType type = finalize.getAcc().getType();
  Value lse;
  auto chunkType = RankedTensorType::get(
      {type.getLanes(), ScheduleConfig::kNormalizeChunk}, type.getElementType());
  auto outType = RankedTensorType::get(
      {type.getLanes(), ScheduleConfig::kNormalizeChunk}, outElement);
  for (int64_t column = 0; column < type.getCols();
       column += ScheduleConfig::kNormalizeChunk) {
    Value values = TmemLoadOp::create(
        b, loc, chunkType, finalize.getAcc(),
        arith::ConstantIndexOp::create(b, loc, column));
    auto normalize = NormalizeOp::create(
        b, loc, outType, finalize.getLse().getType(), values,
        finalize.getRowMax(), finalize.getRowSum(), finalize.getFactor(),
        finalize.getOutFactor(), finalize.getScaleLog2Attr(),
        finalize.getProbShiftAttr());
    store(b, normalize.getOut(), column);
    lse = normalize.getLse();
  }
  finalize.getLse().replaceAllUsesWith(lse);
  finalize.erase();
}

/// A split-KV part's finalize: the chunks in f32, into the workspace.
static void expandFinalizePartial(FinalizePartialOOp finalize) {
  expandUnrolledFinalize(
      finalize, finalize.getAcc().getType().getElementType(),
      [&](OpBuilder &b, Value chunk, int64_t column) {
        StorePartialOOp::create(b, finalize.getLoc(), chunk, finalize.getOut(),
                                finalize.getWorkspace(), finalize.getBatch(),
                                finalize.getHead(), finalize.getRow(),
                                finalize.getSplit(), finalize.getGqaRatio(),
                                finalize.getNumSplits(), column);
      });
}

/// A varlen tile's finalize: the chunks stored by address into the
/// sequence's rows of O.
static void expandFinalizeRows(FinalizeORowsOp finalize) {
  expandUnrolledFinalize(
      finalize, cast<MemRefType>(finalize.getOut().getType()).getElementType(),
      [&](OpBuilder &b, Value chunk, int64_t column) {
        StoreOTileOp::create(
            b, finalize.getLoc(), chunk, finalize.getOut(), finalize.getBatch(),
            finalize.getHead(), finalize.getRow(),
            ValueRange{finalize.getOffset(), finalize.getLimit()},
            finalize.getGqaRatio(), column);
      });
}

namespace {
struct ExpandCorrectionPass
    : public fa4::impl::FA4ExpandCorrectionBase<ExpandCorrectionPass> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (failed(checkModuleFamily(func, target::Family::Blackwell, getArgument())))
      return signalPassFailure();
    // FP8's rules before the finalizes become normalizations: an error
    // names the op the schedule (or its author) wrote.
    if (holdsFp8Pieces(func) && failed(verifyFp8Program(func)))
      return signalPassFailure();
    SmallVector<RescaleOOp> rescales;
    SmallVector<FinalizeOOp> finals;
    func.walk([&](RescaleOOp op) { rescales.push_back(op); });
    func.walk([&](FinalizeOOp op) { finals.push_back(op); });
    bool densePairs = runsAsDensePairs(func);
    for (RescaleOOp rescale : rescales)
      expandRescale(rescale, densePairs);
    for (FinalizeOOp finalize : finals)
      expandFinalize(finalize);
    SmallVector<FinalizePartialOOp> partials;
    func.walk([&](FinalizePartialOOp op) { partials.push_back(op); });
    for (FinalizePartialOOp finalize : partials)
      expandFinalizePartial(finalize);
    SmallVector<FinalizeORowsOp> rows;
    func.walk([&](FinalizeORowsOp op) { rows.push_back(op); });
    for (FinalizeORowsOp finalize : rows)
      expandFinalizeRows(finalize);
  }
};
} // namespace
