//===- TileAttention.cpp - fa4.attention to the tile program --------------===//
//
// Level A -> level B: the FlashAttention algorithm on 128-row tiles. See the
// pass description in Passes.td for what it requires and guarantees.
//
//===----------------------------------------------------------------------===//

#include "TileAttentionBackward.h"

#include "HoistedConstants.h"
#include "TileScores.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/Passes.h"
#include "fa4/Transforms/TileConfig.h"
#include "fa4/Transforms/TileProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <limits>

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4TILEATTENTION
#include "fa4/Transforms/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {

/// The running state of one Q tile across KV blocks.
struct QTileState {
  Value rowMax;
  Value rowSum;
  Value acc;
};

/// Builds the tile program of one attention op.
class TileProgramBuilder {
public:
  TileProgramBuilder(AttentionOp op, const TileConfig &config)
      : op(op), config(config), b(op), loc(op.getLoc()), constants(op) {}

  void build();

private:
  /// Constants are made once, ahead of the program.
  Value index(int64_t value) { return constants.index(value); }
  Value splat(RankedTensorType type, float value) {
    return constants.splat(type, value);
  }

  /// Per task: both Q tiles, the KV loops, the normalization and the stores.
  void buildTask(Value batch, Value head, Value mBlock, Value split, Value seqQ,
                 Value seqK);

  /// One KV loop over blocks [first, last), visited last to first.
  SmallVector<QTileState> buildKvLoop(Value first, Value last, bool masked,
                                      ArrayRef<QTileState> init,
                                      ArrayRef<Value> qTiles,
                                      ArrayRef<Value> qRows, Value batch,
                                      Value head, Value seqQ, Value seqK);

  /// One KV block for one Q tile: the body of FlashAttention.
  QTileState buildBlockStep(OpBuilder &body, QTileState state, Value qTile,
                            Value qRow, Value kTile, Value vTile, Value kvCol,
                            bool masked, Value batch, Value head, Value seqQ,
                            Value seqK);

  AttentionOp op;
  const TileConfig &config;
  /// The paged cache's block table, null for dense K and V.
  Value blockTable;
  /// The K/V head of the task being built (its head group's), computed
  /// once per task for its three KV loops.
  Value taskKvHead;
  /// Varlen: the sequence's first Q and K/V rows in the packed tensors
  /// (null for a dense batch), and the batch coordinate the tensors are
  /// addressed with (the sequence's, or 0 in a packed tensor).
  Value qOffset, kOffset, tensorBatch;
  /// FP8: the task's q_descale · k_descale (null when neither is given).
  Value scoreFactor;
  /// What the softmax's exponent multiplies its scale by: the descale
  /// product, unless the softcap or the score_mod has applied it (and the
  /// scale) already.
  Value softmaxFactor() const {
    return config.softcap > 0.0f || config.scoreMod ? Value() : scoreFactor;
  }
  OpBuilder b;
  Location loc;
  HoistedConstants constants;
};

} // namespace

void TileProgramBuilder::build() {
  Value zero = index(0), one = index(1);
  Value batches = memref::DimOp::create(b, loc, op.getQ(), zero);
  Value seqQ = memref::DimOp::create(b, loc, op.getQ(), one);
  Value seqK = memref::DimOp::create(b, loc, op.getK(), one);
  // A paged cache: each sequence has max_blocks pages of page_size keys.
  if (std::optional<uint64_t> position = op.getBlockTable()) {
    blockTable = op.getExtras()[*position];
    seqK = arith::MulIOp::create(
        b, loc, memref::DimOp::create(b, loc, blockTable, one), seqK);
  }
  // Varlen: the batch is the cu_seqlens tables' entries less one, each
  // sequence its own rows of the packed tensors.
  Value cuSeqlensQ, cuSeqlensK;
  if (std::optional<uint64_t> position = op.getCuSeqlensQ()) {
    cuSeqlensQ = op.getExtras()[*position];
    cuSeqlensK = op.getExtras()[*op.getCuSeqlensK()];
    batches = arith::SubIOp::create(
        b, loc, memref::DimOp::create(b, loc, cuSeqlensQ, zero), one);
  }
  // GQA packs `ratio` query heads per row position, so an m_block of 256
  // packed rows covers 256 / ratio query positions.
  auto queryTiles = [&](Value rows) -> Value {
    Value packedRows =
        arith::MulIOp::create(b, loc, rows, index(config.gqaPacking));
    return arith::CeilDivUIOp::create(b, loc, packedRows,
                                      index(config.rowsPerTask()));
  };
  Value mBlocks = cuSeqlensQ ? Value() : queryTiles(seqQ);

  auto batchLoop = scf::ForOp::create(b, loc, zero, batches, one);
  b.setInsertionPointToStart(batchLoop.getBody());
  tensorBatch = batchLoop.getInductionVar();
  if (cuSeqlensQ) {
    auto queries = SequenceSpanOp::create(b, loc, cuSeqlensQ,
                                          batchLoop.getInductionVar(), seqQ);
    auto keys = SequenceSpanOp::create(b, loc, cuSeqlensK,
                                       batchLoop.getInductionVar(), seqK);
    qOffset = queries.getOffset();
    kOffset = keys.getOffset();
    seqQ = queries.getLength();
    seqK = keys.getLength();
    tensorBatch = zero;
    mBlocks = queryTiles(seqQ);
  }
  // With seqused_k, each sequence has its own number of keys: every mask,
  // range and bound of its tasks reads that one.
  if (std::optional<uint64_t> position = op.getSequsedK())
    seqK = SequenceLengthOp::create(b, loc, op.getExtras()[*position],
                                    batchLoop.getInductionVar(), seqK);
  // One task per head group: the query heads packed in its rows (all of a
  // K/V head's where the ratio packs whole).
  auto headLoop =
      scf::ForOp::create(b, loc, zero, index(config.headGroups()), one);
  b.setInsertionPointToStart(headLoop.getBody());
  auto mBlockLoop = scf::ForOp::create(b, loc, zero, mBlocks, one);
  b.setInsertionPointToStart(mBlockLoop.getBody());
  // Split-KV: each part of the task's KV blocks is a task of its own.
  Value split;
  if (std::optional<uint64_t> splits = op.getNumSplits()) {
    auto splitLoop = scf::ForOp::create(
        b, loc, zero, index(static_cast<int64_t>(*splits)), one);
    b.setInsertionPointToStart(splitLoop.getBody());
    split = splitLoop.getInductionVar();
  }
  buildTask(batchLoop.getInductionVar(), headLoop.getInductionVar(),
            mBlockLoop.getInductionVar(), split, seqQ, seqK);
}

void TileProgramBuilder::buildTask(Value batch, Value head, Value mBlock,
                                   Value split, Value seqQ, Value seqK) {
  Type element = getElementTypeOrSelf(op.getQ().getType());
  auto qTileType =
      RankedTensorType::get({config.blockM, config.headDim}, element);
  auto rowType = RankedTensorType::get({config.blockM}, b.getF32Type());
  auto accType = RankedTensorType::get(
      {config.blockM, config.valueHeadDim}, b.getF32Type());
  // O is in the input type, or f16/bf16 for FP8 inputs.
  auto oTileType = RankedTensorType::get(
      {config.blockM, config.valueHeadDim},
      getElementTypeOrSelf(op.getOut().getType()));

  Value taskRow =
      arith::MulIOp::create(b, loc, mBlock, index(config.rowsPerTask()));
  SmallVector<Value> qRows, qTiles;
  for (int64_t stage = 0; stage < config.qTilesPerTask; ++stage) {
    Value row = stage == 0 ? taskRow
                           : arith::AddIOp::create(b,
                                 loc, taskRow, index(stage * config.blockM))
                                 .getResult();
    qRows.push_back(row);
    // Varlen: the sequence's packed rows start at its first row's.
    Value tensorRow =
        qOffset ? arith::AddIOp::create(
                      b, loc, row,
                      arith::MulIOp::create(b, loc, qOffset,
                                            index(config.gqaPacking)))
                      .getResult()
                : row;
    qTiles.push_back(LoadQTileOp::create(b, loc, qTileType, op.getQ(),
                                         tensorBatch, head, tensorRow,
                                         config.gqaPacking));
  }

  Type indexType = b.getIndexType();
  // A block mask narrows the range by the task's entries.
  Value blockMask;
  if (std::optional<uint64_t> position = op.getBlockMask())
    blockMask = op.getExtras()[*position];
  auto range = KvBlockRangeOp::create(b,
      loc, indexType, indexType, indexType, indexType, taskRow, seqQ, seqK,
      blockMask, blockMask ? batch : Value(), blockMask ? head : Value(),
      config.rowsPerTask(), config.blockN, config.gqaPacking,
      config.mask, config.windowLeft, config.windowRight);
  // The range reads the mask_mod's affine part; the region is not run there.
  IRMapping none;
  op.getMaskMod().cloneInto(&range.getMaskMod(), none);

  Value minusInf = splat(rowType, -std::numeric_limits<float>::infinity());
  Value zeroRow = splat(rowType, 0.0f);
  Value zeroAcc = splat(accType, 0.0f);
  SmallVector<QTileState> state(config.qTilesPerTask,
                                QTileState{minusInf, zeroRow, zeroAcc});

  // Last to first: the boundary blocks at the high end (the causal diagonal,
  // the right window edge, the seq_k tail), then the fully visible ones with
  // no mask work, then the boundary blocks at the low end (the left window
  // edge).
  taskKvHead = head;
  if (config.groupsPerKv() > 1)
    taskKvHead =
        arith::DivUIOp::create(b, loc, head, index(config.groupsPerKv()));
  // FP8's descale factors of the task's sequence and K/V head: Q's times
  // K's scales the scores (in the softmax's exponent), V's the output.
  auto loadDescale = [&](std::optional<uint64_t> position) -> Value {
    if (!position)
      return {};
    return LoadDescaleOp::create(b, loc, op.getExtras()[*position], batch,
                                 taskKvHead);
  };
  Value qDescale = loadDescale(op.getQDescale());
  Value kDescale = loadDescale(op.getKDescale());
  scoreFactor = qDescale && kDescale
                    ? arith::MulFOp::create(b, loc, qDescale, kDescale)
                    : qDescale ? qDescale : kDescale;
  Value outFactor = loadDescale(op.getVDescale());
  BlockBounds bounds{range.getBegin(), range.getFullBegin(), range.getFullEnd(),
                     range.getEnd()};
  if (split)
    bounds = splitBounds(b, loc, bounds, split,
                         static_cast<int64_t>(*op.getNumSplits()));
  state = buildKvLoop(bounds.fullEnd, bounds.end, /*masked=*/true, state,
                      qTiles, qRows, batch, head, seqQ, seqK);
  state = buildKvLoop(bounds.fullBegin, bounds.fullEnd, /*masked=*/false,
                      state, qTiles, qRows, batch, head, seqQ, seqK);
  state = buildKvLoop(bounds.begin, bounds.fullBegin, /*masked=*/true, state,
                      qTiles, qRows, batch, head, seqQ, seqK);

  for (auto [tileState, row] : llvm::zip_equal(state, qRows)) {
    if (split) {
      // A part's O, normalized by its own sums, in f32 for the merge.
      auto partType = RankedTensorType::get(
          {config.blockM, config.valueHeadDim}, b.getF32Type());
      auto normalize = NormalizeOp::create(
          b, loc, partType, rowType, tileState.acc, tileState.rowMax,
          tileState.rowSum, softmaxFactor(), outFactor,
          APFloat(config.scaleLog2),
          config.probShift);
      Value workspace = op.getExtras()[*op.getSplitWorkspace()];
      int64_t splits = static_cast<int64_t>(*op.getNumSplits());
      StorePartialOOp::create(b, loc, normalize.getOut(), op.getOut(),
                              workspace, batch, head, row, split,
                              config.gqaPacking, splits, 0);
      MergeSplitsOp::create(b, loc, normalize.getLse(), op.getOut(),
                            op.getLse(), workspace, batch, head, row, split,
                            config.gqaPacking, splits);
      continue;
    }
    auto normalize = NormalizeOp::create(
        b, loc, oTileType, rowType, tileState.acc, tileState.rowMax,
        tileState.rowSum, softmaxFactor(), outFactor,
          APFloat(config.scaleLog2),
        config.probShift);
    // Varlen: the sequence's rows only, from its first.
    SmallVector<Value, 2> span;
    if (qOffset)
      span = {qOffset, seqQ};
    StoreOTileOp::create(b, loc, normalize.getOut(), op.getOut(), tensorBatch,
                         head, row, span, config.gqaPacking);
    if (Value lse = op.getLse())
      StoreLseTileOp::create(b, loc, normalize.getLse(), lse, tensorBatch,
                             head, row, span, config.gqaPacking);
  }
}

SmallVector<QTileState> TileProgramBuilder::buildKvLoop(
    Value first, Value last, bool masked, ArrayRef<QTileState> init,
    ArrayRef<Value> qTiles, ArrayRef<Value> qRows, Value batch, Value head,
    Value seqQ, Value seqK) {
  SmallVector<Value> iterArgs;
  for (const QTileState &tile : init)
    iterArgs.append({tile.rowMax, tile.rowSum, tile.acc});
  Value count = arith::SubIOp::create(b, loc, last, first);
  Value lastBlock = arith::SubIOp::create(b, loc, last, index(1));
  auto loop = scf::ForOp::create(b,
      loc, index(0), count, index(1), iterArgs,
      [&](OpBuilder &body, Location loc, Value iv, ValueRange carried) {
        // Block `last - 1 - iv`: the loop walks the KV blocks backwards.
        Value block = arith::SubIOp::create(body, loc, lastBlock, iv);
        Value kvCol =
            arith::MulIOp::create(body, loc, block, index(config.blockN));
        Type element = getElementTypeOrSelf(op.getK().getType());
        auto kvTileType = RankedTensorType::get(
            {config.blockN, config.headDim}, element);
        // One K and one V tile serve both Q tiles and every packed head.
        // Varlen: the sequence's keys start at its first K/V row.
        Value kvRow = kOffset ? arith::AddIOp::create(body, loc, kvCol, kOffset)
                                    .getResult()
                              : kvCol;
        Value kTile = LoadKvTileOp::create(body, loc, kvTileType, op.getK(),
                                           tensorBatch, taskKvHead, kvRow,
                                           blockTable, Value());
        // With seqused_k the keys past the count are real memory (a cache's
        // unfilled rows), and in a varlen batch the keys past a sequence's
        // end are the next sequence's (or spare rows of the packed tensor):
        // V's rows there are cleared, so that whatever they hold cannot
        // reach O through P·V. (K's are masked in the scores.)
        Value clearFrom;
        if (op.getSequsedK() || op.getCuSeqlensK())
          clearFrom = arith::SubIOp::create(body, loc, seqK, kvCol);
        auto vTileType = RankedTensorType::get(
            {config.blockN, config.valueHeadDim}, element);
        Value vTile = LoadKvTileOp::create(body, loc, vTileType, op.getV(),
                                           tensorBatch, taskKvHead, kvRow,
                                           blockTable, clearFrom);
        SmallVector<Value> yielded;
        for (auto [stage, qTile] : llvm::enumerate(qTiles)) {
          QTileState state{carried[3 * stage], carried[3 * stage + 1],
                           carried[3 * stage + 2]};
          QTileState next =
              buildBlockStep(body, state, qTile, qRows[stage], kTile, vTile,
                             kvCol, masked, batch, head, seqQ, seqK);
          yielded.append({next.rowMax, next.rowSum, next.acc});
        }
        scf::YieldOp::create(body, loc, yielded);
      });
  if (masked)
    loop->setAttr("fa4.masked", b.getUnitAttr());
  SmallVector<QTileState> result;
  for (size_t stage = 0; stage < init.size(); ++stage)
    result.push_back({loop.getResult(3 * stage), loop.getResult(3 * stage + 1),
                      loop.getResult(3 * stage + 2)});
  return result;
}

QTileState TileProgramBuilder::buildBlockStep(OpBuilder &body, QTileState state,
                                              Value qTile, Value qRow,
                                              Value kTile, Value vTile,
                                              Value kvCol, bool masked,
                                              Value batch, Value head,
                                              Value seqQ, Value seqK) {
  // P in V's type, the value MMA's (e4m3 for FP8).
  Type element = getElementTypeOrSelf(vTile.getType());
  auto scoreType = RankedTensorType::get(
      {config.blockM, config.blockN}, body.getF32Type());
  auto probType = RankedTensorType::get(
      {config.blockM, config.blockN}, element);

  Value scores = buildTileScores(body, loc, op, config, scoreType, qTile,
                                 kTile, batch, head, qRow, kvCol, seqQ, seqK,
                                 masked, scoreFactor)
                     .visible;
  auto softmax = OnlineSoftmaxOp::create(body,
      loc, probType, state.rowMax.getType(), state.rowSum.getType(),
      state.rowMax.getType(), scores, state.rowMax, state.rowSum,
      softmaxFactor(), APFloat(config.scaleLog2), APFloat(config.rescaleThreshold),
      config.probShift);
  Type accType = state.acc.getType();
  Value acc = CorrectionOp::create(body, loc, accType, state.acc,
                                        softmax.getAccScale());
  acc = ValueMmaOp::create(body, loc, accType, softmax.getProbs(), vTile, acc);
  return {softmax.getNewRowMax(), softmax.getNewRowSum(), acc};
}

/// The entry op's configuration, kept on the function for the simulator and
/// the later levels once the op itself is gone.
static KernelSpecAttr buildSpec(AttentionOp op, const TileConfig &config) {
  SmallVector<int64_t> argumentPositions, extraPositions;
  for (Value operand : {op.getQ(), op.getK(), op.getV(), op.getOut(), op.getLse()})
    if (operand)
      argumentPositions.push_back(cast<BlockArgument>(operand).getArgNumber());
  // The memrefs the score_mod and mask_mod regions read, and which of them
  // is the block mask.
  for (Value extra : op.getExtras())
    extraPositions.push_back(cast<BlockArgument>(extra).getArgNumber());
  std::optional<int64_t> blockMask, seqUsedK, blockTable;
  if (std::optional<uint64_t> position = op.getBlockMask())
    blockMask = static_cast<int64_t>(*position);
  if (std::optional<uint64_t> position = op.getSequsedK())
    seqUsedK = static_cast<int64_t>(*position);
  if (std::optional<uint64_t> position = op.getBlockTable())
    blockTable = static_cast<int64_t>(*position);
  std::optional<int64_t> cuSeqlensQ, cuSeqlensK;
  if (std::optional<uint64_t> position = op.getCuSeqlensQ())
    cuSeqlensQ = static_cast<int64_t>(*position);
  if (std::optional<uint64_t> position = op.getCuSeqlensK())
    cuSeqlensK = static_cast<int64_t>(*position);
  std::optional<int64_t> numSplits, splitWorkspace;
  if (std::optional<uint64_t> splits = op.getNumSplits())
    numSplits = static_cast<int64_t>(*splits);
  if (std::optional<uint64_t> position = op.getSplitWorkspace())
    splitWorkspace = static_cast<int64_t>(*position);
  auto position = [](std::optional<uint64_t> value) -> std::optional<int64_t> {
    if (value)
      return static_cast<int64_t>(*value);
    return std::nullopt;
  };
  return KernelSpecAttr::get(
      op.getContext(), config.mask, config.windowLeft, config.windowRight,
      llvm::APFloat(config.scale), llvm::APFloat(config.softcap),
      static_cast<bool>(op.getLse()), argumentPositions, extraPositions,
      blockMask, seqUsedK, blockTable, numSplits, splitWorkspace, cuSeqlensQ,
      cuSeqlensK, position(op.getQDescale()), position(op.getKDescale()),
      position(op.getVDescale()));
}

/// Every operand of the entry op is an argument of `func`: the kernel's
/// memrefs are its parameters; the tensors the launch binds one by one (Q,
/// K, V, O, the LSE: the first `distinct` operands) are distinct ones.
static LogicalResult checkOperandsAreArguments(Operation *op,
                                               func::FuncOp func,
                                               unsigned distinct) {
  for (auto [position, operand] : llvm::enumerate(op->getOperands())) {
    auto argument = dyn_cast<BlockArgument>(operand);
    if (!argument || argument.getOwner() != &func.getBody().front())
      return op->emitOpError()
             << "operand #" << position << " must be an argument of @"
             << func.getName() << " (the kernel's memrefs are its parameters)";
  }
  for (unsigned position = 1; position < distinct; ++position)
    for (unsigned earlier = 0; earlier < position; ++earlier)
      if (op->getOperand(earlier) == op->getOperand(position))
        return op->emitOpError()
               << "operands #" << earlier << " and #" << position
               << " are the same argument of @" << func.getName()
               << ": Q, K, V, O (and the LSE) are bound as distinct "
                  "tensors at launch, so each must be an argument of its own";
  return success();
}

namespace {
struct TileAttentionPass
    : public fa4::impl::FA4TileAttentionBase<TileAttentionPass> {
  using FA4TileAttentionBase::FA4TileAttentionBase;

  /// The option is checked once, whatever the input holds.
  LogicalResult initialize(MLIRContext *context) override {
    if (qTilesPerTask < 0 || qTilesPerTask > 2) {
      emitError(UnknownLoc::get(context))
          << "fa4-tile: q-tiles-per-task must be 0 (the chip's), 1 or 2, got "
          << static_cast<int64_t>(qTilesPerTask);
      return failure();
    }
    if (qTileRows != 0 && qTileRows != TileConfig::kBlockM &&
        qTileRows != target::kWideQTileRows) {
      emitError(UnknownLoc::get(context))
          << "fa4-tile: q-tile-rows must be 0 (the chip's), "
          << TileConfig::kBlockM << " or " << target::kWideQTileRows << ", got "
          << static_cast<int64_t>(qTileRows);
      return failure();
    }
    return success();
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<AttentionOp> attentions;
    func.walk([&](AttentionOp op) { attentions.push_back(op); });
    SmallVector<AttentionBackwardOp> backwards;
    func.walk([&](AttentionBackwardOp op) { backwards.push_back(op); });
    // A kernel's function returns nothing, or the destinations it was
    // given (a bufferized entry returns them as its tensors were): the
    // kernel computes nothing else, so another value has no producer left.
    auto checkReturns = [&]() -> LogicalResult {
      for (Block &block : func.getBody())
        if (auto ret = dyn_cast<func::ReturnOp>(block.getTerminator()))
          for (auto [position, value] : llvm::enumerate(ret.getOperands())) {
            auto argument = dyn_cast<BlockArgument>(value);
            if (argument && argument.getOwner() == &func.getBody().front())
              continue;
            return ret.emitOpError()
                   << "result #" << position << " of @" << func.getName()
                   << " is not one of its arguments: a kernel's function "
                      "returns nothing or the destinations it was given";
          }
      return success();
    };
    if (!backwards.empty()) {
      if (backwards.size() + attentions.size() > 1) {
        (attentions.empty() ? backwards[1].getOperation()
                            : attentions[0].getOperation())
                ->emitOpError()
            << "a function holds one attention kernel, found "
            << attentions.size() << " fa4.attention and " << backwards.size()
            << " fa4.attention_backward ops in @" << func.getName()
            << " (the forward and the backward are functions of their own)";
        return signalPassFailure();
      }
      AttentionBackwardOp op = backwards.front();
      // The forward's tile options do not shape the backward's tiles:
      // refused rather than ignored (as fa4c refuses them with --backward).
      for (auto [name, value] :
           {std::pair<StringRef, int64_t>{"q-tiles-per-task", qTilesPerTask},
            {"q-tile-rows", qTileRows},
            {"block-n", blockN}})
        if (value != 0) {
          op.emitOpError()
              << "fa4-tile's " << name << "=" << value
              << " shapes the forward's tiles; the backward's are fixed "
                 "(the schedule's own steps and blocks): leave it at 0";
          return signalPassFailure();
        }
      // (tileAttentionBackward names aliased tensors itself.)
      if (failed(checkOperandsAreArguments(op, func, 0)) ||
          failed(checkReturns()) || failed(tileAttentionBackward(op)))
        return signalPassFailure();
      return;
    }
    if (attentions.empty())
      return;
    if (attentions.size() > 1) {
      attentions[1].emitOpError()
          << "a function holds one attention kernel, found "
          << attentions.size() << " fa4.attention ops in @" << func.getName();
      return signalPassFailure();
    }
    AttentionOp op = attentions.front();
    if (op->getNumResults() || isa<RankedTensorType>(op.getQ().getType())) {
      op.emitOpError() << "on tensors must be bufferized first (the pipeline's "
                          "'bufferize' stage, or one-shot-bufferize)";
      return signalPassFailure();
    }
    if (failed(checkOperandsAreArguments(op, func, op.getLse() ? 5 : 4)) ||
        failed(checkReturns()))
      return signalPassFailure();
    // Rows keep a stale max while it is within the threshold, so P reaches
    // 2^threshold: it must stay finite in the input type P is rounded to.
    Type element = getElementTypeOrSelf(op.getQ().getType());
    int64_t largest = element.isF16() ? 16 : 64;
    if (!(rescaleThreshold >= 0.0) || !(rescaleThreshold < largest)) {
      op.emitOpError() << "rescale-threshold must be in [0, " << largest
                       << ") for " << element
                       << " inputs (P reaches 2^threshold and is rounded to "
                          "the input type), got "
                       << rescaleThreshold;
      return signalPassFailure();
    }

    TileConfig config = TileConfig::get(op, rescaleThreshold);
    // Q tiles per task: the option's, else the module's chip's at these
    // head dims (Blackwell's two, one past head dim 192).
    config.qTilesPerTask =
        qTilesPerTask != 0
            ? int64_t(qTilesPerTask)
            : target::defaultQTilesPerTask(getTargetOrDefault(func),
                                           config.headDim,
                                           config.valueHeadDim);
    // Keys per K/V block: the option's, else the chip's at these head dims.
    const target::ChipInfo &chip = getTargetOrDefault(func);
    int64_t bits = element.getIntOrFloatBitWidth();
    // A paged cache's pages and the blocks must divide one another (a
    // block's rows are whole pages, or a page whole blocks): the default
    // narrows to the widest such block.
    int64_t page = op.getBlockTable()
                       ? cast<MemRefType>(op.getK().getType()).getDimSize(1)
                       : 0;
    auto fitsPages = [&](int64_t keys) {
      return page <= 0 || ShapedType::isDynamic(page) ||
             (page < keys ? keys % page : page % keys) == 0;
    };
    config.blockN = blockN;
    if (blockN == 0) {
      config.blockN = target::defaultBlockN(chip, config.headDim,
                                            config.valueHeadDim, bits);
      // At head dim 256 on Hopper a paged
      // cache's gather or split-KV's merge beside the sixteen-step score MMA
      // and O spills at the default (20-112 bytes at 80, 96 or 128 keys,
      // CUDA 13's ptxas) and not at 64 (but pages of 16: 4-24 bytes, as at
      // other head dims).
      if (chip.family == target::Family::Hopper && config.headDim > 192 &&
          (page > 0 || op.getNumSplits()))
        config.blockN = std::min<int64_t>(config.blockN, 64);
      while (config.blockN > 16 && !fitsPages(config.blockN))
        config.blockN -= 16;
    }
    std::string problem = target::blockNProblem(chip, config.blockN, bits);
    if (!problem.empty()) {
      op.emitOpError() << "block-n: " << problem << " (target " << chip.name
                       << ")";
      return signalPassFailure();
    }
    if (!fitsPages(config.blockN)) {
      op.emitOpError() << "K/V blocks of " << config.blockN
                       << " keys and a paged cache's pages of " << page
                       << " keys must divide one another (block-n)";
      return signalPassFailure();
    }
    // A block mask's entries count blocks of 128 keys.
    if (op.getBlockMask() && config.blockN != TileConfig::kBlockN) {
      op.emitOpError() << "a block_mask counts K/V blocks of "
                       << TileConfig::kBlockN << " keys; this kernel's are "
                       << config.blockN
                       << " (block-n, or the head dims' default)";
      return signalPassFailure();
    }
    if (qTileRows == target::kWideQTileRows) {
      // The task's one Q tile: three consumers' rows on Hopper.
      std::string problem = target::wideQTileProblem(
          chip, bits, config.headDim, config.valueHeadDim, config.blockN,
          op.getNumSplits() || op.getCuSeqlensQ() || op.getBlockTable() ||
              op.getSequsedK() || op.getBlockMask());
      if (problem.empty() && config.qTilesPerTask != 1)
        problem = "a 192-row tile is the task's one Q tile (q-tiles-per-task 1)";
      if (!problem.empty()) {
        op.emitOpError() << "q-tile-rows=" << target::kWideQTileRows << ": "
                         << problem;
        return signalPassFailure();
      }
      config.blockM = target::kWideQTileRows;
    }
    func->setAttr(kSpecAttrName, buildSpec(op, config));
    TileProgramBuilder(op, config).build();
    op.erase();
  }
};
} // namespace
