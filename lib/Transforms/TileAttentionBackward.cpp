//===- TileAttentionBackward.cpp - fa4.attention_backward to tiles --------===//
//
// Level A -> level B for the gradients: the FlashAttention-2/3 backward on
// 128 x 128 tiles, in three steps over one function.
//
//   1. preprocessing, per (batch, head group, query block): delta =
//      rowsum(dO ∘ O) into the delta workspace, and the dQ accumulator's
//      rows cleared;
//   2. the main loop, per (batch, K/V head, K/V block): K and V loaded once,
//      dK and dV accumulated in f32 across the query blocks that see the
//      block (fa4.q_block_range: masked at the edges, unmasked inside,
//      never visited outside), each recomputing S and P from the forward's
//      LSE; every query block's dQ part (dS·K) is added to the accumulator;
//      dK (times the scale) and dV rounded and stored once;
//   3. post-processing, per query block: dQ = accumulator · scale, rounded.
//
// GQA: a query block packs the group's heads as the forward's tiles do
// (packed row r is position r / g of head r % g), so one K/V task sums the
// contributions of every query head that shares its K/V head — over every
// head group of that head when the ratio is not packed whole.
//
//===----------------------------------------------------------------------===//

#include "TileAttentionBackward.h"

#include "HoistedConstants.h"
#include "TileScores.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/ScoreModGrad.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::fa4;

namespace {

class BackwardProgramBuilder {
public:
  BackwardProgramBuilder(AttentionBackwardOp op, const TileConfig &config,
                         Region *derivative)
      : op(op), config(config), derivative(derivative), b(op),
        loc(op.getLoc()), constants(op) {}

  void build();

private:
  Value index(int64_t value) { return constants.index(value); }
  Value splat(RankedTensorType type, float value) {
    return constants.splat(type, value);
  }
  RankedTensorType tile(int64_t rows, int64_t columns, Type element) {
    return RankedTensorType::get({rows, columns}, element);
  }
  /// A loop `for iv in [0, count)` at the builder's point; the builder moves
  /// into its body.
  Value loop(Value count) {
    auto forOp = scf::ForOp::create(b, loc, index(0), count, index(1));
    b.setInsertionPointToStart(forOp.getBody());
    return forOp.getInductionVar();
  }

  /// Steps 1 and 3: one query block of head group `head`.
  void buildPreprocess(Value batch, Value head, Value row);
  void buildPostprocess(Value batch, Value head, Value row);
  /// Step 2: one K/V block.
  void buildKvTask(Value batch, Value kvHead, Value nBlock);
  /// The query blocks [first, last) of head group `head`, ascending,
  /// carrying dK and dV.
  std::pair<Value, Value> buildQueryLoop(Value first, Value last, bool masked,
                                         Value dk, Value dv, Value kTile,
                                         Value vTile, Value batch, Value head,
                                         Value col);
  /// One (query block, K/V block) pair: the body of the backward.
  std::pair<Value, Value> buildBlockStep(OpBuilder &body, Value row, bool masked,
                                         Value dk, Value dv, Value kTile,
                                         Value vTile, Value batch, Value head,
                                         Value col);

  AttentionBackwardOp op;
  const TileConfig &config;
  /// The score_mod's derivative (a region fa4-tile built), null without a
  /// score_mod.
  Region *derivative;
  OpBuilder b;
  Location loc;
  HoistedConstants constants;
  Value seqQ, seqK;
};

} // namespace

void BackwardProgramBuilder::build() {
  Value zero = index(0), one = index(1);
  Value batches = memref::DimOp::create(b, loc, op.getQ(), zero);
  seqQ = memref::DimOp::create(b, loc, op.getQ(), one);
  seqK = memref::DimOp::create(b, loc, op.getK(), one);
  Value packedRows = arith::MulIOp::create(b, loc, seqQ,
                                           index(config.gqaPacking));
  Value mBlocks =
      arith::CeilDivUIOp::create(b, loc, packedRows, index(TileConfig::kBlockM));
  Value nBlocks =
      arith::CeilDivUIOp::create(b, loc, seqK, index(TileConfig::kBlockN));
  OpBuilder::InsertPoint top = b.saveInsertionPoint();

  // 1. delta and a cleared accumulator, before any K/V task reads them.
  {
    Value batch = loop(batches);
    Value head = loop(index(config.headGroups()));
    Value mBlock = loop(mBlocks);
    buildPreprocess(batch, head,
                    arith::MulIOp::create(b, loc, mBlock,
                                          index(TileConfig::kBlockM)));
  }
  b.restoreInsertionPoint(top);
  // 2. One task per K/V block.
  {
    Value batch = loop(batches);
    Value kvHead = loop(index(config.numKvHeads));
    Value nBlock = loop(nBlocks);
    buildKvTask(batch, kvHead, nBlock);
  }
  b.restoreInsertionPoint(top);
  // 3. dQ from the accumulator, once every K/V task has added its part.
  {
    Value batch = loop(batches);
    Value head = loop(index(config.headGroups()));
    Value mBlock = loop(mBlocks);
    buildPostprocess(batch, head,
                     arith::MulIOp::create(b, loc, mBlock,
                                           index(TileConfig::kBlockM)));
  }
  b.restoreInsertionPoint(top);
}

void BackwardProgramBuilder::buildPreprocess(Value batch, Value head,
                                             Value row) {
  Type element = getElementTypeOrSelf(op.getQ().getType());
  auto qTileType = tile(TileConfig::kBlockM, config.headDim, element);
  auto accType = tile(TileConfig::kBlockM, config.headDim, b.getF32Type());
  auto rowType = RankedTensorType::get({TileConfig::kBlockM}, b.getF32Type());
  Value oTile = LoadQTileOp::create(b, loc, qTileType, op.getOut(), batch,
                                    head, row, config.gqaPacking);
  Value doTile = LoadQTileOp::create(b, loc, qTileType, op.getDout(), batch,
                                     head, row, config.gqaPacking);
  Value delta = RowDotOp::create(b, loc, rowType, oTile, doTile);
  StoreLseTileOp::create(b, loc, delta, op.getDelta(), batch, head, row,
                         ValueRange(), config.gqaPacking);
  StoreOTileOp::create(b, loc, splat(accType, 0.0f), op.getDqAccum(), batch,
                       head, row, ValueRange(), config.gqaPacking, 0);
}

void BackwardProgramBuilder::buildPostprocess(Value batch, Value head,
                                              Value row) {
  Type element = getElementTypeOrSelf(op.getQ().getType());
  auto accType = tile(TileConfig::kBlockM, config.headDim, b.getF32Type());
  Value acc = LoadQTileOp::create(b, loc, accType, op.getDqAccum(), batch,
                                  head, row, config.gqaPacking);
  // dS is the gradient with respect to the scaled score: dQ = scale·dS·K.
  Value dq = ConvertTileOp::create(
      b, loc, tile(TileConfig::kBlockM, config.headDim, element), acc,
      APFloat(config.scale));
  StoreOTileOp::create(b, loc, dq, op.getDq(), batch, head, row, ValueRange(),
                       config.gqaPacking, 0);
}

void BackwardProgramBuilder::buildKvTask(Value batch, Value kvHead,
                                         Value nBlock) {
  Type element = getElementTypeOrSelf(op.getK().getType());
  auto kvTileType = tile(TileConfig::kBlockN, config.headDim, element);
  auto gradType = tile(TileConfig::kBlockN, config.headDim, b.getF32Type());
  Value col = arith::MulIOp::create(b, loc, nBlock, index(TileConfig::kBlockN));
  Value kTile = LoadKvTileOp::create(b, loc, kvTileType, op.getK(), batch,
                                     kvHead, col, Value(), Value());
  Value vTile = LoadKvTileOp::create(b, loc, kvTileType, op.getV(), batch,
                                     kvHead, col, Value(), Value());
  Value dk = splat(gradType, 0.0f), dv = splat(gradType, 0.0f);

  // The query heads of this K/V head: one head group, or several when the
  // ratio is not packed whole; each group's blocks in turn.
  Type indexType = b.getIndexType();
  auto groups = scf::ForOp::create(
      b, loc, index(0), index(config.groupsPerKv()), index(1),
      ValueRange{dk, dv},
      [&](OpBuilder &body, Location loc, Value group, ValueRange carried) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(body.getInsertionBlock(),
                            body.getInsertionPoint());
        Value head = arith::AddIOp::create(
            b, loc, arith::MulIOp::create(b, loc, kvHead,
                                          index(config.groupsPerKv())),
            group);
        auto range = QBlockRangeOp::create(
            b, loc, indexType, indexType, indexType, indexType, col, seqQ,
            seqK, TileConfig::kBlockM, TileConfig::kBlockN, config.gqaPacking,
            config.mask, config.windowLeft, config.windowRight);
        IRMapping none;
        op.getMaskMod().cloneInto(&range.getMaskMod(), none);
        // Ascending: the masked low edge, the whole middle, the masked high
        // edge (the causal diagonal's blocks come first).
        auto [dk1, dv1] =
            buildQueryLoop(range.getBegin(), range.getFullBegin(), true,
                           carried[0], carried[1], kTile, vTile, batch, head,
                           col);
        auto [dk2, dv2] = buildQueryLoop(range.getFullBegin(),
                                         range.getFullEnd(), false, dk1, dv1,
                                         kTile, vTile, batch, head, col);
        auto [dk3, dv3] =
            buildQueryLoop(range.getFullEnd(), range.getEnd(), true, dk2, dv2,
                           kTile, vTile, batch, head, col);
        scf::YieldOp::create(b, loc, ValueRange{dk3, dv3});
      });

  // dK with respect to the raw score's K carries the scale; dV does not.
  Value dkOut = ConvertTileOp::create(b, loc, kvTileType, groups.getResult(0),
                                      APFloat(config.scale));
  Value dvOut = ConvertTileOp::create(b, loc, kvTileType, groups.getResult(1),
                                      APFloat(1.0f));
  StoreKvTileOp::create(b, loc, dkOut, op.getDk(), batch, kvHead, col);
  StoreKvTileOp::create(b, loc, dvOut, op.getDv(), batch, kvHead, col);
}

std::pair<Value, Value> BackwardProgramBuilder::buildQueryLoop(
    Value first, Value last, bool masked, Value dk, Value dv, Value kTile,
    Value vTile, Value batch, Value head, Value col) {
  auto forOp = scf::ForOp::create(
      b, loc, first, last, index(1), ValueRange{dk, dv},
      [&](OpBuilder &body, Location loc, Value mBlock, ValueRange carried) {
        Value row =
            arith::MulIOp::create(body, loc, mBlock, index(TileConfig::kBlockM));
        auto [dkNext, dvNext] = buildBlockStep(body, row, masked, carried[0],
                                               carried[1], kTile, vTile, batch,
                                               head, col);
        scf::YieldOp::create(body, loc, ValueRange{dkNext, dvNext});
      });
  if (masked)
    forOp->setAttr("fa4.masked", b.getUnitAttr());
  return {forOp.getResult(0), forOp.getResult(1)};
}

std::pair<Value, Value> BackwardProgramBuilder::buildBlockStep(
    OpBuilder &body, Value row, bool masked, Value dk, Value dv, Value kTile,
    Value vTile, Value batch, Value head, Value col) {
  Type element = getElementTypeOrSelf(op.getQ().getType());
  Type f32 = body.getF32Type();
  auto qTileType = tile(TileConfig::kBlockM, config.headDim, element);
  auto scoreType = tile(TileConfig::kBlockM, TileConfig::kBlockN, f32);
  auto probType = tile(TileConfig::kBlockM, TileConfig::kBlockN, element);
  auto accType = tile(TileConfig::kBlockM, config.headDim, f32);
  auto rowType = RankedTensorType::get({TileConfig::kBlockM}, f32);

  Value qTile = LoadQTileOp::create(body, loc, qTileType, op.getQ(), batch,
                                    head, row, config.gqaPacking);
  Value doTile = LoadQTileOp::create(body, loc, qTileType, op.getDout(), batch,
                                     head, row, config.gqaPacking);
  Value lse = LoadRowTileOp::create(body, loc, rowType, op.getLse(), batch,
                                    head, row, config.gqaPacking);
  Value delta = LoadRowTileOp::create(body, loc, rowType, op.getDelta(), batch,
                                      head, row, config.gqaPacking);

  // S and P as the forward computed them.
  TileScores tile = buildTileScores(body, loc, op, config, scoreType, qTile,
                                    kTile, batch, head, row, col, seqQ, seqK,
                                    masked);
  Value raw = tile.raw, scores = tile.scores, visible = tile.visible;
  Value probs = ProbsFromLseOp::create(body, loc, scoreType, visible, lse,
                                       APFloat(config.scaleLog2));

  // dV += Pᵀ·dO; dP = dO·Vᵀ; dS = P ∘ (dP − delta).
  Value probsLow = ConvertTileOp::create(body, loc, probType, probs,
                                         APFloat(1.0f));
  dv = TransposedMmaOp::create(body, loc, dv.getType(), probsLow, doTile, dv);
  Value dprobs = ScoreMmaOp::create(body, loc, scoreType, doTile, vTile);
  Value ds = SoftmaxGradOp::create(body, loc, scoreType, probs, dprobs, delta);
  // Back through the softcap or the score_mod to the scaled raw score.
  if (config.softcap > 0.0f)
    ds = SoftcapGradOp::create(body, loc, scoreType, ds, scores,
                               APFloat(config.softcap));
  if (config.scoreMod) {
    auto grad = ScoreModGradOp::create(body, loc, scoreType, ds, raw, batch,
                                       head, row, col, seqQ, seqK,
                                       op.getExtras(), config.gqaPacking,
                                       APFloat(config.scale));
    IRMapping none;
    derivative->cloneInto(&grad.getBody(), none);
    ds = grad;
  }
  // dK += dSᵀ·Q; dQ += dS·K (scaled once, after the last part).
  Value dsLow = ConvertTileOp::create(body, loc, probType, ds, APFloat(1.0f));
  dk = TransposedMmaOp::create(body, loc, dk.getType(), dsLow, qTile, dk);
  Value dqPart = ValueMmaOp::create(body, loc, accType, dsLow, kTile,
                                    splat(accType, 0.0f));
  AccumulateDqOp::create(body, loc, dqPart, op.getDqAccum(), batch, head, row,
                         config.gqaPacking);
  return {dk, dv};
}

/// The entry op's configuration, kept on the function.
static BackwardSpecAttr buildSpec(AttentionBackwardOp op,
                                  const TileConfig &config) {
  SmallVector<int64_t> argumentPositions, extraPositions;
  for (Value operand : op->getOperands().take_front(kBackwardArguments))
    argumentPositions.push_back(cast<BlockArgument>(operand).getArgNumber());
  for (Value extra : op.getExtras())
    extraPositions.push_back(cast<BlockArgument>(extra).getArgNumber());
  return BackwardSpecAttr::get(
      op.getContext(), config.mask, config.windowLeft, config.windowRight,
      APFloat(config.scale), APFloat(config.softcap), op.getDeterministic(),
      argumentPositions, extraPositions);
}

TileConfig mlir::fa4::backwardTileConfig(AttentionBackwardOp op) {
  float softcap = op.getSoftcap().convertToFloat();
  float cap = softcapOf(op.getScoreMod());
  if (cap > 0.0f)
    softcap = cap;
  TileConfig config = TileConfig::get(
      op.getHeadDim(), op.getNumQueryHeads(), op.getNumKvHeads(), op.getMask(),
      op.getWindowLeft(), op.getWindowRight(), op.getEffectiveScale(), softcap,
      /*rescaleThreshold=*/0.0);
  config.qTilesPerTask = 1;
  if (!op.getScoreMod().empty() && cap == 0.0f) {
    config.scoreMod = true;
    config.scaleLog2 = 1.4426950408889634f;
  }
  return config;
}

LogicalResult mlir::fa4::tileAttentionBackward(AttentionBackwardOp op) {
  // Each tensor is its own argument: the kernels take each through its own
  // parameter (a tensor map or an address), and fa4.backward_spec names
  // each position once.
  static const char *names[] = {"Q",  "K",  "V",  "O",     "dO",
                                "the LSE", "dQ", "dK", "dV", "delta",
                                "the dQ accumulator"};
  ValueRange roles = op->getOperands().take_front(kBackwardArguments);
  for (size_t i = 0; i < roles.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (roles[i] == roles[j])
        return op.emitOpError()
               << "takes " << names[j] << " and " << names[i]
               << " as one memref; the backward's kernels read and write "
                  "each tensor through its own parameter: pass them as "
                  "separate arguments (a copy where they are one tensor)";
  TileConfig config = backwardTileConfig(op);
  // The score_mod's derivative first: a region it cannot differentiate is
  // refused before anything is built.
  Region derivative;
  if (config.scoreMod &&
      failed(differentiateScoreMod(op.getScoreMod(), derivative)))
    return failure();
  auto func = op->getParentOfType<func::FuncOp>();
  func->setAttr(kBackwardSpecAttrName, buildSpec(op, config));
  BackwardProgramBuilder(op, config, config.scoreMod ? &derivative : nullptr)
      .build();
  op.erase();
  return success();
}
