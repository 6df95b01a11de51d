//===- Backward.cpp - the backward's pointwise ops and stores -------------===//
//
// The backward's warpgroups hold Sᵀ, Pᵀ, dPᵀ and dSᵀ transposed: a tile's
// rows are keys, its columns packed query rows, in the family's layout — on
// Hopper wgmma's accumulator fragment (a thread's two rows, 16 columns of a
// 64-column tile), on Blackwell a TMEM row (a thread's one row, every
// column of the chunk). The LSE and delta are held along the columns (one
// value per column the thread has: FamilyLowering::threadColumns), the mask
// is taken per column, and the gradients go out by address: dQ's parts
// added with vector f32 reductions, dK and dV stored from the thread's rows
// (FamilyLowering::threadRows and elementRuns). The families' MMAs are
// their own (Hopper/Warpgroup.cpp, Blackwell/TensorCore.cpp).
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "fa4/Support/Descriptors.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

static constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
static constexpr double kLog2E = 1.4426950408889634;

/// The elements of a per-thread vector.
static SmallVector<Value> elementsOf(OpBuilder &b, Location loc, Value vector) {
  SmallVector<Value> elements;
  int64_t count = cast<VectorType>(vector.getType()).getNumElements();
  for (int64_t i = 0; i < count; ++i)
    elements.push_back(
        vector::ExtractOp::create(b, loc, vector, ArrayRef<int64_t>{i}));
  return elements;
}


LogicalResult Lowering::lowerBackward(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](LoadRowTileOp load) { return lowerColumnLoad(load); })
      .Case([&](ProbsFromLseOp probs) { return lowerTransposedProbs(probs); })
      .Case([&](SoftmaxGradOp grad) { return lowerTransposedSoftmaxGrad(grad); })
      .Case([&](SoftcapGradOp grad) { return lowerFragmentSoftcapGrad(grad); })
      .Case([&](ScoreModGradOp grad) { return lowerTransposedScoreModGrad(grad); })
      .Case([&](ConvertTileOp convert) { return lowerFragmentConvert(convert); })
      .Case([&](AccumulateDqOp accumulate) {
        return lowerAccumulateDq(accumulate);
      })
      .Case([&](StoreKvTileOp store) { return lowerKvStore(store); })
      .Default([](Operation *) { return failure(); });
}

LogicalResult Lowering::lowerColumnLoad(LoadRowTileOp load) {
  int64_t columns =
      cast<RankedTensorType>(load.getResult().getType()).getDimSize(0);
  // Along a transposed tile's columns, or, in a single-warp role (the
  // loader copying a step's statistics into shared memory), spread over
  // the warp's lanes.
  SmallVector<Value> positions;
  if (load.getTransposed() && onlyElectedWaits) {
    return load.emitOpError()
           << "reads rows along a transposed tile's columns in a single-warp "
              "role, which holds no such tile";
  } else if (load.getTransposed()) {
    positions = kernel.family->threadColumns(*this, columns);
  } else if (onlyElectedWaits && columns % 32 == 0) {
    positions = laneStrided(columns);
  } else {
    return load.emitOpError()
           << "loads rows for a tile held row by row; the backward's "
              "lowering reads them along a transposed tile's columns "
              "(transposed) or, a multiple of 32 of them, across a "
              "single-warp role's lanes";
  }
  auto found = kernel.globalPointers.find(load.getSource());
  if (found == kernel.globalPointers.end())
    return load.emitOpError() << "reads a memref that is not a kernel "
                                 "parameter";
  auto type = cast<MemRefType>(load.getSource().getType());
  int64_t heads = type.getDimSize(1), ratio = load.getGqaRatio();
  Type f32Type = b.getF32Type();
  Value seqQ = toIndex(kernel.seqQ);
  Value headBase =
      arith::MulIOp::create(b, loc(), lookup(load.getHead()), index(ratio));
  SmallVector<Value> values;
  for (Value column : positions) {
    Value packed =
        arith::AddIOp::create(b, loc(), lookup(load.getRow()), column);
    Value position = arith::DivUIOp::create(b, loc(), packed, index(ratio));
    Value head = arith::AddIOp::create(
        b, loc(), headBase,
        arith::RemUIOp::create(b, loc(), packed, index(ratio)));
    Value inside = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                         position, seqQ);
    auto branch =
        scf::IfOp::create(b, loc(), TypeRange{f32Type}, inside, true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.thenBlock());
      // [batch, heads, seq_q], dense.
      Value offset = add64(
          mul64(add64(mul64(wide(lookup(load.getBatch())), i64(heads)),
                      wide(head)),
                wide(seqQ)),
          wide(position));
      Value address = LLVM::GEPOp::create(b, loc(), found->second.getType(),
                                          f32Type, found->second,
                                          ValueRange{offset});
      scf::YieldOp::create(b, loc(),
                           ValueRange{LLVM::LoadOp::create(b, loc(), f32Type,
                                                           address)});
      b.setInsertionPointToStart(branch.elseBlock());
      scf::YieldOp::create(b, loc(), ValueRange{f32(0.0f)});
    }
    values.push_back(branch.getResult(0));
  }
  mapping.map(load.getResult(), vectorOf(b, loc(), values));
  return success();
}

SmallVector<Lowering::TransposedIndices>
Lowering::transposedIndices(Region &region, unsigned queryArgument,
                            Value batch, Value head, Value row, Value col,
                            int64_t gqaRatio, Value seqQ, Value seqK,
                            int64_t tileColumns, int64_t elements) {
  const FamilyLowering &family = *kernel.family;
  SmallVector<Value, 2> keys;
  for (Value threadRow : family.threadRows(*this))
    keys.push_back(arith::AddIOp::create(b, loc(), col, threadRow));
  SmallVector<RowPositions> columns;
  SmallVector<Value> queries;
  for (Value column : family.threadColumns(*this, tileColumns)) {
    Value packed = arith::AddIOp::create(b, loc(), row, column);
    columns.push_back(emitRowPositions(region, queryArgument, packed, head,
                                       gqaRatio, seqQ, seqK));
    queries.push_back(
        arith::DivUIOp::create(b, loc(), packed, index(gqaRatio)));
  }
  SmallVector<TransposedIndices> result;
  for (int64_t i = 0; i < elements; ++i) {
    const RowPositions &query = columns[family.columnSlot(i)];
    Value key = keys[family.rowSlot(i)];
    TransposedIndices indices;
    indices.leading = {batch, query.queryHead, query.query,
                       query.lastKey ? arith::MinSIOp::create(
                                           b, loc(), key, query.lastKey)
                                           .getResult()
                                     : key};
    indices.inside = arith::AndIOp::create(
        b, loc(),
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::slt,
                              queries[family.columnSlot(i)], seqQ),
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::slt, key, seqK));
    result.push_back(std::move(indices));
  }
  return result;
}

LogicalResult Lowering::lowerTransposedScoreMod(ScoreModOp scoreMod) {
  SmallVector<Value> s = elementsOf(b, loc(), lookup(scoreMod.getScores()));
  int64_t tileColumns =
      cast<RankedTensorType>(scoreMod.getResult().getType()).getDimSize(1);
  SmallVector<TransposedIndices> indices = transposedIndices(
      scoreMod.getBody(), /*queryArgument=*/3, lookup(scoreMod.getBatch()),
      lookup(scoreMod.getHead()), lookup(scoreMod.getRow()),
      lookup(scoreMod.getCol()), scoreMod.getGqaRatio(),
      lookup(scoreMod.getSeqQ()), lookup(scoreMod.getSeqK()), tileColumns,
      static_cast<int64_t>(s.size()));
  Value scale = f32(scoreMod.getScale().convertToFloat());
  if (Value factor = scoreMod.getFactor())
    scale = arith::MulFOp::create(b, loc(), scale, lookup(factor));
  // Outside the sequences a score is only scaled (the op's rule): a query
  // row past seq_q enters the MMAs with an LSE of 0 and dO of 0, so its P
  // must stay what an unmodified score gives — a region's value there (a
  // bias growing with the position) could overflow P's 16 bits and make
  // 0 · inf of the padding.
  for (auto [i, element] : llvm::enumerate(s)) {
    Value scaled = arith::MulFOp::create(b, loc(), element, scale,
                                         arith::FastMathFlags::contract);
    SmallVector<Value, 5> leading{scaled};
    leading.append(indices[i].leading.begin(), indices[i].leading.end());
    FailureOr<Value> modded = emitModRegion(scoreMod, scoreMod.getBody(),
                                            leading, scoreMod.getExtras());
    if (failed(modded))
      return failure();
    element = arith::SelectOp::create(b, loc(), indices[i].inside, *modded,
                                      scaled);
  }
  mapping.map(scoreMod.getResult(), vectorOf(b, loc(), s));
  return success();
}

/// dS · f'(s · scale), with f' the region fa4-tile derived from the
/// score_mod: 0 outside the sequences and wherever dS is 0 (a masked
/// score), whatever f' gives there (an infinite slope times a zero
/// gradient is not a NaN here).
LogicalResult Lowering::lowerTransposedScoreModGrad(ScoreModGradOp grad) {
  if (!grad.getTransposed())
    return grad.emitOpError() << "is lowered on transposed tiles only";
  SmallVector<Value> g = elementsOf(b, loc(), lookup(grad.getGrad()));
  SmallVector<Value> s = elementsOf(b, loc(), lookup(grad.getScores()));
  int64_t tileColumns =
      cast<RankedTensorType>(grad.getResult().getType()).getDimSize(1);
  SmallVector<TransposedIndices> indices = transposedIndices(
      grad.getBody(), /*queryArgument=*/3, lookup(grad.getBatch()),
      lookup(grad.getHead()), lookup(grad.getRow()), lookup(grad.getCol()),
      grad.getGqaRatio(), lookup(grad.getSeqQ()), lookup(grad.getSeqK()),
      tileColumns, static_cast<int64_t>(g.size()));
  Value scale = f32(grad.getScale().convertToFloat());
  for (auto [i, element] : llvm::enumerate(g)) {
    SmallVector<Value, 5> leading{arith::MulFOp::create(
        b, loc(), s[i], scale, arith::FastMathFlags::contract)};
    leading.append(indices[i].leading.begin(), indices[i].leading.end());
    FailureOr<Value> slope =
        emitModRegion(grad, grad.getBody(), leading, grad.getExtras());
    if (failed(slope))
      return failure();
    Value keep = arith::AndIOp::create(
        b, loc(), indices[i].inside,
        arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::UNE, element,
                              f32(0.0f)));
    element = arith::SelectOp::create(
        b, loc(), keep, arith::MulFOp::create(b, loc(), element, *slope),
        f32(0.0f));
  }
  mapping.map(grad.getResult(), vectorOf(b, loc(), g));
  return success();
}

LogicalResult Lowering::lowerTransposedMask(MaskOp mask) {
  MaskModBounds bounds = maskBounds(mask.getMask(), mask.getWindowLeft(),
                                    mask.getWindowRight(), mask.getMaskMod());
  SmallVector<Value> s = elementsOf(b, loc(), lookup(mask.getScores()));
  int64_t ratio = mask.getGqaRatio();
  Value seqQ = lookup(mask.getSeqQ()), seqK = lookup(mask.getSeqK());
  // The tile's rows are keys from `col`; its columns packed rows from
  // `row`. Each of the thread's columns sees keys [low, high).
  const FamilyLowering &family = *kernel.family;
  SmallVector<Value, 2> keys;
  for (Value row : family.threadRows(*this))
    keys.push_back(
        arith::AddIOp::create(b, loc(), lookup(mask.getCol()), row));
  int64_t tileColumns =
      cast<RankedTensorType>(mask.getResult().getType()).getDimSize(1);
  SmallVector<Value> low, high;
  for (Value column : family.threadColumns(*this, tileColumns)) {
    Value packed =
        arith::AddIOp::create(b, loc(), lookup(mask.getRow()), column);
    Value position = arith::DivUIOp::create(b, loc(), packed, index(ratio));
    Value end;
    low.push_back(emitKeyEdges(position, bounds.bounds, seqQ, seqK, end));
    high.push_back(end);
  }
  for (auto [i, element] : llvm::enumerate(s)) {
    int64_t k = family.columnSlot(i);
    Value key = keys[family.rowSlot(i)];
    Value visible = arith::AndIOp::create(
        b, loc(),
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sge, key, low[k]),
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::slt, key,
                              high[k]));
    element = arith::SelectOp::create(b, loc(), visible, element,
                                      f32(kMinusInf));
  }
  // The part of a mask_mod the bounds do not capture, per score, on
  // positions clamped into the sequences (as the forward's softmax runs it).
  if (!bounds.exact) {
    SmallVector<TransposedIndices> indices = transposedIndices(
        mask.getMaskMod(), /*queryArgument=*/2, lookup(mask.getBatch()),
        lookup(mask.getHead()), lookup(mask.getRow()), lookup(mask.getCol()),
        ratio, seqQ, seqK, tileColumns, static_cast<int64_t>(s.size()));
    for (auto [i, element] : llvm::enumerate(s)) {
      FailureOr<Value> visible = emitModRegion(
          mask, mask.getMaskMod(), indices[i].leading, mask.getExtras());
      if (failed(visible))
        return failure();
      element = arith::SelectOp::create(b, loc(), *visible, element,
                                        f32(kMinusInf));
    }
  }
  mapping.map(mask.getResult(), vectorOf(b, loc(), s));
  return success();
}

/// Whether a thread's elements pair up for packed f32 arithmetic: the
/// family has it, and elements 2j and 2j + 1 sit in adjacent column slots
/// (Blackwell's TMEM rows: element i in column i).
static bool pairsColumns(const FamilyLowering &family, int64_t elements) {
  if (!family.packsF32() || elements % 2 != 0)
    return false;
  for (int64_t i = 0; i < elements; i += 2)
    if (family.columnSlot(i) % 2 != 0 ||
        family.columnSlot(i + 1) != family.columnSlot(i) + 1)
      return false;
  return true;
}

/// vector<2xf32> of two scalars, and back.
static Value pairOf(OpBuilder &b, Location loc, Value lo, Value hi) {
  return vector::FromElementsOp::create(
      b, loc, VectorType::get({2}, b.getF32Type()), ValueRange{lo, hi});
}
static Value halfOf(OpBuilder &b, Location loc, Value pair, int64_t i) {
  return vector::ExtractOp::create(b, loc, pair, ArrayRef<int64_t>{i});
}

LogicalResult Lowering::lowerTransposedProbs(ProbsFromLseOp probs) {
  if (!probs.getTransposed())
    return probs.emitOpError() << "is lowered on transposed tiles only";
  SmallVector<Value> s = elementsOf(b, loc(), lookup(probs.getScores()));
  SmallVector<Value> lse = elementsOf(b, loc(), lookup(probs.getLse()));
  float scaleLog2 = probs.getScaleLog2().convertToFloat();
  const FamilyLowering &family = *kernel.family;
  if (pairsColumns(family, static_cast<int64_t>(s.size())) &&
      lse.size() % 2 == 0) {
    // Two elements an instruction on the FMA pipe (FMUL2, FFMA2), as the
    // forward's softmax: s·scale_log2 - lse·log2(e) for a pair of columns.
    // A row that saw no key (LSE -inf) needs P = 0, not -inf·-log2(e) =
    // +inf added to its scores: its offset is capped at the largest float
    // (NaN kept), and as the backward hides exactly the keys the forward
    // did, every score of such a row is -inf here, and -inf + FLT_MAX
    // gives P = 0 with no compare and select per element.
    auto pairType = VectorType::get({2}, b.getF32Type());
    auto splat = [&](float value) -> Value {
      return arith::ConstantOp::create(
          b, loc(), DenseElementsAttr::get(pairType, value));
    };
    SmallVector<Value> offsetPairs;
    for (size_t k = 0; k < lse.size(); k += 2)
      offsetPairs.push_back(arith::MinimumFOp::create(
          b, loc(),
          arith::MulFOp::create(b, loc(), pairOf(b, loc(), lse[k], lse[k + 1]),
                                splat(-static_cast<float>(kLog2E))),
          splat(std::numeric_limits<float>::max())));
    for (size_t i = 0; i < s.size(); i += 2) {
      int64_t k = family.columnSlot(static_cast<int64_t>(i));
      Value x = LLVM::FMAOp::create(b, loc(), pairOf(b, loc(), s[i], s[i + 1]),
                                    splat(scaleLog2), offsetPairs[k / 2]);
      for (int64_t h = 0; h < 2; ++h)
        s[i + h] = ex2(halfOf(b, loc(), x, h));
    }
    mapping.map(probs.getResult(), vectorOf(b, loc(), s));
    return success();
  }
  // Per column: -lse·log2(e), and whether the row saw no key (every P 0).
  SmallVector<Value> offset, empty;
  for (Value value : lse) {
    offset.push_back(arith::MulFOp::create(b, loc(), value,
                                           f32(-static_cast<float>(kLog2E))));
    empty.push_back(arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ,
                                          value, f32(kMinusInf)));
  }
  for (auto [i, element] : llvm::enumerate(s)) {
    int64_t k = family.columnSlot(i);
    Value p = ex2(LLVM::FMAOp::create(b, loc(), element, f32(scaleLog2),
                                      offset[k]));
    element = arith::SelectOp::create(b, loc(), empty[k], f32(0.0f), p);
  }
  mapping.map(probs.getResult(), vectorOf(b, loc(), s));
  return success();
}

LogicalResult Lowering::lowerTransposedSoftmaxGrad(SoftmaxGradOp grad) {
  if (!grad.getTransposed())
    return grad.emitOpError() << "is lowered on transposed tiles only";
  SmallVector<Value> p = elementsOf(b, loc(), lookup(grad.getProbs()));
  SmallVector<Value> dp = elementsOf(b, loc(), lookup(grad.getDprobs()));
  SmallVector<Value> delta = elementsOf(b, loc(), lookup(grad.getDelta()));
  const FamilyLowering &family = *kernel.family;
  if (pairsColumns(family, static_cast<int64_t>(p.size()))) {
    // P ∘ (dP − delta) a pair at a time (FADD2, FMUL2).
    for (size_t i = 0; i < p.size(); i += 2) {
      int64_t k = family.columnSlot(static_cast<int64_t>(i));
      Value product = arith::MulFOp::create(
          b, loc(), pairOf(b, loc(), p[i], p[i + 1]),
          arith::SubFOp::create(b, loc(), pairOf(b, loc(), dp[i], dp[i + 1]),
                                pairOf(b, loc(), delta[k], delta[k + 1])));
      p[i] = halfOf(b, loc(), product, 0);
      p[i + 1] = halfOf(b, loc(), product, 1);
    }
    mapping.map(grad.getResult(), vectorOf(b, loc(), p));
    return success();
  }
  for (auto [i, element] : llvm::enumerate(p))
    element = arith::MulFOp::create(
        b, loc(), element,
        arith::SubFOp::create(b, loc(), dp[i],
                              delta[family.columnSlot(i)]));
  mapping.map(grad.getResult(), vectorOf(b, loc(), p));
  return success();
}

LogicalResult Lowering::lowerFragmentSoftcapGrad(SoftcapGradOp grad) {
  SmallVector<Value> g = elementsOf(b, loc(), lookup(grad.getGrad()));
  SmallVector<Value> capped = elementsOf(b, loc(), lookup(grad.getCapped()));
  float inverse = 1.0f / grad.getCap().convertToFloat();
  // g · (1 − t²), t = capped / cap.
  for (auto [i, element] : llvm::enumerate(g)) {
    Value t = arith::MulFOp::create(b, loc(), capped[i], f32(inverse));
    Value slope = LLVM::FMAOp::create(
        b, loc(), arith::NegFOp::create(b, loc(), t), t, f32(1.0f));
    element = arith::MulFOp::create(b, loc(), element, slope);
  }
  mapping.map(grad.getResult(), vectorOf(b, loc(), g));
  return success();
}

Value Lowering::packHalves(Value values, Type element) {
  SmallVector<Value> wide = elementsOf(b, loc(), values);
  std::string instruction =
      element.isBF16() ? "cvt.rn.bf16x2.f32" : "cvt.rn.f16x2.f32";
  SmallVector<Value> words;
  for (size_t i = 0; i + 1 < wide.size(); i += 2)
    words.push_back(
        LLVM::InlineAsmOp::create(
            b, loc(), b.getI32Type(), ValueRange{wide[i + 1], wide[i]},
            instruction + " $0, $1, $2;", "=r,f,f",
            /*has_side_effects=*/false, false,
            LLVM::tailcallkind::TailCallKind::None,
            LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
            ArrayAttr())
            .getResult(0));
  Value packed = vectorOf(b, loc(), words);
  return vector::BitCastOp::create(
      b, loc(),
      VectorType::get({static_cast<int64_t>(wide.size())}, element), packed);
}

LogicalResult Lowering::lowerFragmentConvert(ConvertTileOp convert) {
  Value values = lookup(convert.getTile());
  auto from = cast<VectorType>(values.getType());
  if (!from.getElementType().isF32() || from.getNumElements() % 2 != 0)
    return convert.emitOpError()
           << "converts fragment tiles of f32 pairs only, got " << from;
  float scale = convert.getScale().convertToFloat();
  if (scale != 1.0f)
    values = arith::MulFOp::create(
        b, loc(), values,
        arith::ConstantOp::create(
            b, loc(), DenseElementsAttr::get(from, b.getF32FloatAttr(scale))));
  Type element = getElementTypeOrSelf(convert.getResult().getType());
  mapping.map(convert.getResult(),
              element.isF32() ? values : packHalves(values, element));
  return success();
}

LogicalResult Lowering::lowerAccumulateDq(AccumulateDqOp accumulate) {
  Value dest = accumulate.getDest();
  auto found = kernel.globalPointers.find(dest);
  if (found == kernel.globalPointers.end())
    return accumulate.emitOpError()
           << "adds to a memref that is not a kernel parameter";
  auto type = cast<MemRefType>(dest.getType());
  int64_t heads = type.getDimSize(2), dim = type.getDimSize(3);
  int64_t ratio = accumulate.getGqaRatio();
  Value values = lookup(accumulate.getTile());
  Value seqQ = toIndex(kernel.seqQ);
  Type f32Type = b.getF32Type();
  for (auto [half, row] : llvm::enumerate(kernel.family->threadRows(*this))) {
    Value packed =
        arith::AddIOp::create(b, loc(), lookup(accumulate.getRow()), row);
    Value position = arith::DivUIOp::create(b, loc(), packed, index(ratio));
    Value head = arith::AddIOp::create(
        b, loc(),
        arith::MulIOp::create(b, loc(), lookup(accumulate.getHead()),
                              index(ratio)),
        arith::RemUIOp::create(b, loc(), packed, index(ratio)));
    Value inside = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                         position, seqQ);
    auto branch = scf::IfOp::create(b, loc(), inside, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    // [batch, seq_q, heads, head_dim], dense.
    Value rowBase = mul64(
        add64(mul64(add64(mul64(wide(lookup(accumulate.getBatch())),
                                wide(seqQ)),
                          wide(position)),
                    i64(heads)),
              wide(head)),
        i64(dim));
    int64_t elements = cast<VectorType>(values.getType()).getNumElements();
    Value column = i64(static_cast<int64_t>(accumulate.getColumn()));
    for (const FamilyLowering::ElementRun &run :
         kernel.family->elementRuns(*this, elements)) {
      if (run.half != half)
        continue;
      Value address = LLVM::GEPOp::create(
          b, loc(), found->second.getType(), f32Type, found->second,
          ValueRange{add64(rowBase, add64(column, wide(run.column)))});
      SmallVector<Value> operands{address};
      for (int64_t e = 0; e < run.length; ++e)
        operands.push_back(vector::ExtractOp::create(
            b, loc(), values, ArrayRef<int64_t>{run.first + e}));
      // A run's adjacent f32 added at once (sm_90's vector reductions: two
      // on Hopper's fragments, four on Blackwell's rows); the K/V tasks of
      // a query block add in any order.
      std::string reduction = "red.global.add";
      std::string list, constraints = "l";
      for (int64_t e = 0; e < run.length; ++e) {
        list += (e ? ", $" : "$") + std::to_string(e + 1);
        constraints += ",f";
      }
      if (run.length > 1)
        reduction += ".v" + std::to_string(run.length);
      LLVM::InlineAsmOp::create(
          b, loc(), TypeRange(), operands,
          reduction + ".f32 [$0], " +
              (run.length > 1 ? "{" + list + "}" : list) + ";",
          constraints,
          /*has_side_effects=*/true, false,
          LLVM::tailcallkind::TailCallKind::None,
          LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
          ArrayAttr());
    }
  }
  return success();
}

LogicalResult Lowering::lowerKvStore(StoreKvTileOp store) {
  Value dest = store.getDest();
  auto pointer = kernel.globalPointers.find(dest);
  auto strides = kernel.strides.find(dest);
  if (pointer == kernel.globalPointers.end() || strides == kernel.strides.end())
    return store.emitOpError()
           << "stores to a memref that is not a kernel parameter";
  Type element = cast<MemRefType>(dest.getType()).getElementType();
  Value values = lookup(store.getTile());
  Value seqK = toIndex(kernel.seqK);
  for (auto [half, row] : llvm::enumerate(kernel.family->threadRows(*this))) {
    Value key = arith::AddIOp::create(b, loc(), lookup(store.getCol()), row);
    Value inside =
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult, key, seqK);
    auto branch = scf::IfOp::create(b, loc(), inside, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    const std::array<Value, 3> &s = strides->second;
    Value rowBase = add64(
        add64(mul64(wide(lookup(store.getBatch())), s[0]),
              mul64(wide(key), s[1])),
        mul64(wide(lookup(store.getHead())), s[2]));
    storeRuns(values, static_cast<unsigned>(half), [&](Value column) -> Value {
      return LLVM::GEPOp::create(b, loc(), pointer->second.getType(), element,
                                 pointer->second,
                                 ValueRange{add64(rowBase, column)});
    });
  }
  return success();
}
