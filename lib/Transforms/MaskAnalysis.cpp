//===- MaskAnalysis.cpp - the key bounds a mask_mod region implies --------===//

#include "fa4/Transforms/MaskAnalysis.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace mlir::fa4;

namespace {

/// Region arguments: batch, q_head, q_idx, kv_idx.
constexpr unsigned kQueryArgument = 2, kKeyArgument = 3;

/// Offsets and coefficients beyond this are not read as bounds (the
/// predicate then runs per element): the kernel adds a bound's offset to
/// 32-bit positions, which must not wrap.
constexpr int64_t kOffsetLimit = int64_t(1) << 24;

/// kv·kv + q·q + qDiv·floor(q/divisor) + kvDiv·floor(kv/divisor) + constant.
struct Linear {
  int64_t kv = 0, q = 0, qDiv = 0, kvDiv = 0, constant = 0;
  int64_t divisor = 0; // 0 while no quotient appears

  bool small() const {
    for (int64_t value : {kv, q, qDiv, kvDiv, constant})
      if (value <= -kOffsetLimit || value >= kOffsetLimit)
        return false;
    return true;
  }
  /// Every term non-negative (q and kv are): an unsigned comparison of two
  /// such forms is the signed one.
  bool nonNegative() const {
    return kv >= 0 && q >= 0 && qDiv >= 0 && kvDiv >= 0 && constant >= 0;
  }
};

std::optional<Linear> combine(const Linear &a, const Linear &b, int64_t sign) {
  if (a.divisor && b.divisor && a.divisor != b.divisor)
    return std::nullopt;
  Linear sum;
  sum.kv = a.kv + sign * b.kv;
  sum.q = a.q + sign * b.q;
  sum.qDiv = a.qDiv + sign * b.qDiv;
  sum.kvDiv = a.kvDiv + sign * b.kvDiv;
  sum.constant = a.constant + sign * b.constant;
  sum.divisor = a.divisor ? a.divisor : b.divisor;
  if (!sum.small())
    return std::nullopt;
  return sum;
}

std::optional<int64_t> constantOf(Value value) {
  if (auto op = value.getDefiningOp<arith::ConstantOp>())
    if (auto integer = dyn_cast<IntegerAttr>(op.getValue()))
      return integer.getValue().getSExtValue();
  return std::nullopt;
}

/// Results already computed: a region may share subexpressions, and
/// recomputing them would take time exponential in its depth.
struct Memo {
  llvm::DenseMap<Value, std::optional<Linear>> linear;
  llvm::DenseMap<std::pair<Value, int>, MaskModBounds> bounds;
};

std::optional<Linear> linearOfUncached(Value value, Block &body, Memo &memo,
                                       int depth);

/// The affine form of an index or integer value of the region, if it has one.
std::optional<Linear> linearOf(Value value, Block &body, Memo &memo,
                               int depth = 0) {
  auto found = memo.linear.find(value);
  if (found != memo.linear.end())
    return found->second;
  std::optional<Linear> form = linearOfUncached(value, body, memo, depth);
  memo.linear[value] = form;
  return form;
}

std::optional<Linear> linearOfUncached(Value value, Block &body, Memo &memo,
                                       int depth) {
  // Only index and 32- or 64-bit integers: a narrower type wraps the
  // positions, which the forms below do not model.
  Type type = value.getType();
  if (depth > 64 ||
      !(type.isIndex() || (type.isInteger() && type.getIntOrFloatBitWidth() >= 32)))
    return std::nullopt;
  if (auto argument = dyn_cast<BlockArgument>(value)) {
    if (argument.getOwner() != &body)
      return std::nullopt;
    Linear form;
    if (argument.getArgNumber() == kQueryArgument)
      form.q = 1;
    else if (argument.getArgNumber() == kKeyArgument)
      form.kv = 1;
    else
      return std::nullopt; // the batch, the head, an extra
    return form;
  }
  if (std::optional<int64_t> constant = constantOf(value)) {
    Linear form;
    form.constant = *constant;
    return form.small() ? std::optional<Linear>(form) : std::nullopt;
  }
  Operation *op = value.getDefiningOp();
  if (!op)
    return std::nullopt;
  auto operand = [&](unsigned i) {
    return linearOf(op->getOperand(i), body, memo, depth + 1);
  };
  return llvm::TypeSwitch<Operation *, std::optional<Linear>>(op)
      .Case<arith::IndexCastOp, arith::ExtSIOp>([&](Operation *) { return operand(0); })
      .Case<arith::IndexCastUIOp, arith::ExtUIOp>(
          [&](Operation *) -> std::optional<Linear> {
            // Zero extension is the value itself only for a value that is
            // never negative.
            std::optional<Linear> form = operand(0);
            if (!form || !form->nonNegative())
              return std::nullopt;
            return form;
          })
      .Case<arith::AddIOp, arith::SubIOp>([&](Operation *) -> std::optional<Linear> {
        std::optional<Linear> a = operand(0), b = operand(1);
        if (!a || !b)
          return std::nullopt;
        return combine(*a, *b, isa<arith::AddIOp>(op) ? 1 : -1);
      })
      .Case([&](arith::MulIOp) -> std::optional<Linear> {
        std::optional<int64_t> factor = constantOf(op->getOperand(1));
        std::optional<Linear> form = operand(0);
        if (!factor) {
          factor = constantOf(op->getOperand(0));
          form = operand(1);
        }
        if (!factor || !form || *factor <= -kOffsetLimit || *factor >= kOffsetLimit)
          return std::nullopt;
        Linear zero;
        Linear scaled = *form;
        for (int64_t *term : {&scaled.kv, &scaled.q, &scaled.qDiv, &scaled.kvDiv,
                              &scaled.constant})
          *term *= *factor;
        if (!scaled.small())
          return std::nullopt;
        return combine(scaled, zero, 1);
      })
      .Case<arith::DivUIOp, arith::DivSIOp, arith::FloorDivSIOp>(
          [&](Operation *) -> std::optional<Linear> {
            // floor(q / C) or floor(kv / C): q and kv are never negative.
            std::optional<int64_t> divisor = constantOf(op->getOperand(1));
            std::optional<Linear> form = operand(0);
            if (!divisor || *divisor <= 0 || *divisor >= kOffsetLimit || !form ||
                form->qDiv || form->kvDiv || form->constant)
              return std::nullopt;
            Linear quotient;
            quotient.divisor = *divisor;
            if (form->q == 1 && form->kv == 0)
              quotient.qDiv = 1;
            else if (form->kv == 1 && form->q == 0)
              quotient.kvDiv = 1;
            else
              return std::nullopt;
            return quotient;
          })
      .Default([](Operation *) { return std::nullopt; });
}

/// Bounds and whether they are exact, or nothing known (every key possible).
MaskModBounds unknown() { return {KeyBounds(), /*exact=*/false}; }

/// The hull of two bound sets, exact when one side is shared.
MaskModBounds unite(const MaskModBounds &a, const MaskModBounds &b) {
  auto hull = [](const std::optional<KeyBound> &x,
                 const std::optional<KeyBound> &y, bool lower) {
    if (!x || !y)
      return std::optional<KeyBound>();
    return std::optional<KeyBound>(lower ? KeyBound::min(*x, *y)
                                         : KeyBound::max(*x, *y));
  };
  MaskModBounds result;
  result.bounds.lower = hull(a.bounds.lower, b.bounds.lower, true);
  result.bounds.upper = hull(a.bounds.upper, b.bounds.upper, false);
  // Two intervals that start (or end) at the same key unite into one.
  result.exact = a.exact && b.exact &&
                 (a.bounds.lower == b.bounds.lower ||
                  a.bounds.upper == b.bounds.upper);
  return result;
}

MaskModBounds intersect(const MaskModBounds &a, const MaskModBounds &b) {
  return {a.bounds.intersect(b.bounds), a.exact && b.exact};
}

/// `kv + rest ⋈ 0` read as a bound on kv; `rest` holds q's terms.
std::optional<KeyBound> termOf(int64_t q, int64_t qDiv, int64_t divisor,
                               int64_t offset) {
  if (q == 1 && qDiv == 0)
    return KeyBound::diagonal(offset);
  if (q == 0 && divisor && qDiv == divisor)
    return KeyBound::chunkStart(divisor, offset);
  if (q == 0 && qDiv == 0)
    return KeyBound::constant(offset);
  return std::nullopt;
}

MaskModBounds compare(arith::CmpIPredicate predicate, Value lhs, Value rhs,
                      Block &body, Memo &memo) {
  using P = arith::CmpIPredicate;
  std::optional<Linear> left = linearOf(lhs, body, memo),
                        right = linearOf(rhs, body, memo);
  if (!left || !right)
    return unknown();
  switch (predicate) {
  case P::ult: case P::ule: case P::ugt: case P::uge:
    if (!left->nonNegative() || !right->nonNegative())
      return unknown();
    predicate = predicate == P::ult ? P::slt
                : predicate == P::ule ? P::sle
                : predicate == P::ugt ? P::sgt : P::sge;
    break;
  default:
    break;
  }
  if (predicate == P::ne)
    return unknown();
  std::optional<Linear> diff = combine(*left, *right, -1); // diff ⋈ 0
  if (!diff)
    return unknown();
  // Make the key's coefficient +1 (or the key quotient's): flip otherwise.
  bool onQuotient = diff->kv == 0;
  int64_t keyCoefficient = onQuotient ? diff->kvDiv : diff->kv;
  if ((keyCoefficient != 1 && keyCoefficient != -1) ||
      (!onQuotient && diff->kvDiv != 0))
    return unknown();
  if (keyCoefficient == -1) {
    diff = combine(Linear(), *diff, -1);
    predicate = predicate == P::slt ? P::sgt
                : predicate == P::sle ? P::sge
                : predicate == P::sgt ? P::slt
                : predicate == P::sge ? P::sle : predicate;
  }
  // key ⋈ -(q·a + qDiv·c + k): the bound's own terms.
  int64_t q = -diff->q, qDiv = -diff->qDiv, offset = -diff->constant;
  int64_t divisor = diff->divisor;
  std::optional<KeyBound> upper, lower;
  if (!onQuotient) {
    std::optional<KeyBound> at = termOf(q, qDiv, divisor, 0);
    if (!at)
      return unknown();
    auto shifted = [&](int64_t by) {
      KeyBound bound = *at;
      bound.offset = offset + by;
      return bound;
    };
    if (predicate == P::slt) upper = shifted(-1);
    if (predicate == P::sle || predicate == P::eq) upper = shifted(0);
    if (predicate == P::sgt) lower = shifted(1);
    if (predicate == P::sge || predicate == P::eq) lower = shifted(0);
  } else {
    // floor(kv / C) ⋈ m with m = qDiv'·floor(q/C) + k', qDiv' in {0, 1}:
    // floor(kv/C) <= m  <=>  kv <= m·C + C - 1;  >= m  <=>  kv >= m·C.
    if (q != 0 || (qDiv != 0 && qDiv != 1))
      return unknown();
    int64_t chunk = divisor;
    auto at = [&](int64_t m, int64_t plus) {
      int64_t bound = m * chunk + plus;
      return qDiv ? KeyBound::chunkStart(chunk, bound) : KeyBound::constant(bound);
    };
    if (offset <= -kOffsetLimit / chunk || offset >= kOffsetLimit / chunk)
      return unknown();
    if (predicate == P::slt) upper = at(offset - 1, chunk - 1);
    if (predicate == P::sle || predicate == P::eq) upper = at(offset, chunk - 1);
    if (predicate == P::sgt) lower = at(offset + 1, 0);
    if (predicate == P::sge || predicate == P::eq) lower = at(offset, 0);
  }
  MaskModBounds result;
  result.bounds.lower = lower;
  result.bounds.upper = upper;
  return result;
}

arith::CmpIPredicate inverse(arith::CmpIPredicate predicate) {
  return arith::invertPredicate(predicate);
}

MaskModBounds analyzeUncached(Value predicate, bool negated, Block &body,
                              Memo &memo, int depth);

MaskModBounds analyze(Value predicate, bool negated, Block &body, Memo &memo,
                      int depth) {
  std::pair<Value, int> key{predicate, negated};
  auto found = memo.bounds.find(key);
  if (found != memo.bounds.end())
    return found->second;
  MaskModBounds bounds = analyzeUncached(predicate, negated, body, memo, depth);
  memo.bounds[key] = bounds;
  return bounds;
}

MaskModBounds analyzeUncached(Value predicate, bool negated, Block &body,
                              Memo &memo, int depth) {
  if (depth > 64)
    return unknown();
  if (std::optional<int64_t> constant = constantOf(predicate)) {
    bool admits = (*constant != 0) != negated;
    if (admits)
      return MaskModBounds();
    MaskModBounds none; // lower 1 > upper 0 admits no key
    none.bounds.lower = KeyBound::constant(1);
    none.bounds.upper = KeyBound::constant(0);
    return none;
  }
  Operation *op = predicate.getDefiningOp();
  if (!op)
    return unknown();
  if (auto cmp = dyn_cast<arith::CmpIOp>(op))
    return compare(negated ? inverse(cmp.getPredicate()) : cmp.getPredicate(),
                   cmp.getLhs(), cmp.getRhs(), body, memo);
  if (isa<arith::AndIOp, arith::OrIOp>(op)) {
    MaskModBounds a = analyze(op->getOperand(0), negated, body, memo, depth + 1);
    MaskModBounds b = analyze(op->getOperand(1), negated, body, memo, depth + 1);
    // De Morgan: a negated conjunction is a disjunction of negations.
    return isa<arith::AndIOp>(op) != negated ? intersect(a, b) : unite(a, b);
  }
  if (auto xorOp = dyn_cast<arith::XOrIOp>(op)) {
    for (unsigned i : {0u, 1u})
      if (std::optional<int64_t> constant = constantOf(xorOp->getOperand(i));
          constant && *constant != 0)
        return analyze(xorOp->getOperand(1 - i), !negated, body, memo,
                       depth + 1);
  }
  return unknown();
}

} // namespace

MaskModBounds mlir::fa4::analyzeMaskMod(Region &region) {
  if (region.empty())
    return MaskModBounds();
  Block &body = region.front();
  auto yield = body.empty() ? YieldOp() : dyn_cast<YieldOp>(body.back());
  if (!yield || body.getNumArguments() <= kKeyArgument)
    return unknown();
  Memo memo;
  return analyze(yield.getValue(), /*negated=*/false, body, memo, 0);
}

MaskModBounds mlir::fa4::maskBounds(MaskKind mask, int64_t windowLeft,
                                    int64_t windowRight, Region &maskMod) {
  MaskModBounds region = analyzeMaskMod(maskMod);
  region.bounds = KeyBounds::band(maskBandFor(mask, windowLeft, windowRight))
                      .intersect(region.bounds);
  return region;
}
