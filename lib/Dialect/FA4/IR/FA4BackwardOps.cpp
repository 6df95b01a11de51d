//===- FA4BackwardOps.cpp - the backward pass's ops and their verifiers ---===//
//
// fa4.attention_backward (level A) and the backward tile program's ops
// (level B). The entry op holds the forward's variant to the forward's own
// rules (Verify.h), so that a gradient is never asked of an attention
// fa4.attention would refuse.
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "Verify.h"

#include "fa4/Support/AttentionMath.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using mlir::fa4::detail::shapeText;

static int64_t dimOf(Value value, unsigned index) {
  return cast<ShapedType>(value.getType()).getDimSize(index);
}

//===----------------------------------------------------------------------===//
// AttentionBackwardOp
//===----------------------------------------------------------------------===//

int64_t AttentionBackwardOp::getHeadDim() { return dimOf(getQ(), 3); }
int64_t AttentionBackwardOp::getNumQueryHeads() { return dimOf(getQ(), 2); }
int64_t AttentionBackwardOp::getNumKvHeads() { return dimOf(getK(), 2); }

float AttentionBackwardOp::getEffectiveScale() {
  if (std::optional<APFloat> scale = getScale())
    return scale->convertToFloat();
  return 1.0f / std::sqrt(static_cast<float>(getHeadDim()));
}

void AttentionBackwardOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  // Q, K, V, O, dO, the LSE and the extras are read; dQ, dK, dV and the
  // workspace written (the workspace read back too).
  for (OpOperand &operand : getOperation()->getOpOperands()) {
    Value value = operand.get();
    bool written = value == getDq() || value == getDk() || value == getDv() ||
                   value == getDelta() || value == getDqAccum();
    if (!written || value == getDelta() || value == getDqAccum())
      effects.emplace_back(MemoryEffects::Read::get(), &operand,
                           SideEffects::DefaultResource::get());
    if (written)
      effects.emplace_back(MemoryEffects::Write::get(), &operand,
                           SideEffects::DefaultResource::get());
  }
}

LogicalResult AttentionBackwardOp::verify() {
  Operation *op = getOperation();
  std::pair<StringRef, Value> queries[] = {
      {"Q", getQ()}, {"O", getOut()}, {"dO", getDout()}, {"dQ", getDq()}};
  std::pair<StringRef, Value> keys[] = {
      {"K", getK()}, {"V", getV()}, {"dK", getDk()}, {"dV", getDv()}};
  for (auto group : {ArrayRef(queries), ArrayRef(keys)})
    for (auto [name, value] : group)
      if (failed(fa4::detail::verifyTensorOperandOf(op, name, value)))
        return failure();

  Type element = getElementTypeOrSelf(getQ().getType());
  if (!element.isF16() && !element.isBF16())
    return emitOpError() << "Q element type " << element
                         << " is not supported (expected f16 or bf16)";
  for (auto group : {ArrayRef(queries), ArrayRef(keys)})
    for (auto [name, value] : group)
      if (getElementTypeOrSelf(value.getType()) != element)
        return emitOpError() << name << " element type "
                             << getElementTypeOrSelf(value.getType())
                             << " does not match Q's " << element;

  int64_t headDim = getHeadDim();
  if (!llvm::is_contained(kBackwardHeadDims, headDim))
    return emitOpError() << "head dim " << headDim
                         << " is not supported by the backward (expected 32, 64, "
                            "96 or 128)";
  auto shapeOf = [](Value value) {
    return cast<ShapedType>(value.getType()).getShape();
  };
  for (auto group : {ArrayRef(queries), ArrayRef(keys)})
    for (auto [name, value] : group.drop_front())
      if (failed(verifyCompatibleShape(shapeOf(value), shapeOf(group[0].second))))
        return emitOpError() << name << " shape " << shapeText(shapeOf(value))
                             << " does not match " << group[0].first
                             << " shape " << shapeText(shapeOf(group[0].second));
  ArrayRef<int64_t> qShape = shapeOf(getQ()), kShape = shapeOf(getK());
  if (kShape[3] != headDim)
    return emitOpError() << "K head dim (" << kShape[3]
                         << ") does not match Q's head dim (" << headDim << ")";
  if (failed(verifyCompatibleShape(qShape[0], kShape[0])))
    return emitOpError() << "K batch (" << kShape[0]
                         << ") does not match Q batch (" << qShape[0] << ")";
  int64_t qHeads = getNumQueryHeads();
  if (failed(fa4::detail::verifyHeads([this] { return emitOpError(); }, qHeads,
                                      getNumKvHeads())))
    return failure();

  // The LSE and delta: one f32 per query row, [batch, q_heads, seq_q]; the
  // dQ accumulator: Q's shape in f32. Row-major, as the kernel addresses
  // them element by element.
  SmallVector<int64_t> rows = {qShape[0], qHeads, qShape[1]};
  for (auto [name, value, shape] :
       {std::tuple<StringRef, Value, ArrayRef<int64_t>>{"LSE", getLse(), rows},
        {"delta", getDelta(), rows},
        {"dq_accum", getDqAccum(), qShape}}) {
    auto type = cast<MemRefType>(value.getType());
    if (type.getRank() != static_cast<int64_t>(shape.size()) ||
        !type.getElementType().isF32() || !type.getLayout().isIdentity() ||
        type.getMemorySpace())
      return emitOpError() << name << " must be a row-major f32 memref "
                           << (shape.size() == 3
                                   ? "[batch, q_heads, seq_q]"
                                   : "[batch, seq_q, q_heads, head_dim]")
                           << ", got " << type;
    if (failed(verifyCompatibleShape(type.getShape(), shape)))
      return emitOpError() << name << " shape " << shapeText(type.getShape())
                           << " does not match " << shapeText(shape);
    // Heads (and the accumulator's head dim) are static, as Q's.
    SmallVector<int64_t, 2> staticDims =
        shape.size() == 3 ? SmallVector<int64_t, 2>{1}
                          : SmallVector<int64_t, 2>{2, 3};
    for (int64_t dim : staticDims)
      if (type.isDynamicDim(dim))
        return emitOpError() << name << " "
                             << (dim == 3 ? "head dim" : "heads")
                             << " must be static, got shape "
                             << shapeText(type.getShape());
  }

  // Each output is its own buffer (as values: the IR cannot see aliasing
  // views; the runtime checks the pointers).
  Value outputs[] = {getDq(), getDk(), getDv(), getDelta(), getDqAccum()};
  for (auto [position, operand] : llvm::enumerate(op->getOperands()))
    for (Value output : outputs)
      if (operand == output &&
          llvm::count(op->getOperands().take_front(11), output) > 1)
        return emitOpError() << "passes one memref as two of Q, K, V, O, dO, "
                                "LSE, dQ, dK, dV and the workspace; each "
                                "output needs a buffer of its own";

  if (failed(fa4::detail::verifyScoring(*this, getEffectiveScale(),
                                        getSoftcap().convertToFloat(),
                                        !getScoreMod().empty())))
    return failure();
  if (!getExtras().empty() && getScoreMod().empty() && getMaskMod().empty())
    return emitOpError() << "has extras but no score_mod or mask_mod region "
                            "to read them";
  if (failed(fa4::detail::verifyExtrasOf(op, getExtras())))
    return failure();
  for (Value extra : getExtras())
    if (llvm::is_contained(op->getOperands().take_front(11), extra))
      return emitOpError() << "passes a tensor or workspace of the attention "
                              "as an extra; the regions read their own memrefs";
  return fa4::detail::verifyWindow([this] { return emitOpError(); }, getMask(),
                              getWindowLeft(), getWindowRight());
}

LogicalResult AttentionBackwardOp::verifyRegions() {
  TypeRange extras = getExtras().getTypes();
  return success(
      succeeded(fa4::detail::verifyModRegionOf(*this, getScoreMod(), "score_mod",
                                          /*scoreMod=*/true, extras)) &&
      succeeded(fa4::detail::verifyModRegionOf(*this, getMaskMod(), "mask_mod",
                                          /*scoreMod=*/false, extras)));
}

//===----------------------------------------------------------------------===//
// Level B
//===----------------------------------------------------------------------===//

LogicalResult QBlockRangeOp::verify() {
  return fa4::detail::verifyWindow([this] { return emitOpError(); }, getMask(),
                              getWindowLeft(), getWindowRight());
}

LogicalResult QBlockRangeOp::verifyRegions() {
  return fa4::detail::verifyModRegionOf(*this, getMaskMod(), "mask_mod",
                                   /*scoreMod=*/false, std::nullopt);
}

/// A row vector of `rows` f32.
static LogicalResult verifyRows(Operation *op, StringRef name, Value value,
                                int64_t rows) {
  if (failed(fa4::detail::verifyTileType(op, name, value.getType(), 1, true)))
    return failure();
  if (dimOf(value, 0) != rows)
    return op->emitOpError() << name << " has " << dimOf(value, 0)
                             << " rows, the tile " << rows;
  return success();
}

LogicalResult LoadRowTileOp::verify() {
  auto source = cast<MemRefType>(getSource().getType());
  if (source.getRank() != 3 || !source.getElementType().isF32())
    return emitOpError() << "reads a rank-3 f32 memref ([batch, q_heads, "
                            "seq_q]), got "
                         << source;
  int64_t heads = source.getDimSize(1);
  if (ShapedType::isDynamic(heads) || heads % getGqaRatio() != 0)
    return emitOpError() << "gqa_ratio " << getGqaRatio()
                         << " must divide the memref's static heads ("
                         << shapeText({heads}) << ")";
  return fa4::detail::verifyTileType(getOperation(), "result",
                                getResult().getType(), 1, true);
}

LogicalResult RowDotOp::verify() {
  Operation *op = getOperation();
  if (failed(fa4::detail::verifyTileType(op, "lhs", getLhs().getType(), 2, false)) ||
      failed(fa4::detail::verifyTileType(op, "rhs", getRhs().getType(), 2, false)))
    return failure();
  if (getLhs().getType() != getRhs().getType())
    return emitOpError() << "lhs " << getLhs().getType() << " and rhs "
                         << getRhs().getType() << " differ";
  return verifyRows(op, "result", getResult(), dimOf(getLhs(), 0));
}

LogicalResult ProbsFromLseOp::verify() {
  Operation *op = getOperation();
  if (failed(fa4::detail::verifyTileType(op, "scores", getScores().getType(), 2,
                                    true)))
    return failure();
  return verifyRows(op, "lse", getLse(),
                    dimOf(getScores(), getTransposed() ? 1 : 0));
}

LogicalResult SoftmaxGradOp::verify() {
  Operation *op = getOperation();
  if (failed(fa4::detail::verifyTileType(op, "probs", getProbs().getType(), 2,
                                    true)))
    return failure();
  return verifyRows(op, "delta", getDelta(),
                    dimOf(getProbs(), getTransposed() ? 1 : 0));
}

LogicalResult SoftcapGradOp::verify() {
  return fa4::detail::verifyTileType(getOperation(), "grad", getGrad().getType(), 2,
                                true);
}

LogicalResult ScoreModGradOp::verify() {
  return fa4::detail::verifyTileType(getOperation(), "grad", getGrad().getType(), 2,
                                true);
}

LogicalResult ScoreModGradOp::verifyRegions() {
  return fa4::detail::verifyModRegionOf(*this, getBody(), "score_mod derivative",
                                   /*scoreMod=*/true,
                                   TypeRange(getExtras().getTypes()));
}

LogicalResult ConvertTileOp::verify() {
  auto from = cast<RankedTensorType>(getTile().getType());
  auto to = cast<RankedTensorType>(getResult().getType());
  if (from.getShape() != to.getShape() || !from.hasStaticShape())
    return emitOpError() << "converts " << from << " to " << to
                         << "; the shapes must be static and equal";
  float scale = getScale().convertToFloat();
  if (!std::isfinite(scale) || scale == 0.0f)
    return emitOpError() << "scale must be finite and non-zero";
  return success();
}

LogicalResult TransposedMmaOp::verify() {
  Operation *op = getOperation();
  if (failed(fa4::detail::verifyTileType(op, "lhs", getLhs().getType(), 2, false)) ||
      failed(fa4::detail::verifyTileType(op, "rhs", getRhs().getType(), 2, false)) ||
      failed(fa4::detail::verifyTileType(op, "acc", getAcc().getType(), 2, true)))
    return failure();
  if (getElementTypeOrSelf(getLhs()) != getElementTypeOrSelf(getRhs()))
    return emitOpError() << "lhs and rhs element types differ ("
                         << getElementTypeOrSelf(getLhs()) << " vs "
                         << getElementTypeOrSelf(getRhs()) << ")";
  // [M, N]ᵀ · [M, D] = [N, D].
  if (dimOf(getLhs(), 0) != dimOf(getRhs(), 0) ||
      dimOf(getAcc(), 0) != dimOf(getLhs(), 1) ||
      dimOf(getAcc(), 1) != dimOf(getRhs(), 1))
    return emitOpError() << "multiplies " << getLhs().getType() << "ᵀ by "
                         << getRhs().getType() << " into "
                         << getAcc().getType()
                         << "; expected [M, N]ᵀ · [M, D] into [N, D]";
  return success();
}

LogicalResult AccumulateDqOp::verify() {
  auto dest = cast<MemRefType>(getDest().getType());
  if (!dest.getElementType().isF32())
    return emitOpError() << "accumulates into an f32 memref, got " << dest;
  auto tile = cast<RankedTensorType>(getTile().getType());
  int64_t column = static_cast<int64_t>(getColumn());
  if (column != 0 || (tile.getRank() == 2 && dest.getRank() == 4 &&
                      !dest.isDynamicDim(3) &&
                      tile.getDimSize(1) < dest.getDimSize(3))) {
    // A chunk of columns: inside the accumulator's static head dim.
    if (dest.getRank() != 4 || dest.isDynamicDim(3) || tile.getRank() != 2 ||
        !tile.getElementType().isF32() ||
        column + tile.getDimSize(1) > dest.getDimSize(3))
      return emitOpError() << "adds columns [" << column << ", "
                           << column + (tile.getRank() == 2
                                            ? tile.getDimSize(1)
                                            : 0)
                           << ") of " << tile
                           << ", which must be f32 inside the accumulator's "
                              "static head dim: "
                           << dest;
    int64_t heads = dest.getDimSize(2);
    if (ShapedType::isDynamic(heads) || heads % getGqaRatio() != 0)
      return emitOpError() << "gqa_ratio " << getGqaRatio()
                           << " must divide the memref's static heads";
    return success();
  }
  return fa4::detail::verifyTileAccessOf(getOperation(), getDest(), getTile(),
                                    getGqaRatio());
}

LogicalResult StoreKvTileOp::verify() {
  return fa4::detail::verifyTileAccessOf(getOperation(), getDest(), getTile(), 1);
}

/// A [batch, seq, heads, head_dim] memref, and its static heads and head dim.
static LogicalResult verifyRowsTensor(Operation *op, StringRef name,
                                      MemRefType type, bool f32) {
  if (type.getRank() != 4 || (f32 && !type.getElementType().isF32()) ||
      (!f32 && !type.getElementType().isF16() &&
       !type.getElementType().isBF16()))
    return op->emitOpError()
           << name << " must be a rank-4 [batch, seq, heads, head_dim] memref of "
           << (f32 ? "f32" : "f16 or bf16") << ", got " << type;
  if (type.isDynamicDim(2) || type.isDynamicDim(3))
    return op->emitOpError() << name << " needs static heads and head dim, got "
                             << type;
  return success();
}

/// `a` and `b` have one shape where both are static.
static bool shapesAgree(MemRefType a, MemRefType b) {
  for (auto [x, y] : llvm::zip_equal(a.getShape(), b.getShape()))
    if (!ShapedType::isDynamic(x) && !ShapedType::isDynamic(y) && x != y)
      return false;
  return true;
}

LogicalResult PrepareBackwardOp::verify() {
  Operation *op = getOperation();
  auto out = cast<MemRefType>(getOut().getType());
  auto dout = cast<MemRefType>(getDout().getType());
  auto delta = cast<MemRefType>(getDelta().getType());
  auto accum = cast<MemRefType>(getDqAccum().getType());
  if (failed(verifyRowsTensor(op, "O", out, false)) ||
      failed(verifyRowsTensor(op, "dO", dout, false)) ||
      failed(verifyRowsTensor(op, "the dQ accumulator", accum, true)))
    return failure();
  if (out.getElementType() != dout.getElementType() ||
      out.getRank() != dout.getRank() || !shapesAgree(out, dout) ||
      !shapesAgree(out, accum))
    return emitOpError() << "O " << out << ", dO " << dout
                         << " and the dQ accumulator " << accum
                         << " must have one shape (and O and dO one type)";
  if (delta.getRank() != 3 || !delta.getElementType().isF32() ||
      delta.getDimSize(1) != out.getDimSize(2))
    return emitOpError() << "delta must be an f32 [batch, " << out.getDimSize(2)
                         << ", seq_q] memref, got " << delta;
  return success();
}

LogicalResult FinishDqOp::verify() {
  Operation *op = getOperation();
  auto accum = cast<MemRefType>(getDqAccum().getType());
  auto dq = cast<MemRefType>(getDq().getType());
  if (failed(verifyRowsTensor(op, "the dQ accumulator", accum, true)) ||
      failed(verifyRowsTensor(op, "dQ", dq, false)))
    return failure();
  if (!shapesAgree(accum, dq))
    return emitOpError() << "the dQ accumulator " << accum << " and dQ " << dq
                         << " must have one shape";
  return success();
}

//===----------------------------------------------------------------------===//
// #fa4.backward_spec
//===----------------------------------------------------------------------===//

LogicalResult
BackwardSpecAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         MaskKind mask, int64_t windowLeft, int64_t windowRight,
                         llvm::APFloat scale, llvm::APFloat softcap,
                         bool deterministic, ArrayRef<int64_t> arguments,
                         ArrayRef<int64_t> extras) {
  auto prefixed = [&]() { return emitError() << "fa4.backward_spec: "; };
  if (failed(fa4::detail::verifyWindow(prefixed, mask, windowLeft, windowRight)) ||
      failed(fa4::detail::verifyScaleAndSoftcap(prefixed, scale.convertToFloat(),
                                           softcap.convertToFloat())))
    return failure();
  if (arguments.size() != kBackwardArguments)
    return prefixed() << "arguments names " << arguments.size()
                      << " positions; Q, K, V, O, dO, the LSE, dQ, dK, dV, "
                         "delta and the dQ accumulator are "
                      << kBackwardArguments;
  SmallVector<int64_t> positions(arguments);
  positions.append(extras.begin(), extras.end());
  llvm::sort(positions);
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0)
      return prefixed() << "argument position " << positions[i]
                        << " is negative";
    if (i && positions[i] == positions[i - 1])
      return prefixed() << "names argument #" << positions[i] << " twice";
  }
  return success();
}

LogicalResult mlir::fa4::verifyBackwardSpecOn(Operation *op,
                                              BackwardSpecAttr spec) {
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitError() << "'" << kBackwardSpecAttrName
                           << "' belongs on a function, not on '"
                           << op->getName() << "'";
  ArrayRef<Type> types = function.getArgumentTypes();
  if (failed(fa4::detail::verifyMemrefPositions(
          op, kBackwardSpecAttrName, {spec.getArguments(), spec.getExtras()})))
    return failure();
  static const char *names[] = {"Q",  "K",  "V",  "O",     "dO",      "LSE",
                                "dQ", "dK", "dV", "delta", "dq_accum"};
  auto typeOf = [&](BackwardArgument role) {
    return cast<MemRefType>(types[spec.getArguments()[role]]);
  };
  MemRefType q = typeOf(kBwdQ), k = typeOf(kBwdK);
  for (BackwardArgument role : {kBwdQ, kBwdK, kBwdV, kBwdOut, kBwdDout, kBwdDq,
                                kBwdDk, kBwdDv, kBwdDqAccum}) {
    MemRefType type = typeOf(role);
    bool accumulator = role == kBwdDqAccum;
    MemRefType like = role == kBwdK || role == kBwdV || role == kBwdDk ||
                              role == kBwdDv
                          ? k
                          : q;
    Type element = type.getElementType();
    if (type.getRank() != 4 || type.isDynamicDim(2) || type.isDynamicDim(3) ||
        type.getDimSize(2) <= 0 || type.getDimSize(3) <= 0 ||
        (accumulator ? !element.isF32()
                     : (!(element.isF16() || element.isBF16()) ||
                        element != q.getElementType())) ||
        type.getDimSize(2) != like.getDimSize(2) ||
        type.getDimSize(3) != q.getDimSize(3))
      return op->emitError()
             << "fa4.backward_spec's " << names[role] << " is " << type
             << "; expected a [batch, seq, heads, head_dim] memref of "
             << (accumulator ? "f32" : "Q's element type (f16 or bf16)")
             << " with " << (like == k ? "K's" : "Q's")
             << " static heads and Q's head dim";
  }
  if (q.getDimSize(2) % k.getDimSize(2) != 0)
    return op->emitError() << "fa4.backward_spec's K heads do not divide Q's";
  for (BackwardArgument role : {kBwdLse, kBwdDelta}) {
    MemRefType type = typeOf(role);
    if (type.getRank() != 3 || !type.getElementType().isF32() ||
        type.getDimSize(1) != q.getDimSize(2))
      return op->emitError() << "fa4.backward_spec's " << names[role] << " is "
                             << type
                             << "; expected an f32 memref [batch, q_heads, "
                                "seq_q] with Q's heads";
  }
  return success();
}

BackwardSpecAttr mlir::fa4::getBackwardSpec(Operation *op) {
  return op->getAttrOfType<BackwardSpecAttr>(kBackwardSpecAttrName);
}
