//===- FA4Ops.cpp - fa4 operations and their verifiers --------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "Verify.h"
#include "fa4/Support/AttentionMath.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;

//===----------------------------------------------------------------------===//
// Shared checks
//===----------------------------------------------------------------------===//

/// Numbers in messages read as a person writes them: -0.5, not -5.000000e-01.
static std::string formatNumber(double value) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", value);
  return text;
}

static bool isInputElementType(Type type) { return type.isF16() || type.isBF16(); }
/// What a tile of the forward's tile program may hold besides f32: the
/// input types, and e4m3 for FP8 inputs and their probabilities.
static bool isTileElementType(Type type) {
  return isInputElementType(type) || isa<Float8E4M3FNType>(type);
}

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      shape, os,
      [&](int64_t dim) {
        if (ShapedType::isDynamic(dim))
          os << "?";
        else
          os << dim;
      },
      ", ");
  os << "]";
  return text;
}

/// Window bounds are -1 (that side unbounded) or a number of keys, and only a
/// window mask carries them.
LogicalResult mlir::fa4::detail::verifyWindow(EmitError emitError,
                                              MaskKind mask, int64_t left,
                                              int64_t right) {
  for (auto [name, bound] : {std::pair<StringRef, int64_t>{"window_left", left},
                            {"window_right", right}})
    // The kernel computes key positions in 32 bits.
    if (bound < -1 || bound > std::numeric_limits<int32_t>::max())
      return emitError() << name
                         << " must be -1 (unbounded) or in [0, 2^31), got "
                         << bound;
  if (mask != MaskKind::window && (left != -1 || right != -1))
    return emitError() << "window bounds (" << left << ", " << right
                       << ") require mask = window, got mask = "
                       << stringifyMaskKind(mask);
  if (mask == MaskKind::window && left == -1 && right == -1)
    return emitError()
           << "a window unbounded on both sides masks nothing; use mask = none";
  return success();
}

static LogicalResult verifyMaskBounds(Operation *op, MaskKind mask,
                                      int64_t left, int64_t right) {
  return fa4::detail::verifyWindow([op] { return op->emitOpError(); }, mask, left,
                              right);
}

/// A tile is a 2-D tensor of the given rows (when known) and element kind.
static LogicalResult verifyTile(Operation *op, StringRef name, Type type,
                                int64_t rank, bool wantF32) {
  auto tensor = cast<RankedTensorType>(type);
  if (tensor.getRank() != rank)
    return op->emitOpError() << name << " must have rank " << rank << ", got "
                             << tensor.getRank();
  if (!tensor.hasStaticShape())
    return op->emitOpError() << name << " must have a static shape, got "
                             << shapeString(tensor.getShape());
  Type element = tensor.getElementType();
  if (wantF32 && !element.isF32())
    return op->emitOpError() << name << " must hold f32, got " << element;
  if (!wantF32 && !isTileElementType(element))
    return op->emitOpError() << name << " must hold f16, bf16 or f8E4M3FN, got "
                             << element;
  return success();
}

static LogicalResult verifyDim(Operation *op, StringRef what, int64_t actual,
                               StringRef other, int64_t expected) {
  if (actual != expected)
    return op->emitOpError() << what << " (" << actual << ") does not match "
                             << other << " (" << expected << ")";
  return success();
}

static int64_t dimOf(Value value, unsigned index) {
  return cast<ShapedType>(value.getType()).getDimSize(index);
}

/// A score_mod or mask_mod body: one block taking `leading` and then one
/// argument per extra, straight-line code whose only side effects are reads
/// of the extras, ending in an fa4.yield of `yielded` (the ops holding one
/// are IsolatedFromAbove: a body captures nothing). `extras` null accepts any trailing memref arguments (the copy
/// a kv_block_range analyses, which holds no extras).
static LogicalResult verifyModRegion(Operation *op, Region &region,
                                     StringRef name, ArrayRef<Type> leading,
                                     std::optional<TypeRange> extras,
                                     Type yielded) {
  if (region.empty())
    return success();
  Block &body = region.front();
  auto describe = [&]() {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "(";
    llvm::interleaveComma(leading, os);
    os << (extras ? (extras->empty() ? "" : ", then the extras' types")
                  : ", then the extras' memrefs")
       << ")";
    return text;
  };
  size_t expected = leading.size() + (extras ? extras->size() : 0);
  if (extras ? body.getNumArguments() != expected
             : body.getNumArguments() < expected)
    return op->emitOpError() << name << " takes " << describe() << ", got "
                             << body.getNumArguments() << " arguments";
  for (auto [position, argument] : llvm::enumerate(body.getArguments())) {
    Type want = position < leading.size()
                    ? leading[position]
                    : (extras ? (*extras)[position - leading.size()] : Type());
    if (want ? argument.getType() != want
             : !isa<MemRefType>(argument.getType()))
      return op->emitOpError()
             << name << " argument #" << position << " must be "
             << (want ? want : Type()) << (want ? "" : "a memref") << " "
             << describe() << ", got " << argument.getType();
  }
  for (Operation &inner : body) {
    if (inner.getNumRegions())
      return inner.emitOpError()
             << "in a " << name
             << " region: regions are straight-line code (use arith.select "
                "for a choice)";
    if (isMemoryEffectFree(&inner))
      continue;
    auto effects = dyn_cast<MemoryEffectOpInterface>(&inner);
    SmallVector<MemoryEffects::EffectInstance> instances;
    if (effects)
      effects.getEffects(instances);
    bool onlyReadsExtras =
        effects && llvm::all_of(instances, [&](auto &instance) {
          auto argument = dyn_cast_or_null<BlockArgument>(instance.getValue());
          return isa<MemoryEffects::Read>(instance.getEffect()) && argument &&
                 argument.getOwner() == &body &&
                 argument.getArgNumber() >= leading.size();
        });
    if (!onlyReadsExtras)
      return inner.emitOpError()
             << "in a " << name
             << " region has side effects; a region may only read its extras";
  }
  auto yield = body.empty() ? YieldOp() : dyn_cast<YieldOp>(body.back());
  if (!yield)
    return op->emitOpError() << name << " must end in fa4.yield";
  if (yield.getValue().getType() != yielded)
    return yield.emitOpError() << "in a " << name << " region must yield "
                               << yielded << ", got "
                               << yield.getValue().getType();
  return success();
}

/// The leading arguments of the two regions.
static SmallVector<Type> scoreModArguments(MLIRContext *context) {
  Type index = IndexType::get(context);
  return {Float32Type::get(context), index, index, index, index};
}
static SmallVector<Type> maskModArguments(MLIRContext *context) {
  Type index = IndexType::get(context);
  return {index, index, index, index};
}

/// A block mask: `[batch or 1, q_heads or 1, query blocks, 4]` i32,
/// row-major (see AttentionMath.h's BlockMaskEntry).
static LogicalResult verifyBlockMaskType(Operation *op, MemRefType type) {
  if (type.getRank() != 4 || !type.getElementType().isSignlessInteger(32) ||
      type.getDimSize(3) != 4 || !type.getLayout().isIdentity())
    return op->emitOpError()
           << "block mask must be a row-major i32 memref [batch or 1, "
              "q_heads or 1, ceil(seq_q / "
           << kBlockMaskQueries
           << "), 4] (begin, full_begin, full_end, end per query block), got "
           << type;
  return success();
}

/// Q, K, V, O (and the backward's dO, dQ, dK, dV): rank 4 in `order`,
/// static heads (dimension `headsDim`) and head dim, and as memrefs any
/// strides a TMA tensor map expresses.
static LogicalResult verifyTensorOperand(Operation *op, StringRef name,
                                         Value value, unsigned headsDim,
                                         StringRef order) {
  auto emitOpError = [op]() { return op->emitOpError(); };
  auto shaped = cast<ShapedType>(value.getType());
  if (shaped.getRank() != 4)
    return emitOpError() << name << " must have rank 4 (" << order
                         << "), got rank " << shaped.getRank();
  for (unsigned dim : {headsDim, 3u})
    if (shaped.isDynamicDim(dim))
      return emitOpError() << name << " "
                           << (dim == headsDim ? "heads" : "head dim")
                           << " must be static, got shape "
                           << shapeString(shaped.getShape());
  auto type = dyn_cast<MemRefType>(shaped);
  if (!type)
    return success();
  // Any strides a TMA tensor map can express: the kernel reaches Q, K, V
  // and O only through tensor maps, which the launch builds from the
  // tensors' own strides (the offset is the host's business).
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(type.getStridesAndOffset(strides, offset)))
    return emitOpError() << name << " must have a strided layout, got " << type;
  if (strides[3] != 1)
    return emitOpError() << name
                         << " must be contiguous along head_dim (stride 1, "
                            "as TMA needs), got strides "
                         << shapeString(strides);
  // (The element type is checked by the caller; until then any width will
  // do.)
  int64_t elementBytes =
      type.getElementType().isIntOrFloat() ? type.getElementTypeBitWidth() / 8 : 2;
  // (A dimension of static size 1 is never stepped along: any stride.)
  for (auto [dim, stride] : llvm::enumerate(ArrayRef(strides).drop_back()))
    if (!ShapedType::isDynamic(stride) && type.getDimSize(dim) != 1 &&
        (stride <= 0 || (stride * elementBytes) % 16 != 0))
      return emitOpError() << name << " strides " << shapeString(strides)
                           << " must be positive multiples of 16 bytes (TMA's "
                              "rule for every stride but head_dim's)";
  return success();
}

/// The extras: memrefs a kernel parameter and the manifest can carry, each
/// passed once.
static LogicalResult verifyExtras(Operation *op, OperandRange extras) {
  auto emitOpError = [op]() { return op->emitOpError(); };
  for (auto [position, extra] : llvm::enumerate(extras)) {
    auto type = cast<MemRefType>(extra.getType());
    Type element = type.getElementType();
    // What a kernel parameter and the manifest can carry: row-major, in
    // global memory, of a width the runtime knows, every size known or
    // given at launch.
    bool known = element.isF16() || element.isBF16() || element.isF32() ||
                 element.isF64() || element.isInteger(1) ||
                 element.isInteger(8) || element.isInteger(16) ||
                 element.isInteger(32) || element.isInteger(64);
    if (!type.getLayout().isIdentity() || !known || type.getMemorySpace() ||
        llvm::any_of(type.getShape(), [](int64_t dim) { return dim == 0; }))
      return emitOpError() << "extras must be row-major memrefs in the default "
                              "memory space, of f16, bf16, f32, f64 or i1, i8, "
                              "i16, i32, i64, with no empty dimension, got "
                           << type;
    for (auto [earlier, other] :
         llvm::enumerate(extras.take_front(position)))
      if (other == extra)
        return emitOpError() << "extra #" << position << " repeats extra #"
                             << earlier << "; pass each memref once";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

int64_t AttentionOp::getHeadDim() { return dimOf(getQ(), 3); }
int64_t AttentionOp::getValueHeadDim() { return dimOf(getV(), 3); }
int64_t AttentionOp::getNumQueryHeads() { return getLogicalShape(getQ())[2]; }
int64_t AttentionOp::getNumKvHeads() { return getLogicalShape(getK())[2]; }

SmallVector<int64_t> AttentionOp::getLogicalShape(Value operand) {
  SmallVector<int64_t> shape(cast<ShapedType>(operand.getType()).getShape());
  if (getHeadsFirst() && shape.size() == 4)
    std::swap(shape[1], shape[2]);
  return shape;
}

float AttentionOp::getEffectiveScale() {
  if (std::optional<APFloat> scale = getScale())
    return scale->convertToFloat();
  return 1.0f / std::sqrt(static_cast<float>(getHeadDim()));
}

LogicalResult mlir::fa4::detail::verifySeqUsedKType(EmitError emitError,
                                                    MemRefType table,
                                                    int64_t batch) {
  if (table.getRank() != 1 || !table.getElementType().isSignlessInteger(32) ||
      (!ShapedType::isDynamic(batch) && !table.isDynamicDim(0) &&
       table.getDimSize(0) != batch))
    return emitError() << "seqused_k " << table
                       << " is not an i32 memref of one entry per sequence ["
                       << (ShapedType::isDynamic(batch) ? std::string("?")
                                                        : std::to_string(batch))
                       << "]";
  return success();
}

LogicalResult mlir::fa4::detail::verifySplitWorkspaceType(EmitError emitError,
                                                          MemRefType workspace) {
  if (workspace.getRank() != 1 || !workspace.getElementType().isSignlessInteger(32))
    return emitError() << "split_workspace " << workspace
                       << " is not a rank-1 i32 memref [words]";
  return success();
}

/// Q and K's head dim, and V and O's (192 with a V head dim up to 128 is
/// DeepSeek-V3's prefill, (192, 128); 256 is Gemma's, V's too; 32 fills half
/// of a tile's 128-byte swizzle lines, the rest zeros that the TMA writes
/// and no MMA reads).
static constexpr int64_t kSupportedHeadDims[] = {32, 64, 96, 128, 192, 256};
static constexpr int64_t kSupportedValueHeadDims[] = {32, 64, 96, 128, 256};

LogicalResult mlir::fa4::detail::verifyScaleAndSoftcap(EmitError emitError,
                                                       float scale,
                                                       float softcap) {
  // The kernel folds log2(e) into the scale: the product must be finite.
  if (!(scale > 0.0f) || !std::isfinite(scale) ||
      !std::isfinite(scale * static_cast<float>(M_LOG2E)))
    return emitError() << "scale must be positive and finite, and finite "
                          "times log2(e), got "
                       << formatNumber(scale);
  if (!(softcap >= 0.0f) || !std::isfinite(softcap))
    return emitError()
           << "softcap must be non-negative and finite (0 disables it), got "
           << formatNumber(softcap);
  // The kernel's tanh (on ex2.approx and rcp.approx) is accurate to about
  // 2^-22 absolute, which the cap multiplies into the score: at 1024 that is
  // 2.4e-4, under half an fp16 ulp of P; at 1e8 a score was off by 1.4.
  if (softcap > kMaxSoftcap)
    return emitError() << "softcap must be at most " << formatNumber(kMaxSoftcap)
                       << " (the kernel's tanh is accurate to about 2^-22, "
                          "which the cap multiplies), got "
                       << formatNumber(softcap);
  // tanh's argument is s·(2·log2(e)·scale / cap): the factor must be finite.
  if (softcap > 0.0f &&
      !std::isfinite(2.0f * static_cast<float>(M_LOG2E) * scale / softcap))
    return emitError() << "softcap " << formatNumber(softcap)
                       << " is too small for scale " << formatNumber(scale)
                       << ": 2·log2(e)·scale / softcap must be a finite f32";
  return success();
}

MutableOperandRange AttentionOp::getDpsInitsMutable() {
  // O, and the LSE when there is one: the operands from O on.
  return MutableOperandRange(getOperation(), 3,
                             getLse() ? 2 : 1);
}

LogicalResult AttentionOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  // On tensors, the results are the destinations' types (O, then the LSE);
  // on memrefs there are none.
  Adaptor adaptor(operands, attributes, properties, regions);
  for (Value destination : {adaptor.getOut(), adaptor.getLse()})
    if (destination && isa<RankedTensorType>(destination.getType()))
      inferred.push_back(destination.getType());
  return success();
}

void AttentionOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  // Memory only in the memref form: Q, K, V read, O and the LSE written.
  for (OpOperand &operand : getOperation()->getOpOperands()) {
    if (!isa<MemRefType>(operand.get().getType()))
      continue;
    if (isDpsInit(&operand))
      effects.emplace_back(MemoryEffects::Write::get(), &operand,
                           SideEffects::DefaultResource::get());
    else
      effects.emplace_back(MemoryEffects::Read::get(), &operand,
                           SideEffects::DefaultResource::get());
  }
}

LogicalResult AttentionOp::verify() {
  Operation *op = getOperation();
  std::pair<StringRef, Value> operands[] = {
      {"Q", getQ()}, {"K", getK()}, {"V", getV()}, {"O", getOut()}};
  bool onTensors = isa<RankedTensorType>(getQ().getType());
  for (Value operand : {getQ(), getK(), getV(), getOut(), getLse()})
    if (operand && isa<RankedTensorType>(operand.getType()) != onTensors)
      return emitOpError()
             << "Q, K, V, O and the LSE must be all memrefs or all tensors";
  if (getHeadsFirst() && !onTensors)
    return emitOpError() << "heads_first applies to tensors; a memref states "
                            "its layout in its strides";
  StringRef order = getHeadsFirst() ? "[batch, heads, seq, head_dim]"
                                    : "[batch, seq, heads, head_dim]";
  unsigned headsDim = getHeadsFirst() ? 1 : 2;
  for (auto [name, value] : operands)
    if (failed(verifyTensorOperand(op, name, value, headsDim, order)))
      return failure();

  Type element = getElementTypeOrSelf(getQ().getType());
  bool fp8 = isa<Float8E4M3FNType>(element);
  if (!isInputElementType(element) && !fp8)
    return emitOpError() << "Q element type " << element
                         << " is not supported (expected f16, bf16 or "
                            "f8E4M3FN)";
  for (auto [name, value] : ArrayRef(operands).drop_front(1).drop_back(1)) {
    Type other = getElementTypeOrSelf(value.getType());
    if (other != element)
      return emitOpError() << name << " element type " << other
                           << " does not match Q's " << element;
  }
  // O is in the input type; FP8 inputs give an f16 or bf16 O.
  Type outElement = getElementTypeOrSelf(getOut().getType());
  if (fp8 && !isInputElementType(outElement))
    return emitOpError() << "O element type " << outElement
                         << " is not f16 or bf16 (an FP8 attention's output)";
  if (!fp8 && outElement != element)
    return emitOpError() << "O element type " << outElement
                         << " does not match Q's " << element;

  int64_t headDim = getHeadDim();
  if (!llvm::is_contained(kSupportedHeadDims, headDim))
    return emitOpError() << "head dim " << headDim
                         << " is not supported (expected 32, 64, 96, 128, 192 "
                            "or 256)";
  int64_t valueHeadDim = getValueHeadDim();
  if (!llvm::is_contained(kSupportedValueHeadDims, valueHeadDim)) {
    InFlightDiagnostic diag = emitOpError();
    diag << "V head dim " << valueHeadDim
         << " is not supported (expected 32, 64, 96, 128 or 256; Q and K's "
            "may be larger, as (192, 128))";
    // Head dim 192 is Q and K's only: say how to give V its own.
    if (valueHeadDim == headDim)
      diag << ": with Q and K's head dim " << headDim
           << ", V (and O) take a head dim of their own (fa4c --v-head-dim, "
              "Python's v_head_dim)";
    return diag;
  }
  // K and V share Blackwell's K/V ring, whose items are K's.
  if (valueHeadDim > headDim)
    return emitOpError() << "V head dim " << valueHeadDim
                         << " exceeds Q and K's head dim " << headDim
                         << " (a V head dim may equal Q's or be smaller)";

  // V and O may have their own head dim; every other dimension matches K's
  // (V) and Q's (O).
  SmallVector<int64_t> kShape = getLogicalShape(getK());
  SmallVector<int64_t> vShape = getLogicalShape(getV());
  auto withHeadDim = [](SmallVector<int64_t> shape, int64_t dim) {
    shape[3] = dim;
    return shape;
  };
  if (failed(verifyCompatibleShape(withHeadDim(kShape, valueHeadDim), vShape)))
    return emitOpError() << "V shape " << shapeString(vShape)
                         << " does not match K shape " << shapeString(kShape)
                         << " (but for the head dim)";
  if (failed(verifyDim(op, "K head dim", kShape[3], "Q's head dim", headDim)))
    return failure();
  SmallVector<int64_t> qShape = getLogicalShape(getQ());
  SmallVector<int64_t> oShape = getLogicalShape(getOut());
  if (failed(verifyCompatibleShape(withHeadDim(qShape, valueHeadDim), oShape)))
    return emitOpError() << "O shape " << shapeString(oShape)
                         << " does not match Q shape " << shapeString(qShape)
                         << " with V's head dim " << valueHeadDim;
  // (A paged cache's first dimension is its blocks, not the batch.)
  if (!getBlockTable() && failed(verifyCompatibleShape(qShape[0], kShape[0])))
    return emitOpError() << "K batch (" << kShape[0]
                         << ") does not match Q batch (" << qShape[0] << ")";

  int64_t qHeads = getNumQueryHeads();
  if (failed(fa4::detail::verifyHeads([this] { return emitOpError(); },
                                      qHeads, getNumKvHeads())))
    return failure();

  if (Value lse = getLse()) {
    auto lseType = cast<ShapedType>(lse.getType());
    if (lseType.getRank() != 3 || !lseType.getElementType().isF32())
      return emitOpError() << "LSE must be a rank-3 f32 "
                           << (onTensors ? "tensor" : "memref")
                           << " ([batch, q_heads, seq_q]), got " << lseType;
    auto lseMemref = dyn_cast<MemRefType>(lseType);
    if (lseMemref && !lseMemref.getLayout().isIdentity())
      return emitOpError() << "LSE must have the identity (row-major) layout";
    if (lseType.isDynamicDim(1))
      return emitOpError() << "LSE heads must be static, got shape "
                           << shapeString(lseType.getShape());
    SmallVector<int64_t> expected = {qShape[0], qHeads, qShape[1]};
    if (failed(verifyCompatibleShape(lseType.getShape(), expected)))
      return emitOpError() << "LSE shape " << shapeString(lseType.getShape())
                           << " does not match [batch, q_heads, seq_q] = "
                           << shapeString(expected);
  }

  if (failed(fa4::detail::verifyScoring(*this, getEffectiveScale(),
                                        getSoftcap().convertToFloat(),
                                        !getScoreMod().empty())))
    return failure();
  if (getExtras().size() > (getSequsedK() ? 1u : 0u) +
                               (getBlockTable() ? 1u : 0u) +
                               (getSplitWorkspace() ? 1u : 0u) +
                               (getCuSeqlensQ() ? 1u : 0u) +
                               (getCuSeqlensK() ? 1u : 0u) +
                               (getQDescale() ? 1u : 0u) +
                               (getKDescale() ? 1u : 0u) +
                               (getVDescale() ? 1u : 0u) &&
      getScoreMod().empty() && getMaskMod().empty())
    return emitOpError() << "has extras but no score_mod or mask_mod region "
                            "to read them";
  if (failed(verifyExtras(op, getExtras())))
    return failure();
  if (std::optional<uint64_t> position = getBlockMask()) {
    if (*position >= getExtras().size())
      return emitOpError() << "block_mask names extra #" << *position
                           << ", but the op has " << getExtras().size()
                           << " extras";
    if (getMaskMod().empty())
      return emitOpError() << "has a block_mask but no mask_mod: the block "
                              "mask describes the mask_mod's blocks";
    auto type = cast<MemRefType>(getExtras()[*position].getType());
    if (failed(verifyBlockMaskType(op, type)))
      return failure();
    SmallVector<int64_t> qShape = getLogicalShape(getQ());
    int64_t heads = getNumQueryHeads();
    auto broadcastOr = [](int64_t size, int64_t full) {
      return ShapedType::isDynamic(size) || size == 1 ||
             ShapedType::isDynamic(full) || size == full;
    };
    if (!broadcastOr(type.getDimSize(0), qShape[0]) ||
        !broadcastOr(type.getDimSize(1), heads) ||
        (!ShapedType::isDynamic(type.getDimSize(2)) &&
         !ShapedType::isDynamic(qShape[1]) &&
         type.getDimSize(2) != ceilDiv(qShape[1], kBlockMaskQueries)))
      return emitOpError() << "block mask " << type
                           << " does not fit [batch or 1, q_heads or 1, "
                              "ceil(seq_q / "
                           << kBlockMaskQueries << "), 4] = ["
                           << qShape[0] << " or 1, " << heads << " or 1, "
                           << (ShapedType::isDynamic(qShape[1])
                                   ? std::string("?")
                                   : std::to_string(ceilDiv(qShape[1], kBlockMaskQueries)))
                           << ", 4]";
  }
  if (failed(verifyDescales()))
    return failure();
  if (std::optional<uint64_t> position = getSequsedK()) {
    if (*position >= getExtras().size())
      return emitOpError() << "seqused_k names extra #" << *position
                           << ", but the op has " << getExtras().size()
                           << " extras";
    if (getBlockMask() == position || getBlockTable() == position)
      return emitOpError()
             << "seqused_k names the same extra as block_mask or block_table";
    // Varlen: one count per sequence, the tables' entries less one.
    int64_t batch = getLogicalShape(getQ())[0];
    if (std::optional<uint64_t> cu = getCuSeqlensQ();
        cu && *cu < getExtras().size()) {
      int64_t entries =
          cast<MemRefType>(getExtras()[*cu].getType()).getDimSize(0);
      batch = ShapedType::isDynamic(entries) ? ShapedType::kDynamic
                                             : entries - 1;
    }
    if (failed(fa4::detail::verifySeqUsedKType(
            [this] { return emitOpError(); },
            cast<MemRefType>(getExtras()[*position].getType()), batch)))
      return failure();
  }
  if (getCuSeqlensQ().has_value() != getCuSeqlensK().has_value())
    return emitOpError() << "takes cu_seqlens_q and cu_seqlens_k together";
  if (getCuSeqlensQ()) {
    SmallVector<int64_t> entries;
    for (auto [name, position] :
         {std::pair{"cu_seqlens_q", *getCuSeqlensQ()},
          std::pair{"cu_seqlens_k", *getCuSeqlensK()}}) {
      if (position >= getExtras().size())
        return emitOpError() << name << " names extra #" << position
                             << ", but the op has " << getExtras().size()
                             << " extras";
      if (getBlockMask() == position || getSequsedK() == position ||
          getBlockTable() == position || getSplitWorkspace() == position)
        return emitOpError() << name << " names the same extra as another "
                                        "table";
      auto table = cast<MemRefType>(getExtras()[position].getType());
      if (table.getRank() != 1 ||
          !table.getElementType().isSignlessInteger(32) ||
          (!table.isDynamicDim(0) && table.getDimSize(0) < 2))
        return emitOpError() << name << " " << table
                             << " is not an i32 memref [batch + 1] of at "
                                "least two entries";
      entries.push_back(table.getDimSize(0));
    }
    if (*getCuSeqlensQ() == *getCuSeqlensK())
      return emitOpError() << "cu_seqlens_q and cu_seqlens_k name the same "
                              "extra; pass the table twice as two extras";
    if (!ShapedType::isDynamic(entries[0]) &&
        !ShapedType::isDynamic(entries[1]) && entries[0] != entries[1])
      return emitOpError() << "cu_seqlens_q has " << entries[0]
                           << " entries and cu_seqlens_k " << entries[1]
                           << "; both are [batch + 1]";
    if (getBlockTable() || getBlockMask() || getNumSplits())
      return emitOpError() << "varlen (cu_seqlens) does not combine with "
                              "block_table, block_mask or split-KV";
    if (getHeadsFirst())
      return emitOpError() << "varlen tensors are packed [1, total, heads, "
                              "head_dim]; heads_first does not apply";
    for (auto [name, operand] : {std::pair{"Q", getQ()}, std::pair{"K", getK()},
                                 std::pair{"V", getV()},
                                 std::pair{"O", getOut()}}) {
      int64_t batch = getLogicalShape(operand)[0];
      if (!ShapedType::isDynamic(batch) && batch != 1)
        return emitOpError() << "varlen " << name
                             << " is packed [1, total, heads, head_dim]; "
                                "its first dimension is "
                             << batch;
    }
  }
  if (std::optional<uint64_t> position = getBlockTable()) {
    if (*position >= getExtras().size())
      return emitOpError() << "block_table names extra #" << *position
                           << ", but the op has " << getExtras().size()
                           << " extras";
    if (getBlockMask() == position)
      return emitOpError() << "block_table and block_mask name the same extra";
    auto table = cast<MemRefType>(getExtras()[*position].getType());
    int64_t batch = getLogicalShape(getQ())[0];
    if (table.getRank() != 2 || !table.getElementType().isSignlessInteger(32) ||
        (!ShapedType::isDynamic(batch) && !table.isDynamicDim(0) &&
         table.getDimSize(0) != batch))
      return emitOpError() << "block_table " << table
                           << " is not an i32 memref [batch, max_blocks]";
    SmallVector<int64_t> vShape = getLogicalShape(getV());
    if (withHeadDim(vShape, kShape[3]) != kShape)
      return emitOpError() << "a paged cache's V " << shapeString(vShape)
                           << " must have K's shape " << shapeString(kShape)
                           << " (the same blocks and page size)";
    // The page: a whole number of 128-byte-swizzle patterns (8 rows) in a
    // 128-key tile, or whole tiles (fa4-to-nvvm gathers a tile by pages).
    int64_t page = kShape[1];
    if (getHeadsFirst() || ShapedType::isDynamic(page) || page < 16 ||
        (page & (page - 1)) != 0)
      return emitOpError() << "a paged K/V cache is [num_blocks, page_size, "
                              "kv_heads, head_dim] with a static page size, a "
                              "power of two of at least 16; got K "
                           << shapeString(kShape)
                           << (getHeadsFirst() ? " (heads_first)" : "");
  }
  if (getNumSplits().has_value() != getSplitWorkspace().has_value())
    return emitOpError() << "takes num_splits and split_workspace together";
  if (std::optional<uint64_t> position = getSplitWorkspace()) {
    if (*position >= getExtras().size())
      return emitOpError() << "split_workspace names extra #" << *position
                           << ", but the op has " << getExtras().size()
                           << " extras";
    if (getBlockMask() == position || getSequsedK() == position ||
        getBlockTable() == position)
      return emitOpError() << "split_workspace names the same extra as "
                              "block_mask, seqused_k or block_table";
    auto workspace = cast<MemRefType>(getExtras()[*position].getType());
    if (failed(fa4::detail::verifySplitWorkspaceType(
            [this] { return emitOpError(); }, workspace)))
      return failure();
    // A static workspace must hold the smallest problem its sizes allow.
    SmallVector<int64_t> qShape = getLogicalShape(getQ());
    int64_t batch = ShapedType::isDynamic(qShape[0]) ? 1 : qShape[0];
    int64_t seqQ = ShapedType::isDynamic(qShape[1]) ? 1 : qShape[1];
    int64_t packing = gqaPacking(getGqaRatio());
    SplitWorkspaceLayout layout = splitWorkspaceLayout(
        batch, getNumQueryHeads() / packing, seqQ, packing,
        static_cast<int64_t>(*getNumSplits()), getValueHeadDim());
    if (!workspace.isDynamicDim(0) && seqQ > 0 && batch > 0 &&
        workspace.getDimSize(0) < layout.words())
      return emitOpError() << "split_workspace " << workspace << " holds "
                           << workspace.getDimSize(0) << " words; "
                           << (ShapedType::isDynamic(qShape[0]) ||
                                       ShapedType::isDynamic(qShape[1])
                                   ? "the smallest problem"
                                   : "the problem")
                           << " needs " << layout.words();
  }
  return verifyMaskBounds(op, getMask(), getWindowLeft(), getWindowRight());
}

/// FP8's descale tables: each an extra of its own, `[batch, kv_heads]` f32,
/// with e4m3 inputs only.
LogicalResult AttentionOp::verifyDescales() {
  bool fp8 = isa<Float8E4M3FNType>(getElementTypeOrSelf(getQ().getType()));
  std::pair<StringRef, std::optional<uint64_t>> descales[] = {
      {"q_descale", getQDescale()},
      {"k_descale", getKDescale()},
      {"v_descale", getVDescale()}};
  SmallVector<std::optional<uint64_t>> others = {
      getBlockMask(), getSequsedK(),  getBlockTable(),
      getSplitWorkspace(), getCuSeqlensQ(), getCuSeqlensK()};
  int64_t batch = getLogicalShape(getQ())[0];
  if (std::optional<uint64_t> cu = getCuSeqlensQ();
      cu && *cu < getExtras().size()) {
    int64_t entries =
        cast<MemRefType>(getExtras()[*cu].getType()).getDimSize(0);
    batch = ShapedType::isDynamic(entries) ? ShapedType::kDynamic : entries - 1;
  }
  for (auto [index, entry] : llvm::enumerate(descales)) {
    auto [name, position] = entry;
    if (!position)
      continue;
    if (!fp8)
      return emitOpError() << name << " applies to FP8 (f8E4M3FN) inputs; Q is "
                           << getElementTypeOrSelf(getQ().getType());
    if (*position >= getExtras().size())
      return emitOpError() << name << " names extra #" << *position
                           << ", but the op has " << getExtras().size()
                           << " extras";
    bool shared = llvm::is_contained(others, position);
    for (size_t other = 0; other < index; ++other)
      shared |= descales[other].second == position;
    if (shared)
      return emitOpError() << name << " names the same extra as another table "
                                      "(pass it twice as two extras)";
    auto table = cast<MemRefType>(getExtras()[*position].getType());
    auto fits = [](int64_t size, int64_t expected) {
      return ShapedType::isDynamic(size) || ShapedType::isDynamic(expected) ||
             size == expected;
    };
    if (table.getRank() != 2 || !table.getElementType().isF32() ||
        !table.getLayout().isIdentity() ||
        !fits(table.getDimSize(0), batch) ||
        !fits(table.getDimSize(1), getNumKvHeads()))
      return emitOpError() << name << " " << table
                           << " is not a row-major f32 memref [batch, "
                              "kv_heads] = ["
                           << (ShapedType::isDynamic(batch)
                                   ? std::string("?")
                                   : std::to_string(batch))
                           << ", " << getNumKvHeads() << "]";
  }
  return success();
}

LogicalResult AttentionOp::verifyRegions() {
  TypeRange extras = getExtras().getTypes();
  if (failed(verifyModRegion(*this, getScoreMod(), "score_mod",
                             scoreModArguments(getContext()), extras,
                             Float32Type::get(getContext()))) ||
      failed(verifyModRegion(*this, getMaskMod(), "mask_mod",
                             maskModArguments(getContext()), extras,
                             IntegerType::get(getContext(), 1))))
    return failure();
  // The split-KV workspace is the kernel's own scratch (its counters and the
  // parts' partial results change while the kernel runs): no region reads it.
  if (std::optional<uint64_t> position = getSplitWorkspace())
    for (auto [region, leading] : {std::pair{&getScoreMod(), 5u},
                                   std::pair{&getMaskMod(), 4u}})
      if (!region->empty() &&
          region->getNumArguments() > leading + *position &&
          !region->getArgument(leading + *position).use_empty())
        return emitOpError()
               << "reads the split-KV workspace (extra #" << *position
               << ") in its " << (leading == 5 ? "score_mod" : "mask_mod")
               << "; it is the kernel's scratch, not an input";
  return success();
}

//===----------------------------------------------------------------------===//
// Level B
//===----------------------------------------------------------------------===//

/// A K/V block is a multiple of 16 keys up to 256 (P·V's steps, wgmma's
/// N); which of them a chip's schedule takes, its wing says.
static LogicalResult verifyBlockN(Operation *op, uint64_t blockN) {
  if (blockN < 16 || blockN > 256 || blockN % 16 != 0)
    return op->emitOpError() << "block_n must be a multiple of 16 keys from 16 "
                                "to 256, got "
                             << blockN;
  return success();
}

LogicalResult KvBlockRangeOp::verify() {
  if (failed(verifyBlockN(getOperation(), getBlockN())))
    return failure();
  if (static_cast<bool>(getBlockMask()) != static_cast<bool>(getBatch()) ||
      static_cast<bool>(getBlockMask()) != static_cast<bool>(getKvHead()))
    return emitOpError() << "takes a block_mask with the task's batch and "
                            "kv_head, or none of them";
  if (Value blockMask = getBlockMask()) {
    if (failed(verifyBlockMaskType(getOperation(),
                                   cast<MemRefType>(blockMask.getType()))))
      return failure();
    if (getBlockN() != kBlockMaskKeys)
      return emitOpError() << "block_n (" << getBlockN()
                           << ") must be the block mask's "
                           << kBlockMaskKeys << " keys";
  }
  return verifyMaskBounds(getOperation(), getMask(), getWindowLeft(),
                          getWindowRight());
}

/// The task grid's head groups, kv_heads · groups_per_kv, index a 32-bit
/// head coordinate.
static LogicalResult verifyHeadGroups(Operation *op, uint64_t kvHeads,
                                      uint64_t groupsPerKv) {
  constexpr uint64_t kLimit = uint64_t(1) << 31;
  if (kvHeads >= kLimit || groupsPerKv >= kLimit ||
      kvHeads * groupsPerKv >= kLimit)
    return op->emitOpError() << "has kv_heads " << kvHeads << " x groups_per_kv "
                             << groupsPerKv
                             << " head groups, 2^31 or more (the kernel's "
                                "head index is 32-bit)";
  return success();
}

LogicalResult TaskCountOp::verify() {
  return verifyHeadGroups(getOperation(), getKvHeads(), getGroupsPerKv());
}

LogicalResult TaskCoordsOp::verifyRegions() {
  if (failed(verifyHeadGroups(getOperation(), getKvHeads(), getGroupsPerKv())) ||
      failed(verifyBlockN(getOperation(), getBlockN())))
    return failure();
  // The kernel's index arithmetic is 32 bits wide.
  if (static_cast<int64_t>(getL2Keys()) >= (int64_t(1) << 31))
    return emitOpError() << "has l2_keys = " << getL2Keys()
                         << ", not below 2^31 (the kernel's index arithmetic "
                            "is 32 bits wide)";
  if (getCuSeqlens() && getOrder() != TaskOrder::static_order)
    return emitOpError() << "walks a varlen grid (cu_seqlens) in its own "
                            "order; it takes order static";
  return verifyModRegion(getOperation(), getMaskMod(), "mask_mod",
                         maskModArguments(getContext()), std::nullopt,
                         IntegerType::get(getContext(), 1));
}

LogicalResult KvBlockRangeOp::verifyRegions() {
  return verifyModRegion(getOperation(), getMaskMod(), "mask_mod",
                         maskModArguments(getContext()), std::nullopt,
                         IntegerType::get(getContext(), 1));
}

/// Checks a `[batch, seq, heads, head_dim]` memref against a `[rows, D]` tile.
static LogicalResult verifyTileAccess(Operation *op, Value memref, Value tile,
                                      int64_t gqaRatio) {
  auto memrefType = cast<MemRefType>(memref.getType());
  if (memrefType.getRank() != 4)
    return op->emitOpError() << "memref must have rank 4 ([batch, seq, heads, "
                                "head_dim]), got rank "
                             << memrefType.getRank();
  // f16/bf16 tiles of the attention's tensors, or f32 ones of the
  // backward's dQ accumulator.
  if (failed(verifyTile(op, "tile", tile.getType(), 2,
                        memrefType.getElementType().isF32())))
    return failure();
  auto tileType = cast<RankedTensorType>(tile.getType());
  if (tileType.getElementType() != memrefType.getElementType())
    return op->emitOpError() << "tile element type " << tileType.getElementType()
                             << " does not match the memref's "
                             << memrefType.getElementType();
  if (failed(verifyDim(op, "tile head dim", tileType.getDimSize(1),
                       "the memref's head dim", memrefType.getDimSize(3))))
    return failure();
  int64_t heads = memrefType.getDimSize(2);
  if (ShapedType::isDynamic(heads) || heads % gqaRatio != 0)
    return op->emitOpError() << "gqa_ratio " << gqaRatio
                             << " must divide the memref's static heads ("
                             << shapeString({heads}) << ")";
  return success();
}

LogicalResult LoadQTileOp::verify() {
  return verifyTileAccess(getOperation(), getSource(), getResult(),
                          getGqaRatio());
}

LogicalResult LoadKvTileOp::verify() {
  if (getBlockTable()) {
    int64_t page = cast<MemRefType>(getSource().getType()).getDimSize(1);
    if (ShapedType::isDynamic(page) || page < 16 || (page & (page - 1)) != 0)
      return emitOpError() << "reads a paged cache whose page size ("
                           << shapeString({page})
                           << ") is not a static power of two of at least 16";
  }
  return verifyTileAccess(getOperation(), getSource(), getResult(), 1);
}

/// A varlen store's span: none, or the sequence's first row and length.
static LogicalResult verifySpan(Operation *op, ValueRange span) {
  if (!span.empty() && span.size() != 2)
    return op->emitOpError() << "span takes the sequence's first row and its "
                                "length (two values), got "
                             << span.size();
  return success();
}

LogicalResult StoreOTileOp::verify() {
  if (failed(verifySpan(getOperation(), getSpan())))
    return failure();
  int64_t column = static_cast<int64_t>(getColumn());
  auto tileType = cast<RankedTensorType>(getTile().getType());
  auto destType = cast<MemRefType>(getDest().getType());
  // A thread-held chunk of columns (level C): its columns inside O's head
  // dim; otherwise the whole tile.
  if (column != 0 ||
      (tileType.getRank() == 2 && destType.getRank() == 4 &&
       !destType.isDynamicDim(3) &&
       tileType.getDimSize(1) < destType.getDimSize(3))) {
    if (destType.getRank() != 4 || destType.isDynamicDim(3) ||
        tileType.getRank() != 2 || tileType.isDynamicDim(1) ||
        column + tileType.getDimSize(1) > destType.getDimSize(3) ||
        tileType.getElementType() != destType.getElementType())
      return emitOpError() << "stores columns [" << column << ", "
                           << column + (tileType.getRank() == 2
                                                 ? tileType.getDimSize(1)
                                                 : 0)
                           << ") of " << tileType
                           << ", which must lie inside O's static head dim "
                              "with O's element type: "
                           << destType;
    int64_t heads = destType.getDimSize(2);
    if (ShapedType::isDynamic(heads) || heads % getGqaRatio() != 0)
      return emitOpError() << "gqa_ratio " << getGqaRatio()
                           << " must divide the memref's static heads ("
                           << shapeString({heads}) << ")";
    return success();
  }
  return verifyTileAccess(getOperation(), getDest(), getTile(), getGqaRatio());
}

/// O's memref and a split-KV workspace, as the split ops take them.
static LogicalResult verifySplitOperands(Operation *op, Value out,
                                         Value workspace, int64_t gqaRatio) {
  auto outType = cast<MemRefType>(out.getType());
  if (outType.getRank() != 4)
    return op->emitOpError() << "O must have rank 4 ([batch, seq, heads, "
                                "head_dim]), got "
                             << outType;
  int64_t heads = outType.getDimSize(2);
  if (ShapedType::isDynamic(heads) || heads % gqaRatio != 0 ||
      outType.isDynamicDim(3))
    return op->emitOpError() << "gqa_ratio " << gqaRatio
                             << " must divide O's static heads, and O's head "
                                "dim must be static: got "
                             << outType;
  return fa4::detail::verifySplitWorkspaceType(
      [op] { return op->emitOpError(); },
      cast<MemRefType>(workspace.getType()));
}

LogicalResult StorePartialOOp::verify() {
  if (failed(verifyTile(getOperation(), "tile", getTile().getType(), 2, true)) ||
      failed(verifySplitOperands(getOperation(), getOut(), getWorkspace(),
                                 getGqaRatio())))
    return failure();
  auto tile = cast<RankedTensorType>(getTile().getType());
  int64_t headDim = cast<MemRefType>(getOut().getType()).getDimSize(3);
  if (tile.getDimSize(0) > 128 ||
      tile.getDimSize(1) + static_cast<int64_t>(getColumn()) > headDim)
    return emitOpError() << "writes columns [" << getColumn() << ", "
                         << getColumn() + tile.getDimSize(1) << ") of "
                         << tile.getDimSize(0) << " rows; a tile has 128 rows "
                         << "and " << headDim << " columns";
  return success();
}

LogicalResult MergeSplitsOp::verify() {
  if (failed(verifyTile(getOperation(), "lse", getLse().getType(), 1, true)) ||
      failed(verifySplitOperands(getOperation(), getOut(), getWorkspace(),
                                 getGqaRatio())))
    return failure();
  if (!isInputElementType(cast<MemRefType>(getOut().getType()).getElementType()))
    return emitOpError() << "O must hold f16 or bf16, got "
                         << getOut().getType();
  if (Value lse = getLseOut()) {
    auto type = cast<MemRefType>(lse.getType());
    if (type.getRank() != 3 || !type.getElementType().isF32())
      return emitOpError() << "LSE memref must be rank-3 f32 ([batch, q_heads, "
                              "seq_q]), got "
                           << type;
  }
  return success();
}

LogicalResult StoreLseTileOp::verify() {
  if (failed(verifySpan(getOperation(), getSpan())))
    return failure();
  auto dest = cast<MemRefType>(getDest().getType());
  if (dest.getRank() != 3 || !dest.getElementType().isF32())
    return emitOpError() << "LSE memref must be rank-3 f32 ([batch, q_heads, "
                            "seq_q]), got "
                         << dest;
  if (failed(verifyTile(getOperation(), "tile", getTile().getType(), 1, true)))
    return failure();
  int64_t heads = dest.getDimSize(1);
  if (ShapedType::isDynamic(heads) || heads % getGqaRatio() != 0)
    return emitOpError() << "gqa_ratio " << getGqaRatio()
                         << " must divide the memref's static heads ("
                         << shapeString({heads}) << ")";
  return success();
}

LogicalResult ScoreMmaOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyTile(op, "query", getQuery().getType(), 2, false)) ||
      failed(verifyTile(op, "key", getKey().getType(), 2, false)) ||
      failed(verifyTile(op, "scores", getScores().getType(), 2, true)))
    return failure();
  if (getElementTypeOrSelf(getQuery()) != getElementTypeOrSelf(getKey()))
    return emitOpError() << "query and key element types differ ("
                         << getElementTypeOrSelf(getQuery()) << " vs "
                         << getElementTypeOrSelf(getKey()) << ")";
  if (failed(verifyDim(op, "key head dim", dimOf(getKey(), 1),
                       "query head dim", dimOf(getQuery(), 1))) ||
      failed(verifyDim(op, "scores rows", dimOf(getScores(), 0), "query rows",
                       dimOf(getQuery(), 0))) ||
      failed(verifyDim(op, "scores columns", dimOf(getScores(), 1),
                       "key rows", dimOf(getKey(), 0))))
    return failure();
  return success();
}

LogicalResult SoftcapOp::verify() {
  return verifyTile(getOperation(), "scores", getScores().getType(), 2, true);
}

LogicalResult ScoreModOp::verify() {
  return verifyTile(getOperation(), "scores", getScores().getType(), 2, true);
}

LogicalResult ScoreModOp::verifyRegions() {
  return verifyModRegion(getOperation(), getBody(), "score_mod",
                         scoreModArguments(getContext()),
                         TypeRange(getExtras().getTypes()),
                         Float32Type::get(getContext()));
}

LogicalResult MaskOp::verify() {
  if (failed(verifyTile(getOperation(), "scores", getScores().getType(), 2,
                        true)))
    return failure();
  bool hasRegion = !getMaskMod().empty();
  if (hasRegion != static_cast<bool>(getBatch()) ||
      static_cast<bool>(getBatch()) != static_cast<bool>(getHead()))
    return emitOpError() << "takes the task's batch and head (`at %b, %h`) "
                            "exactly when it has a mask_mod region";
  if (!hasRegion && !getExtras().empty())
    return emitOpError() << "has extras but no mask_mod region";
  return verifyMaskBounds(getOperation(), getMask(), getWindowLeft(),
                          getWindowRight());
}

LogicalResult MaskOp::verifyRegions() {
  return verifyModRegion(getOperation(), getMaskMod(), "mask_mod",
                         maskModArguments(getContext()),
                         TypeRange(getExtras().getTypes()),
                         IntegerType::get(getContext(), 1));
}

/// Row statistics hold one f32 per row of the tile they describe.
static LogicalResult verifyRowVector(Operation *op, StringRef name, Value row,
                                     int64_t rows) {
  if (failed(verifyTile(op, name, row.getType(), 1, true)))
    return failure();
  return verifyDim(op, (name + " length").str(), dimOf(row, 0), "tile rows",
                   rows);
}

LogicalResult OnlineSoftmaxOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyTile(op, "scores", getScores().getType(), 2, true)) ||
      failed(verifyTile(op, "probs", getProbs().getType(), 2, false)))
    return failure();
  if (getScores().getType().getShape() != getProbs().getType().getShape())
    return emitOpError() << "probs shape "
                         << shapeString(getProbs().getType().getShape())
                         << " does not match scores shape "
                         << shapeString(getScores().getType().getShape());
  // A stale max lets the probabilities reach 2^(threshold + shift), which
  // must stay within their type: e4m3's 448 (2^8.807), f16's 65504
  // (2^15.9993).
  Type probs = getProbs().getType().getElementType();
  float reach = getRescaleThreshold().convertToFloat() + getProbShift();
  if (isa<Float8E4M3FNType>(probs) && !(reach <= 8.8f))
    return emitOpError() << "probabilities in f8E4M3FN reach 2^"
                         << formatNumber(reach)
                         << " (rescale_threshold + prob_shift), past e4m3's "
                            "largest value 448 (2^8.8)";
  if (auto type = dyn_cast<FloatType>(probs); type && !isa<Float8E4M3FNType>(probs)) {
    double largest =
        APFloat::getLargest(type.getFloatSemantics()).convertToDouble();
    if (!(reach <= std::log2(largest)))
      return emitOpError() << "probabilities in " << probs << " reach 2^"
                           << formatNumber(reach)
                           << " (rescale_threshold + prob_shift), past its "
                              "largest value "
                           << formatNumber(static_cast<float>(largest))
                           << " (2^" << formatNumber(std::log2(largest))
                           << ")";
  }
  return verifyRowVector(op, "row_max", getRowMax(), dimOf(getScores(), 0));
}

LogicalResult CorrectionOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyTile(op, "acc", getAcc().getType(), 2, true)))
    return failure();
  return verifyRowVector(op, "acc_scale", getAccScale(), dimOf(getAcc(), 0));
}

LogicalResult ValueMmaOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyTile(op, "probs", getProbs().getType(), 2, false)) ||
      failed(verifyTile(op, "value", getValue().getType(), 2, false)) ||
      failed(verifyTile(op, "acc", getAcc().getType(), 2, true)))
    return failure();
  if (getElementTypeOrSelf(getProbs()) != getElementTypeOrSelf(getValue()))
    return emitOpError() << "probs and value element types differ ("
                         << getElementTypeOrSelf(getProbs()) << " vs "
                         << getElementTypeOrSelf(getValue()) << ")";
  if (failed(verifyDim(op, "value rows", dimOf(getValue(), 0),
                       "probs columns", dimOf(getProbs(), 1))) ||
      failed(verifyDim(op, "acc rows", dimOf(getAcc(), 0), "probs rows",
                       dimOf(getProbs(), 0))) ||
      failed(verifyDim(op, "acc columns", dimOf(getAcc(), 1), "value columns",
                       dimOf(getValue(), 1))))
    return failure();
  return success();
}

LogicalResult NormalizeOp::verify() {
  Operation *op = getOperation();
  // O in the input's type, or in f32 for a split-KV part's partial O.
  bool outF32 = getOut().getType().getElementType().isF32();
  if (failed(verifyTile(op, "acc", getAcc().getType(), 2, true)) ||
      failed(verifyTile(op, "out", getOut().getType(), 2, outF32)))
    return failure();
  if (isa<Float8E4M3FNType>(getOut().getType().getElementType()))
    return emitOpError() << "out must hold f16, bf16 or f32 (an FP8 "
                            "attention's O is f16 or bf16)";
  if (getAcc().getType().getShape() != getOut().getType().getShape())
    return emitOpError() << "out shape "
                         << shapeString(getOut().getType().getShape())
                         << " does not match acc shape "
                         << shapeString(getAcc().getType().getShape());
  return verifyRowVector(op, "row_max", getRowMax(), dimOf(getAcc(), 0));
}

namespace {
/// FP8's pieces on one op: the normalizations' (fa4.normalize and the
/// finalizes) factor, out_factor and shift, or the scores' factor of the
/// ops that read the scores (the softmax and its shift, the softcap, the
/// score_mod).
struct Fp8Operands {
  Value factor, outFactor;
  int64_t shift = 0;
  bool normalization = false;
};
} // namespace

static std::optional<Fp8Operands> fp8Operands(Operation *op) {
  auto normalization = [](auto n) {
    return Fp8Operands{n.getFactor(), n.getOutFactor(),
                       static_cast<int64_t>(n.getProbShift()), true};
  };
  if (auto n = dyn_cast<NormalizeOp>(op))
    return normalization(n);
  if (auto f = dyn_cast<FinalizeOOp>(op))
    return normalization(f);
  if (auto f = dyn_cast<FinalizePartialOOp>(op))
    return normalization(f);
  if (auto f = dyn_cast<FinalizeORowsOp>(op))
    return normalization(f);
  if (auto softmax = dyn_cast<OnlineSoftmaxOp>(op))
    return Fp8Operands{softmax.getFactor(), Value(),
                       static_cast<int64_t>(softmax.getProbShift())};
  if (auto softcap = dyn_cast<SoftcapOp>(op))
    return Fp8Operands{softcap.getFactor()};
  if (auto scoreMod = dyn_cast<ScoreModOp>(op))
    return Fp8Operands{scoreMod.getFactor()};
  return std::nullopt;
}

bool mlir::fa4::holdsFp8Pieces(Operation *func) {
  bool found = false;
  if (auto function = dyn_cast<FunctionOpInterface>(func))
    for (Type type : function.getArgumentTypes())
      found |= isa<Float8E4M3FNType>(getElementTypeOrSelf(type));
  if (KernelSpecAttr spec = getKernelSpec(func))
    found |= spec.getQDescale() || spec.getKDescale() || spec.getVDescale();
  func->walk([&](Operation *op) {
    found |= isa<LoadDescaleOp>(op);
    if (std::optional<Fp8Operands> pieces = fp8Operands(op))
      found |= pieces->factor || pieces->outFactor || pieces->shift != 0;
  });
  return found;
}

bool mlir::fa4::runsAsDensePairs(Operation *func) {
  bool pair = false, dense = true;
  func->walk([&](Operation *op) {
    if (auto specialize = dyn_cast<WarpSpecializeOp>(op))
      pair |= specialize.getCtaPair();
    else if (auto range = dyn_cast<KvBlockRangeOp>(op))
      dense &= range.getMask() == MaskKind::none &&
               range.getMaskMod().empty() && !range.getBlockMask();
  });
  return pair && dense;
}

bool mlir::fa4::holdsScoreMod(Operation *func) {
  return func
      ->walk([](ScoreModOp) { return WalkResult::interrupt(); })
      .wasInterrupted();
}

/// The descale tables `value` is computed from: those of the
/// fa4.load_descale ops it reaches through its defining ops.
static llvm::SmallDenseSet<Value, 4> descaleTables(Value value) {
  llvm::SmallDenseSet<Value, 4> tables;
  llvm::SmallPtrSet<Operation *, 8> seen;
  SmallVector<Value> work{value};
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    if (auto load = dyn_cast<LoadDescaleOp>(def)) {
      tables.insert(load.getTable());
      continue;
    }
    llvm::append_range(work, def->getOperands());
  }
  return tables;
}

/// verifyFp8Program's rule that each factor stands for its tables: the
/// scores' factor operands (fa4.online_softmax, fa4.softcap,
/// fa4.score_mod, the normalizations' `factor`) are made from exactly Q's
/// and K's descale tables of fa4.spec, O's (`out_factor`) from V's; and
/// where the spec has Q's or K's tables, the scores take them — in every
/// softmax's exponent, or in every softcap or score_mod that rewrites them.
static LogicalResult verifyFp8FactorTables(Operation *func) {
  KernelSpecAttr spec = getKernelSpec(func);
  auto function = dyn_cast<FunctionOpInterface>(func);
  if (!spec || !function || function.isExternal())
    return success();
  Block &entry = function.getFunctionBody().front();
  auto table = [&](std::optional<int64_t> position) -> Value {
    if (!position || *position >= int64_t(spec.getExtras().size()) ||
        spec.getExtras()[*position] >= int64_t(entry.getNumArguments()))
      return Value();
    return entry.getArgument(spec.getExtras()[*position]);
  };
  llvm::SmallDenseSet<Value, 4> scores, values;
  for (Value t : {table(spec.getQDescale()), table(spec.getKDescale())})
    if (t)
      scores.insert(t);
  if (Value t = table(spec.getVDescale()))
    values.insert(t);
  auto describe = [](const llvm::SmallDenseSet<Value, 4> &set) {
    std::string text;
    llvm::raw_string_ostream os(text);
    if (set.empty())
      return std::string("no descale table");
    SmallVector<unsigned> numbers;
    for (Value v : set)
      numbers.push_back(cast<BlockArgument>(v).getArgNumber());
    llvm::sort(numbers);
    os << (numbers.size() == 1 ? "the table of argument "
                               : "the tables of arguments ");
    llvm::interleaveComma(numbers, os);
    return text;
  };
  auto check = [&](Operation *op, Value factor, bool out) -> LogicalResult {
    if (!factor)
      return success();
    llvm::SmallDenseSet<Value, 4> got = descaleTables(factor);
    const llvm::SmallDenseSet<Value, 4> &want = out ? values : scores;
    bool same = got.size() == want.size() &&
                llvm::all_of(got, [&](Value v) { return want.contains(v); });
    if (same)
      return success();
    return op->emitOpError()
           << "takes " << (out ? "an out_factor" : "a factor") << " made from "
           << describe(got) << ", but fa4.spec's "
           << (out ? "v_descale names " : "q_descale and k_descale name ")
           << describe(want) << (out ? " (O's factor is V's descale)"
                                     : " (the scores' factor is Q's times "
                                       "K's descale)");
  };
  bool rewritten = false, softmaxMissing = false, rewriteMissing = false;
  Operation *missing = nullptr;
  WalkResult walk = func->walk([&](Operation *op) -> WalkResult {
    std::optional<Fp8Operands> pieces = fp8Operands(op);
    if (!pieces)
      return WalkResult::advance();
    if (failed(check(op, pieces->factor, false)) ||
        failed(check(op, pieces->outFactor, true)))
      return WalkResult::interrupt();
    // Which ops must carry the scores' factor: the rewrites of the scores
    // when there are any, else every softmax.
    if (isa<SoftcapOp, ScoreModOp>(op)) {
      rewritten = true;
      if (!pieces->factor) {
        rewriteMissing = true;
        missing = op;
      }
    } else if (isa<OnlineSoftmaxOp>(op) && !pieces->factor) {
      softmaxMissing = true;
      missing = missing ? missing : op;
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // Q's and K's tables reach the scores: through the softcap or score_mod
  // that rewrites them (each of them), else through every exponent.
  if (!scores.empty() && (rewritten ? rewriteMissing : softmaxMissing))
    return missing->emitOpError()
           << "leaves out the scores' factor (Q's times K's descale), which "
              "fa4.spec's q_descale and k_descale call for"
           << (rewritten ? " in every softcap or score_mod that rewrites the "
                           "scores"
                         : " in every softmax's exponent");
  return success();
}

LogicalResult mlir::fa4::verifyFp8Program(Operation *func) {
  std::optional<int64_t> shift;
  Operation *first = nullptr;
  WalkResult walk = func->walk([&](Operation *op) -> WalkResult {
    // The shift is the softmax's and the normalizations'.
    std::optional<Fp8Operands> pieces = fp8Operands(op);
    if (!pieces || !(pieces->normalization || isa<OnlineSoftmaxOp>(op)))
      return WalkResult::advance();
    std::optional<int64_t> own = pieces->shift;
    if (!shift) {
      shift = own;
      first = op;
    } else if (*own != *shift) {
      InFlightDiagnostic diag =
          op->emitOpError()
          << "has prob_shift = " << *own << ", but the program's "
          << first->getName() << " has " << *shift
          << "; the probabilities' shift must be one throughout (the sums "
             "carry it, the LSE takes it off)";
      diag.attachNote(first->getLoc()) << "the first shift";
      return diag;
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // Each factor is made from the tables it stands for: the scores' (the
  // exponent's, the softcap's, the score_mod's, the LSE's) from Q's and K's
  // descales, O's (out_factor) from V's, whatever arithmetic joins them.
  if (failed(verifyFp8FactorTables(func)))
    return failure();
  // The factors agree: where the softmax's exponent carries one, the
  // normalization's LSE does (its max is in the softmax's units), and a
  // v_descale table is O's out_factor wherever O is normalized.
  std::optional<bool> softmaxFactor;
  func->walk([&](OnlineSoftmaxOp softmax) {
    if (!softmaxFactor)
      softmaxFactor = static_cast<bool>(softmax.getFactor());
  });
  KernelSpecAttr spec = getKernelSpec(func);
  bool vDescale = spec && spec.getVDescale();
  walk = func->walk([&](Operation *op) -> WalkResult {
    std::optional<Fp8Operands> pieces = fp8Operands(op);
    if (!pieces || !pieces->normalization)
      return WalkResult::advance();
    bool factor = bool(pieces->factor), outFactor = bool(pieces->outFactor);
    if (softmaxFactor && factor != *softmaxFactor)
      return op->emitOpError()
             << (factor ? "multiplies its LSE's max by a factor the "
                          "program's fa4.online_softmax does not take"
                        : "leaves out the factor the program's "
                          "fa4.online_softmax multiplies its exponent by")
             << "; the LSE's max must be scaled as the softmax's";
    if (vDescale && !outFactor)
      return op->emitOpError()
             << "leaves out V's descale (out_factor), which the kernel's "
                "v_descale table gives O";
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // Level C: the 8-bit stages.
  llvm::DenseSet<Value> transposedStages;
  func->walk([&](WarpgroupValueMmaOp mma) {
    if (mma.getValue().getType().getElementType().getIntOrFloatBitWidth() == 8)
      transposedStages.insert(mma.getValue());
  });
  walk = func->walk([&](Operation *op) -> WalkResult {
    if (auto alloc = dyn_cast<SmemAllocOp>(op)) {
      auto type = dyn_cast<SmemType>(alloc.getResult().getType());
      if (!type || type.getElementType().getIntOrFloatBitWidth() != 8)
        return WalkResult::advance();
      // V transposed's rows are a block's keys (8-bit wgmma's 32-key
      // steps, in 128-key boxes).
      if (transposedStages.contains(alloc.getResult())) {
        if (type.getCols() < 32 || type.getCols() > 256 ||
            type.getCols() % 32 != 0)
          return alloc.emitOpError()
                 << "allocates V transposed's 8-bit stages of "
                 << type.getCols()
                 << " keys; they hold a block of a multiple of 32 keys from "
                    "32 to 256";
        return WalkResult::advance();
      }
      if (type.getCols() != 64 && type.getCols() != 96 &&
          type.getCols() != 128 && type.getCols() != 192 &&
          type.getCols() != 256)
        return alloc.emitOpError()
               << "allocates 8-bit tiles of " << type.getCols()
               << " columns; an 8-bit tile's rows are whole or part 128-byte "
                  "swizzle lines of a head dim (64, 96, 128, 192 or 256 "
                  "columns), or V transposed's block of keys";
      return WalkResult::advance();
    }
    auto load = dyn_cast<TmaLoadOp>(op);
    if (!load)
      return WalkResult::advance();
    if (load.getTransposed() != transposedStages.contains(load.getBuffer()))
      return load.emitOpError()
             << (load.getTransposed()
                     ? "loads a transposed tile into a buffer no 8-bit "
                       "fa4.wgmma_value reads as V"
                     : "loads a tile untransposed into a buffer an 8-bit "
                       "fa4.wgmma_value reads as V transposed ([head_dim, "
                       "keys]); the load needs `transposed`");
    if (load.getTransposed() && load.getClearFrom())
      return load.emitOpError()
             << "clears rows of a transposed tile; its rows are V's columns "
                "(the runtime's copy of V is zero past the sequence)";
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

LogicalResult LoadDescaleOp::verify() {
  auto table = cast<MemRefType>(getTable().getType());
  if (table.getRank() != 2 || !table.getElementType().isF32())
    return emitOpError() << "table " << table
                         << " is not an f32 memref [batch, kv_heads]";
  return success();
}

//===----------------------------------------------------------------------===//
// Shared with the backward ops (Verify.h)
//===----------------------------------------------------------------------===//

LogicalResult mlir::fa4::detail::verifyModRegionOf(
    Operation *op, Region &region, StringRef name, bool scoreMod,
    std::optional<TypeRange> extras) {
  MLIRContext *context = op->getContext();
  return scoreMod ? verifyModRegion(op, region, name,
                                    scoreModArguments(context), extras,
                                    Float32Type::get(context))
                  : verifyModRegion(op, region, name,
                                    maskModArguments(context), extras,
                                    IntegerType::get(context, 1));
}
LogicalResult mlir::fa4::detail::verifyTileType(Operation *op, StringRef name,
                                                Type type, int64_t rank,
                                                bool wantF32) {
  return verifyTile(op, name, type, rank, wantF32);
}
LogicalResult mlir::fa4::detail::verifyTileAccessOf(Operation *op,
                                                    Value memref, Value tile,
                                                    int64_t gqaRatio) {
  return verifyTileAccess(op, memref, tile, gqaRatio);
}
LogicalResult mlir::fa4::detail::verifyTensorOperandOf(Operation *op,
                                                       StringRef name,
                                                       Value value) {
  return verifyTensorOperand(op, name, value, 2,
                             "[batch, seq, heads, head_dim]");
}
LogicalResult mlir::fa4::detail::verifyExtrasOf(Operation *op,
                                                OperandRange extras) {
  return verifyExtras(op, extras);
}
LogicalResult mlir::fa4::detail::verifyScoring(Operation *op, float scale,
                                               float softcap,
                                               bool hasScoreMod) {
  if (failed(verifyScaleAndSoftcap([op] { return op->emitOpError(); }, scale,
                                   softcap)))
    return failure();
  if (softcap > 0.0f && hasScoreMod)
    return op->emitOpError() << "has both a softcap and a score_mod; write "
                                "the softcap in the score_mod region";
  return success();
}
LogicalResult mlir::fa4::detail::verifyHeads(EmitError emitError,
                                             int64_t qHeads, int64_t kvHeads) {
  // Heads are 32-bit in the kernel's index arithmetic and TMA coordinates.
  if (qHeads > std::numeric_limits<int32_t>::max())
    return emitError() << "Q heads (" << qHeads
                       << ") must be below 2^31: the kernel indexes heads in "
                          "32 bits";
  if (kvHeads <= 0 || qHeads % kvHeads != 0)
    return emitError() << "Q heads (" << qHeads
                       << ") must be a multiple of K/V heads (" << kvHeads
                       << ")";
  return success();
}
std::string mlir::fa4::detail::shapeText(ArrayRef<int64_t> shape) {
  return shapeString(shape);
}

#define GET_OP_CLASSES
#include "fa4/Dialect/FA4/IR/FA4Ops.cpp.inc"
