//===- Backward.cpp - the backward's consumer ops on Hopper ---------------===//
//
// A backward consumer warpgroup holds Sᵀ, Pᵀ, dPᵀ and dSᵀ (its 64 keys ×
// 64 packed query rows) in wgmma's accumulator layout (Warpgroup.cpp), so a
// thread's two rows are keys and its 16 columns packed rows: the LSE and
// delta are held along the columns (one value per column the thread has),
// the mask is taken per column, and the gradients go out by address: dQ's
// parts added with vector f32 reductions, dK and dV stored from the
// fragments. dQ's MMA reads dSᵀ back from shared memory as its transposed
// (M-major) A operand.
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

/// Element i of a fragment belongs to the thread's row (i / 2) mod 2.
static int64_t halfOf(int64_t i) { return (i / 2) % 2; }

static StringRef ptxType(Type type) { return type.isBF16() ? "bf16" : "f16"; }

/// The elements of a per-thread vector.
static SmallVector<Value> elementsOf(OpBuilder &b, Location loc, Value vector) {
  SmallVector<Value> elements;
  int64_t count = cast<VectorType>(vector.getType()).getNumElements();
  for (int64_t i = 0; i < count; ++i)
    elements.push_back(
        vector::ExtractOp::create(b, loc, vector, ArrayRef<int64_t>{i}));
  return elements;
}

static Value vectorOf(OpBuilder &b, Location loc, ArrayRef<Value> elements) {
  return vector::FromElementsOp::create(
      b, loc,
      VectorType::get({static_cast<int64_t>(elements.size())},
                      elements.front().getType()),
      elements);
}

LogicalResult Lowering::lowerBackward(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](LoadRowTileOp load) { return lowerColumnLoad(load); })
      .Case([&](ProbsFromLseOp probs) { return lowerTransposedProbs(probs); })
      .Case([&](SoftmaxGradOp grad) { return lowerTransposedSoftmaxGrad(grad); })
      .Case([&](SoftcapGradOp grad) { return lowerFragmentSoftcapGrad(grad); })
      .Case([&](ConvertTileOp convert) { return lowerFragmentConvert(convert); })
      .Case([&](WarpgroupTransposedMmaOp mma) {
        return lowerWarpgroupTransposedMma(mma);
      })
      .Case([&](AccumulateDqOp accumulate) {
        return lowerAccumulateDq(accumulate);
      })
      .Case([&](StoreKvTileOp store) { return lowerKvStore(store); })
      .Default([](Operation *) { return failure(); });
}

LogicalResult Lowering::lowerColumnLoad(LoadRowTileOp load) {
  if (!load.getTransposed())
    return load.emitOpError()
           << "loads rows for a tile held row by row; the Hopper lowering "
              "reads them along a transposed tile's columns only "
              "(transposed)";
  auto found = kernel.globalPointers.find(load.getSource());
  if (found == kernel.globalPointers.end())
    return load.emitOpError() << "reads a memref that is not a kernel "
                                 "parameter";
  auto type = cast<MemRefType>(load.getSource().getType());
  int64_t heads = type.getDimSize(1), ratio = load.getGqaRatio();
  int64_t columns =
      cast<RankedTensorType>(load.getResult().getType()).getDimSize(0);
  Type f32Type = b.getF32Type();
  Value seqQ = toIndex(kernel.seqQ);
  Value first = arith::AddIOp::create(b, loc(), lookup(load.getRow()),
                                      fragmentColumn());
  Value headBase =
      arith::MulIOp::create(b, loc(), lookup(load.getHead()), index(ratio));
  SmallVector<Value> values;
  for (int64_t k = 0; k < columns / 4; ++k) {
    Value packed = arith::AddIOp::create(b, loc(), first,
                                         index(8 * (k / 2) + k % 2));
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

LogicalResult Lowering::lowerTransposedMask(MaskOp mask) {
  if (!mask.getMaskMod().empty())
    return mask.emitOpError()
           << "mask_mod regions are not lowered for sm_90a yet (the Hopper "
              "schedule runs them in fa4-sim only)";
  MaskModBounds bounds = maskBounds(mask.getMask(), mask.getWindowLeft(),
                                    mask.getWindowRight(), mask.getMaskMod());
  SmallVector<Value> s = elementsOf(b, loc(), lookup(mask.getScores()));
  int64_t ratio = mask.getGqaRatio();
  Value seqQ = lookup(mask.getSeqQ()), seqK = lookup(mask.getSeqK());
  // The tile's rows are keys from `col`; its columns packed rows from
  // `row`. Each of the thread's columns sees keys [low, high).
  Value keys[2];
  for (int64_t half = 0; half < 2; ++half)
    keys[half] = arith::AddIOp::create(b, loc(), lookup(mask.getCol()),
                                       fragmentRow(half));
  Value first =
      arith::AddIOp::create(b, loc(), lookup(mask.getRow()), fragmentColumn());
  int64_t columns = static_cast<int64_t>(s.size()) / 2;
  SmallVector<Value> low, high;
  for (int64_t k = 0; k < columns; ++k) {
    Value packed = arith::AddIOp::create(b, loc(), first,
                                         index(8 * (k / 2) + k % 2));
    Value position = arith::DivUIOp::create(b, loc(), packed, index(ratio));
    Value end;
    low.push_back(emitKeyEdges(position, bounds.bounds, seqQ, seqK, end));
    high.push_back(end);
  }
  for (auto [i, element] : llvm::enumerate(s)) {
    int64_t k = fragmentColumnOf(i);
    Value key = keys[halfOf(i)];
    Value visible = arith::AndIOp::create(
        b, loc(),
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sge, key, low[k]),
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::slt, key,
                              high[k]));
    element = arith::SelectOp::create(b, loc(), visible, element,
                                      f32(kMinusInf));
  }
  mapping.map(mask.getResult(), vectorOf(b, loc(), s));
  return success();
}

LogicalResult Lowering::lowerTransposedProbs(ProbsFromLseOp probs) {
  if (!probs.getTransposed())
    return probs.emitOpError() << "is lowered on transposed tiles only";
  SmallVector<Value> s = elementsOf(b, loc(), lookup(probs.getScores()));
  SmallVector<Value> lse = elementsOf(b, loc(), lookup(probs.getLse()));
  float scaleLog2 = probs.getScaleLog2().convertToFloat();
  // Per column: -lse·log2(e), and whether the row saw no key (every P 0).
  SmallVector<Value> offset, empty;
  for (Value value : lse) {
    offset.push_back(arith::MulFOp::create(b, loc(), value,
                                           f32(-static_cast<float>(kLog2E))));
    empty.push_back(arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ,
                                          value, f32(kMinusInf)));
  }
  for (auto [i, element] : llvm::enumerate(s)) {
    int64_t k = fragmentColumnOf(i);
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
  for (auto [i, element] : llvm::enumerate(p))
    element = arith::MulFOp::create(
        b, loc(), element,
        arith::SubFOp::create(b, loc(), dp[i], delta[fragmentColumnOf(i)]));
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

LogicalResult
Lowering::lowerWarpgroupTransposedMma(WarpgroupTransposedMmaOp mma) {
  SmemType a = mma.getLhs().getType(), bType = mma.getRhs().getType();
  int64_t n = cast<RankedTensorType>(mma.getResult().getType()).getDimSize(1);
  int64_t firstBox = mma.getColumnOffset() / kBoxColumns;
  int64_t accumulators = n / 2;
  // Both operands MN-major, as the forward's V: rows of the K dimension
  // (keys), 128-byte swizzled lines of M (A: 64 queries, one box) or N (B:
  // the head dim, 64-column boxes the leading-dimension repeats); 8-row
  // groups 1024 bytes apart. B starts row_offset lines into each box.
  uint64_t bBits = wgmma::smemDescriptorTemplate(
      boxBytes(bType), kSwizzleAtomBytes, wgmma::Swizzle::Bytes128);
  Value bBase = wgmmaStageDescriptor(
      mma.getRhs(), mma.getRhsCount(),
      firstBox * boxBytes(bType) + mma.getRowOffset() * kSwizzleLineBytes,
      bBits);
  // The A operand's stages along K: the lhs, then `then`'s; each its own
  // descriptor, 16 rows (keys) a step.
  SmallVector<std::pair<Value, int64_t>, 2> parts;
  for (auto [buffer, count] : {std::pair{mma.getLhs(), mma.getLhsCount()},
                               {mma.getLhsNext(), mma.getLhsNextCount()}}) {
    if (!buffer)
      continue;
    auto type = cast<SmemType>(buffer.getType());
    uint64_t aBits = wgmma::smemDescriptorTemplate(
        boxBytes(type), kSwizzleAtomBytes, wgmma::Swizzle::Bytes128);
    parts.push_back(
        {wgmmaStageDescriptor(buffer, count, 0, aBits), type.getRows()});
  }
  std::string instruction = "wgmma.mma_async.sync.aligned.m64n" +
                            std::to_string(n) + "k16.f32." +
                            ptxType(a.getElementType()).str() + "." +
                            ptxType(bType.getElementType()).str() + " ";
  SmallVector<Value> inputs;
  std::string body, constraintsIn;
  int64_t step = 0;
  for (auto [aBase, rows] : parts)
    for (int64_t k = 0; k < rows / kWgmmaK; ++k, ++step) {
      inputs.push_back(arith::AddIOp::create(
          b, loc(), aBase, i64((k * kWgmmaK * kSwizzleLineBytes) >> 4)));
      inputs.push_back(arith::AddIOp::create(
          b, loc(), bBase, i64((step * kWgmmaK * kSwizzleLineBytes) >> 4)));
      constraintsIn += (step ? ",l,l" : "l,l");
      std::string aDesc = "$" + std::to_string(accumulators + 2 * step);
      std::string bDesc = "$" + std::to_string(accumulators + 2 * step + 1);
      // The first step overwrites the accumulator; both operands
      // transposed (MN-major).
      body += instruction + wgmmaAccumulators(accumulators) + ", " + aDesc +
              ", " + bDesc + (step ? ", one" : ", zero") + ", 1, 1, 1, 1;\n\t";
    }
  Value result = emitWarpgroupMma(accumulators, inputs, constraintsIn, body,
                                  /*tied=*/false, mma.getAsync());
  mapping.map(mma.getResult(), unpackAccumulators(result, accumulators));
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
  for (int64_t half = 0; half < 2; ++half) {
    Value packed = arith::AddIOp::create(b, loc(), lookup(accumulate.getRow()),
                                         fragmentRow(half));
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
      if (static_cast<int64_t>(run.half) != half)
        continue;
      Value address = LLVM::GEPOp::create(
          b, loc(), found->second.getType(), f32Type, found->second,
          ValueRange{add64(rowBase, add64(column, wide(run.column)))});
      SmallVector<Value> operands{address};
      for (int64_t e = 0; e < run.length; ++e)
        operands.push_back(vector::ExtractOp::create(
            b, loc(), values, ArrayRef<int64_t>{run.first + e}));
      // Two adjacent f32 added at once (sm_90's vector reduction); the
      // K/V tasks of a query block add in any order.
      LLVM::InlineAsmOp::create(
          b, loc(), TypeRange(), operands,
          "red.global.add.v2.f32 [$0], {$1, $2};", "l,f,f",
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
  for (int64_t half = 0; half < 2; ++half) {
    Value key = arith::AddIOp::create(b, loc(), lookup(store.getCol()),
                                      fragmentRow(half));
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
    storeRuns(values, half, [&](Value column) -> Value {
      return LLVM::GEPOp::create(b, loc(), pointer->second.getType(), element,
                                 pointer->second,
                                 ValueRange{add64(rowBase, column)});
    });
  }
  return success();
}
