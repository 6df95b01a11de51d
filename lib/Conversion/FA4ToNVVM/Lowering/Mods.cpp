//===- Mods.cpp - key bounds and mod regions, per thread ------------------===//
//
// The softmax inlines a score_mod or mask_mod region once per score it owns
// (thread t owns row t): the region's arith ops are cloned as they are, its
// loads of extras become global loads through the kernel's pointers, and the
// math ops it may hold are lowered here onto the MUFU approximations the
// rest of the softmax uses.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

/// The least (or the greatest) of `value` over a Min/Max node's operands, as
/// signed integer arithmetic.
static Value fold(OpBuilder &b, Location loc, ArrayRef<KeyBound> operands,
                  bool least, function_ref<Value(const KeyBound &)> value) {
  Value result;
  for (const KeyBound &operand : operands) {
    Value next = value(operand);
    result = !result ? next
             : least ? arith::MinSIOp::create(b, loc, result, next).getResult()
                     : arith::MaxSIOp::create(b, loc, result, next).getResult();
  }
  return result;
}

Value Lowering::emitKeyBound(const KeyBound &bound, Value position, Value seqQ,
                             Value seqK, bool wide) {
  auto constant = [&](int64_t value) { return wide ? i64(value) : index(value); };
  switch (bound.kind) {
  case KeyBound::Kind::Diagonal: {
    Value value = arith::AddIOp::create(b, loc(), position, constant(bound.offset));
    if (bound.bottomRight)
      value = arith::SubIOp::create(
          b, loc(), arith::AddIOp::create(b, loc(), value, seqK), seqQ);
    return value;
  }
  case KeyBound::Kind::Chunk: {
    // Positions are never negative: a truncating division is the floor.
    Value start = arith::MulIOp::create(
        b, loc(),
        arith::DivSIOp::create(b, loc(), position, constant(bound.chunk)),
        constant(bound.chunk));
    return arith::AddIOp::create(b, loc(), start, constant(bound.offset));
  }
  case KeyBound::Kind::Constant:
    return constant(bound.offset);
  case KeyBound::Kind::Min:
  case KeyBound::Kind::Max:
    return fold(b, loc(), bound.operands, bound.kind == KeyBound::Kind::Min,
                [&](const KeyBound &operand) {
                  return emitKeyBound(operand, position, seqQ, seqK, wide);
                });
  }
  return constant(bound.offset);
}

/// Whether a bound adds an offset (or a chunk) of 2^24 or more: a window
/// side from 2^24 up to kSequenceLimit (past it a side is open, as
/// maskBandFor reads it). A mask_mod's analysed offsets stay below 2^24.
static bool hasLargeOffset(const KeyBound &bound) {
  constexpr int64_t kSmall = int64_t(1) << 24;
  if (bound.offset <= -kSmall || bound.offset >= kSmall || bound.chunk >= kSmall)
    return true;
  return llvm::any_of(bound.operands, hasLargeOffset);
}

Value Lowering::emitFirstReaching(const KeyBound &bound, Value target,
                                  Value seqQ, Value seqK) {
  // In 64 bits: a window side may be up to 2^31 - 1 keys, and target minus
  // such an offset, plus seq_q, does not fit the kernel's 32-bit index. The
  // result, a query position or "never", is clamped back into [0, 2^31).
  Type i64Type = b.getI64Type();
  auto wide = [&](Value value) -> Value {
    return arith::IndexCastOp::create(b, loc(), i64Type, value);
  };
  Value first = emitFirstReaching64(bound, wide(target), wide(seqQ), wide(seqK));
  first = arith::MinSIOp::create(b, loc(), first,
                                 i64(std::numeric_limits<int32_t>::max()));
  return arith::IndexCastOp::create(b, loc(), b.getIndexType(), first);
}

Value Lowering::emitFirstReaching64(const KeyBound &bound, Value target,
                                    Value seqQ, Value seqK) {
  Value zero = i64(0);
  switch (bound.kind) {
  case KeyBound::Kind::Diagonal: {
    Value first = arith::SubIOp::create(b, loc(), target, i64(bound.offset));
    if (bound.bottomRight)
      first = arith::SubIOp::create(
          b, loc(), arith::AddIOp::create(b, loc(), first, seqQ), seqK);
    return arith::MaxSIOp::create(b, loc(), first, zero);
  }
  case KeyBound::Kind::Chunk: {
    // floor(q / C)·C >= x  <=>  q >= C·ceil(x / C).
    Value x = arith::SubIOp::create(b, loc(), target, i64(bound.offset));
    Value chunks = arith::CeilDivSIOp::create(b, loc(), x, i64(bound.chunk));
    return arith::MaxSIOp::create(
        b, loc(), arith::MulIOp::create(b, loc(), chunks, i64(bound.chunk)),
        zero);
  }
  case KeyBound::Kind::Constant: {
    Value reaches = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sge,
                                          i64(bound.offset), target);
    return arith::SelectOp::create(b, loc(), reaches, zero,
                                   i64(KeyBound::kNever));
  }
  case KeyBound::Kind::Min:
  case KeyBound::Kind::Max:
    // max(a, b) reaches the target when either does, min(a, b) when both.
    return fold(b, loc(), bound.operands, bound.kind == KeyBound::Kind::Max,
                [&](const KeyBound &operand) {
                  return emitFirstReaching64(operand, target, seqQ, seqK);
                });
  }
  return zero;
}

Value Lowering::emitKeyEdges(Value position, const KeyBounds &bounds,
                             Value seqQ, Value seqK, Value &end) {
  // A position plus an offset below 2^24, plus seq_k - seq_q, stays within
  // 32 bits for every launch runtime::checkShapes accepts (sequences below
  // kSequenceLimit). A larger offset (a window side of 2^24 keys or more)
  // would wrap the kernel's index: its edges are computed in 64 bits, then
  // clamped into [0, seq_k].
  bool wide = (bounds.lower && hasLargeOffset(*bounds.lower)) ||
              (bounds.upper && hasLargeOffset(*bounds.upper));
  Type type = wide ? Type(b.getI64Type()) : Type(b.getIndexType());
  auto cast = [&](Value value, Type to) -> Value {
    return wide ? arith::IndexCastOp::create(b, loc(), to, value).getResult()
                : value;
  };
  Value zero = wide ? i64(0) : index(0), one = wide ? i64(1) : index(1);
  Value edgeSeqQ = cast(seqQ, type), edgeSeqK = cast(seqK, type),
        edgePosition = cast(position, type);
  Value begin = zero;
  if (bounds.lower) {
    begin = arith::MaxSIOp::create(
        b, loc(), zero,
        emitKeyBound(*bounds.lower, edgePosition, edgeSeqQ, edgeSeqK, wide));
    if (wide)
      begin = arith::MinSIOp::create(b, loc(), edgeSeqK, begin);
  }
  Value last = edgeSeqK;
  if (bounds.upper)
    last = arith::MinSIOp::create(
        b, loc(), edgeSeqK,
        arith::AddIOp::create(
            b, loc(),
            emitKeyBound(*bounds.upper, edgePosition, edgeSeqQ, edgeSeqK, wide),
            one));
  end = cast(arith::MaxSIOp::create(b, loc(), begin, last), b.getIndexType());
  return cast(begin, b.getIndexType());
}

bool Lowering::loadsIndexedBy(Region &region, unsigned argument) {
  Block &body = region.front();
  llvm::SmallPtrSet<Value, 16> dependent = {body.getArgument(argument)};
  for (Operation &op : body) {
    if (auto load = dyn_cast<memref::LoadOp>(op))
      if (llvm::any_of(load.getIndices(),
                       [&](Value index) { return dependent.contains(index); }))
        return true;
    if (llvm::any_of(op.getOperands(),
                     [&](Value operand) { return dependent.contains(operand); }))
      dependent.insert(op.result_begin(), op.result_end());
  }
  return false;
}

Lowering::RowPositions
Lowering::emitRowPositions(Region &region, unsigned queryArgument, Value packed,
                           Value head, int64_t gqaRatio, Value seqQ,
                           Value seqK) {
  RowPositions row;
  Value ratio = index(gqaRatio);
  row.query = arith::DivUIOp::create(b, loc(), packed, ratio);
  if (loadsIndexedBy(region, queryArgument))
    row.query = arith::MinSIOp::create(
        b, loc(), row.query, arith::SubIOp::create(b, loc(), seqQ, index(1)));
  row.queryHead = arith::AddIOp::create(
      b, loc(), arith::MulIOp::create(b, loc(), head, ratio),
      arith::RemUIOp::create(b, loc(), packed, ratio));
  if (loadsIndexedBy(region, queryArgument + 1))
    row.lastKey = arith::SubIOp::create(b, loc(), seqK, index(1));
  return row;
}

Value Lowering::RowPositions::key(OpBuilder &b, Location loc, Value firstKey,
                                  int64_t column) const {
  Value key = arith::AddIOp::create(
      b, loc, firstKey, arith::ConstantIndexOp::create(b, loc, column));
  return lastKey ? arith::MinSIOp::create(b, loc, key, lastKey).getResult() : key;
}

namespace {
/// The values an index of a mod region may take, exactly (no wrapping).
struct Interval {
  __int128 low, high;
};
} // namespace

/// Whether every `index` value of `region` provably takes the same value in
/// 32 bits as in 64, for positions, batch and head in [0, 2^31): the values
/// fit in int32, unsigned operations see no negative operand. Such a region
/// keeps the kernel's 32-bit index; any other computes its index in 64 bits.
static bool indexFitsIn32Bits(Region &region) {
  constexpr __int128 kMin = INT32_MIN, kMax = INT32_MAX;
  llvm::DenseMap<Value, Interval> known;
  Block &body = region.front();
  for (BlockArgument argument : body.getArguments())
    if (argument.getType().isIndex())
      known[argument] = {0, kMax};
  auto fits = [&](Interval i) { return i.low >= kMin && i.high <= kMax; };
  auto of = [&](Value value) -> std::optional<Interval> {
    auto found = known.find(value);
    if (found == known.end())
      return std::nullopt;
    return found->second;
  };
  for (Operation &op : body) {
    bool touchesIndex =
        llvm::any_of(op.getOperandTypes(), [](Type t) { return t.isIndex(); }) ||
        llvm::any_of(op.getResultTypes(), [](Type t) { return t.isIndex(); });
    if (!touchesIndex)
      continue;
    if (isa<memref::LoadOp>(op))
      continue; // positions, clamped into the sequences
    SmallVector<Interval, 3> in;
    for (Value operand : op.getOperands()) {
      if (!operand.getType().isIndex())
        continue;
      std::optional<Interval> interval = of(operand);
      if (!interval)
        return false;
      in.push_back(*interval);
    }
    bool nonNegative = llvm::all_of(in, [](Interval i) { return i.low >= 0; });
    std::optional<Interval> out;
    if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      auto value = dyn_cast<IntegerAttr>(constant.getValue());
      if (!value)
        return false;
      int64_t v = value.getValue().getSExtValue();
      out = Interval{v, v};
    } else if (isa<arith::AddIOp>(op)) {
      out = Interval{in[0].low + in[1].low, in[0].high + in[1].high};
    } else if (isa<arith::SubIOp>(op)) {
      out = Interval{in[0].low - in[1].high, in[0].high - in[1].low};
    } else if (isa<arith::MulIOp>(op)) {
      __int128 products[] = {in[0].low * in[1].low, in[0].low * in[1].high,
                             in[0].high * in[1].low, in[0].high * in[1].high};
      out = Interval{*std::min_element(std::begin(products), std::end(products)),
                     *std::max_element(std::begin(products), std::end(products))};
    } else if (isa<arith::DivSIOp, arith::FloorDivSIOp, arith::CeilDivSIOp,
                   arith::RemSIOp>(op) ||
               (nonNegative && isa<arith::DivUIOp, arith::RemUIOp>(op))) {
      // |a / b| and |a rem b| are at most |a| (b = 0 traps alike).
      __int128 most = std::max(-in[0].low, in[0].high);
      out = Interval{-most, most};
    } else if (isa<arith::MinSIOp>(op) ||
               (nonNegative && isa<arith::MinUIOp>(op))) {
      out = Interval{std::min(in[0].low, in[1].low),
                     std::min(in[0].high, in[1].high)};
    } else if (isa<arith::MaxSIOp>(op) ||
               (nonNegative && isa<arith::MaxUIOp>(op))) {
      out = Interval{std::max(in[0].low, in[1].low),
                     std::max(in[0].high, in[1].high)};
    } else if (isa<arith::AndIOp, arith::OrIOp, arith::XOrIOp>(op) ||
               (nonNegative && isa<arith::ShRSIOp, arith::ShRUIOp>(op))) {
      // Bitwise operations commute with sign extension; a right shift of a
      // value that fits stays within it.
      out = Interval{kMin, kMax};
    } else if (isa<arith::SelectOp>(op)) {
      out = Interval{std::min(in[0].low, in[1].low),
                     std::max(in[0].high, in[1].high)};
    } else if (auto compare = dyn_cast<arith::CmpIOp>(op)) {
      using P = arith::CmpIPredicate;
      P predicate = compare.getPredicate();
      bool isUnsigned = predicate == P::ult || predicate == P::ule ||
                        predicate == P::ugt || predicate == P::uge;
      if (!nonNegative && isUnsigned)
        return false;
      continue;
    } else if (isa<arith::IndexCastOp, arith::SIToFPOp>(op) ||
               (nonNegative && isa<arith::IndexCastUIOp, arith::UIToFPOp>(op))) {
      if (op.getResult(0).getType().isIndex()) {
        // From a narrower integer, or a 64-bit one of unknown value.
        unsigned width = op.getOperand(0).getType().getIntOrFloatBitWidth();
        if (width > 32)
          return false;
        out = Interval{isa<arith::IndexCastUIOp>(op) ? 0 : kMin, kMax};
      } else {
        continue;
      }
    } else {
      return false;
    }
    if (!out || !fits(*out))
      return false;
    known[op.getResult(0)] = *out;
  }
  return true;
}

Value Lowering::emitWideIndexOp(Operation &op, IRMapping &local) {
  Type i64Type = b.getI64Type();
  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    auto value = dyn_cast<IntegerAttr>(constant.getValue());
    if (!value || !value.getType().isIndex())
      return Value();
    return i64(value.getValue().getSExtValue());
  }
  if (!isa<arith::IndexCastOp, arith::IndexCastUIOp>(op))
    return Value();
  // Casts to and from index are casts to and from i64.
  Value source = local.lookup(op.getOperand(0));
  Type from = source.getType(), to = op.getResult(0).getType();
  if (to.isIndex())
    to = i64Type;
  unsigned fromWidth = from.getIntOrFloatBitWidth();
  unsigned toWidth = to.getIntOrFloatBitWidth();
  if (fromWidth == toWidth)
    return source;
  if (fromWidth > toWidth)
    return arith::TruncIOp::create(b, loc(), to, source);
  if (isa<arith::IndexCastUIOp>(op))
    return arith::ExtUIOp::create(b, loc(), to, source);
  return arith::ExtSIOp::create(b, loc(), to, source);
}

FailureOr<Value> Lowering::emitModRegion(Operation *owner, Region &region,
                                         ArrayRef<Value> leading,
                                         ValueRange extraOperands) {
  Block &body = region.front();
  IRMapping local;
  // The region's `index` is 64-bit, as on the host that wrote it (a front
  // end's linalg.index): where its values may leave int32, or an unsigned
  // operation may see a negative one, the kernel's 32-bit index would wrap
  // large constants and products and change unsigned division, remainder
  // and shifts of negative differences, so it runs in i64. A region whose
  // values provably fit (ALiBi's kv - q) keeps the cheaper 32 bits.
  bool wideIndex = !indexFitsIn32Bits(region);
  Type i64Type = b.getI64Type();
  auto wide = [&](Value value) -> Value {
    return wideIndex && value.getType().isIndex()
               ? arith::IndexCastOp::create(b, loc(), i64Type, value).getResult()
               : value;
  };
  for (auto [argument, value] :
       llvm::zip(body.getArguments().take_front(leading.size()), leading))
    local.map(argument, wide(value));
  Type f32Type = b.getF32Type();
  for (Operation &op : body) {
    if (auto yield = dyn_cast<YieldOp>(op))
      return local.lookup(yield.getValue());
    if (auto load = dyn_cast<memref::LoadOp>(op)) {
      unsigned position =
          cast<BlockArgument>(load.getMemRef()).getArgNumber() - leading.size();
      auto extra = kernel.extras.find(extraOperands[position]);
      if (extra == kernel.extras.end())
        return owner->emitOpError()
               << "reads extra #" << position
               << ", which is not a parameter of the kernel";
      // Row-major: offset = ((i0·n1 + i1)·n2 + i2)...
      Value offset = index(0);
      for (auto [size, indexValue] :
           llvm::zip(extra->second.sizes, load.getIndices()))
        offset = arith::AddIOp::create(
            b, loc(), arith::MulIOp::create(b, loc(), offset, size),
            toIndex(local.lookup(indexValue)));
      Type element = load.getMemRefType().getElementType();
      Value address = LLVM::GEPOp::create(
          b, loc(), extra->second.pointer.getType(), element,
          extra->second.pointer, ValueRange{toI32(offset)});
      // Not marked invariant, though the extras are read-only: with the
      // mark, LLVM hoists every key's load of a table to the top of the row
      // program and the loaded values spill (a relative-position table's
      // did, by 8 bytes).
      local.map(load.getResult(),
                LLVM::LoadOp::create(b, loc(), element, address).getResult());
      continue;
    }
    if (op.getDialect() && op.getDialect()->getNamespace() == "arith") {
      if (wideIndex)
        if (Value widened = emitWideIndexOp(op, local)) {
          local.map(op.getResult(0), widened);
          continue;
        }
      Operation *clone = b.clone(op, local);
      if (wideIndex)
        for (Value result : clone->getResults())
          if (result.getType().isIndex())
            result.setType(i64Type);
      // A multiply and the add that takes it may fuse into one FMA, as CUDA
      // compiles by default (nvcc's --fmad=true).
      if (auto fastMath = dyn_cast<arith::ArithFastMathInterface>(clone)) {
        // (An op built without the attribute has none: no flags yet.)
        arith::FastMathFlagsAttr flags = fastMath.getFastMathFlagsAttr();
        clone->setAttr(fastMath.getFastMathAttrName(),
                       arith::FastMathFlagsAttr::get(
                           b.getContext(),
                           (flags ? flags.getValue() : arith::FastMathFlags::none) |
                               arith::FastMathFlags::contract));
      }
      continue;
    }
    auto unsupported = [&]() -> FailureOr<Value> {
      return owner->emitOpError()
             << "fa4-to-nvvm lowers math.exp, exp2, log, log2, tanh, sqrt, "
                "rsqrt, absf, copysign, fma, floor and ceil on f32 in a mod "
                "region, not '"
             << op.getName() << "' on " << op.getResultTypes();
    };
    if (!isa<math::MathDialect>(op.getDialect()) || op.getNumResults() != 1 ||
        op.getResult(0).getType() != f32Type)
      return unsupported();
    auto operand = [&](unsigned i) { return local.lookup(op.getOperand(i)); };
    Value result =
        llvm::TypeSwitch<Operation *, Value>(&op)
            .Case([&](math::ExpOp) {
              return ex2(arith::MulFOp::create(b, loc(), operand(0),
                                               f32(float(M_LOG2E))));
            })
            .Case([&](math::Exp2Op) { return ex2(operand(0)); })
            .Case([&](math::LogOp) {
              return arith::MulFOp::create(b, loc(), lg2(operand(0)),
                                           f32(float(M_LN2)))
                  .getResult();
            })
            .Case([&](math::Log2Op) { return lg2(operand(0)); })
            .Case([&](math::TanhOp) { return tanh(operand(0)); })
            .Case([&](math::SqrtOp) {
              return LLVM::SqrtOp::create(b, loc(), operand(0)).getResult();
            })
            .Case([&](math::RsqrtOp) {
              return approximate("rsqrt.approx.ftz.f32", operand(0));
            })
            .Case([&](math::AbsFOp) {
              return LLVM::FAbsOp::create(b, loc(), operand(0)).getResult();
            })
            // (Also the derivative fa4-tile writes for absf.)
            .Case([&](math::CopySignOp) {
              return LLVM::CopySignOp::create(b, loc(), operand(0), operand(1))
                  .getResult();
            })
            // (Also what fa4-tile's derivative of remf reads.)
            .Case([&](math::FloorOp) {
              return LLVM::FFloorOp::create(b, loc(), operand(0)).getResult();
            })
            .Case([&](math::CeilOp) {
              return LLVM::FCeilOp::create(b, loc(), operand(0)).getResult();
            })
            .Case([&](math::FmaOp) {
              return LLVM::FMAOp::create(b, loc(), operand(0), operand(1),
                                         operand(2))
                  .getResult();
            })
            .Default([](Operation *) { return Value(); });
    if (!result)
      return unsupported();
    local.map(op.getResult(0), result);
  }
  return owner->emitOpError() << "mod region ends without fa4.yield";
}
