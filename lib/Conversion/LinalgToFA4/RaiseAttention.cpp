//===- RaiseAttention.cpp - linalg attention to fa4.attention -------------===//
//
// fa4-raise-attention reads a rank-4 result of linalg-on-tensors IR as one
// expression per output element (`Term`s over affine indices), then matches
// that expression against attention. Following values rather than ops is
// what makes the front ends' many spellings one case: a transpose, a
// broadcast, an indexing map, an expand/collapse pair, or linalg.softmax
// against its decomposition all come out as the same expression.
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/MaskAnalysis.h"
#include "fa4/Conversion/Passes.h"

#include "mlir/Dialect/Affine/Utils.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <deque>
#include <map>

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4RAISEATTENTION
#include "fa4/Conversion/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

using Renaming = llvm::DenseMap<unsigned, unsigned>;

namespace {

//===----------------------------------------------------------------------===//
// Terms: one output element as an expression
//===----------------------------------------------------------------------===//

/// One node of an element's expression. Indices are affine expressions over
/// variables: the traced result's own dimensions are variables 0..rank-1,
/// and every reduction binds a fresh one.
struct Term {
  enum Kind {
    /// An element of a tensor the trace does not look into (a function
    /// argument, or a value it cannot follow: `why` says which).
    Leaf,
    /// A scalar constant (`value`), or a scalar the trace cannot see into.
    Constant,
    /// A position: `linalg.index`, as `index`.
    Position,
    /// An arith/math op of a linalg body applied to `operands`.
    Apply,
    /// The sum or maximum over `variable` of `operands[0]`.
    Sum,
    Max,
  };
  Kind kind;
  Type type;
  Value tensor;                         // Leaf
  SmallVector<AffineExpr> indices;      // Leaf
  std::string why;                      // Leaf: why the trace stopped
  double value = 0.0;                   // Constant
  /// Constant: the exact attribute (an integer's value beyond double's
  /// precision stays exact).
  TypedAttr attr;
  Value scalar;                         // Constant: a non-constant scalar
  AffineExpr index;                     // Position
  /// Apply: the op's name, and the op of a linalg body it comes from (null
  /// for the ops linalg.softmax's definition stands for).
  StringRef name;
  Operation *op = nullptr;
  SmallVector<const Term *> operands;   // Apply, Sum, Max
  unsigned variable = 0;                // Sum, Max

  bool isConstant(double v) const {
    return kind == Constant && !scalar && value == v;
  }
  bool isApply(StringRef name) const {
    return kind == Apply && this->name == name;
  }
};

bool isCast(const Term *t) {
  return t->isApply("arith.extf") || t->isApply("arith.truncf");
}

/// `t` without the float conversions around it.
const Term *stripCasts(const Term *t) {
  while (isCast(t))
    t = t->operands[0];
  return t;
}

/// Structural equality, where `renaming` maps a bound variable of `a` to
/// the one of `b` bound at the same place (and free variables map to
/// themselves unless `renaming` says otherwise).
bool equalTerms(const Term *a, const Term *b,
                Renaming renaming) {
  a = stripCasts(a);
  b = stripCasts(b);
  if (a == b && renaming.empty())
    return true;
  if (a->kind != b->kind)
    return false;
  auto rename = [&](AffineExpr e) {
    for (auto [from, to] : renaming)
      e = e.replace(getAffineDimExpr(from, e.getContext()),
                    getAffineDimExpr(to + 100000, e.getContext()));
    for (auto [from, to] : renaming)
      e = e.replace(getAffineDimExpr(to + 100000, e.getContext()),
                    getAffineDimExpr(to, e.getContext()));
    return e;
  };
  switch (a->kind) {
  case Term::Leaf:
    if (a->tensor != b->tensor || a->indices.size() != b->indices.size())
      return false;
    for (auto [x, y] : llvm::zip(a->indices, b->indices))
      if (rename(x) != y)
        return false;
    return true;
  case Term::Constant:
    return a->scalar == b->scalar && a->value == b->value && a->attr == b->attr;
  case Term::Position:
    return rename(a->index) == b->index;
  case Term::Apply: {
    if (a->name != b->name || (a->op == nullptr) != (b->op == nullptr) ||
        (a->op && a->op->getAttrDictionary() != b->op->getAttrDictionary()) ||
        a->operands.size() != b->operands.size())
      return false;
    for (auto [x, y] : llvm::zip(a->operands, b->operands))
      if (!equalTerms(x, y, renaming))
        return false;
    return true;
  }
  case Term::Sum:
  case Term::Max: {
    Renaming inner = renaming;
    inner[a->variable] = b->variable;
    return equalTerms(a->operands[0], b->operands[0], inner);
  }
  }
  return false;
}

/// Whether `t` mentions variable `v` (free).
bool mentions(const Term *t, unsigned v) {
  auto in = [&](AffineExpr e) { return e.isFunctionOfDim(v); };
  switch (t->kind) {
  case Term::Leaf:
    return llvm::any_of(t->indices, in);
  case Term::Position:
    return in(t->index);
  case Term::Constant:
    return false;
  case Term::Apply:
  case Term::Sum:
  case Term::Max:
    return llvm::any_of(t->operands,
                        [&](const Term *o) { return mentions(o, v); });
  }
  return false;
}

/// Follows tensor values back to the ops that compute them.
class Tracer {
public:
  /// `extents`: the sizes of the traced result's dimensions (the first
  /// variables).
  explicit Tracer(ArrayRef<int64_t> extents)
      : extents(extents.begin(), extents.end()), nextVariable(extents.size()) {}

  const Term *trace(Value value, ArrayRef<AffineExpr> at);

  /// The ops the trace went through.
  llvm::SetVector<Operation *> visited;
  /// The number of values variable `v` runs over (dynamic: unknown).
  int64_t extentOf(unsigned v) const {
    return v < extents.size() ? extents[v] : ShapedType::kDynamic;
  }
  /// Whether the trace stopped at its size limit: an expression this large
  /// (attention layers stacked in one function, say) is not analysed.
  bool exhausted = false;
  static constexpr size_t kMaxTerms = 200000;

private:
  Term *make(Term::Kind kind, Type type) {
    if (terms.size() >= kMaxTerms)
      exhausted = true;
    terms.push_back(Term{kind, type, {}, {}, {}, 0.0, {}, {}, {}, {}, nullptr, {}, 0});
    return &terms.back();
  }
  const Term *leaf(Value value, ArrayRef<AffineExpr> at, StringRef why = "") {
    Term *t = make(Term::Leaf, getElementTypeOrSelf(value.getType()));
    t->tensor = value;
    t->indices.assign(at.begin(), at.end());
    t->why = why.str();
    return t;
  }
  const Term *scalar(Value value);
  const Term *traceUncached(Value value, ArrayRef<AffineExpr> at);
  const Term *traceLinalg(linalg::LinalgOp op, unsigned result,
                          ArrayRef<AffineExpr> at);
  const Term *traceSoftmax(linalg::SoftmaxOp op, ArrayRef<AffineExpr> at);
  /// A new variable running over `extent` values (dynamic: unknown).
  AffineExpr fresh(MLIRContext *context, int64_t extent) {
    extents.push_back(extent);
    return getAffineDimExpr(nextVariable++, context);
  }
  AffineExpr simplify(AffineExpr e);
  /// The least and greatest values of `e` (nullopt: unbounded).
  std::pair<int64_t, std::optional<int64_t>> range(AffineExpr e);

  std::deque<Term> terms;
  /// One term per value read at the same indices.
  std::map<std::pair<void *, std::vector<const void *>>, const Term *> memo;
  SmallVector<int64_t> extents;
  unsigned nextVariable;
};

const Term *Tracer::scalar(Value value) {
  Term *t = make(Term::Constant, value.getType());
  FloatAttr f;
  IntegerAttr i;
  auto narrow = [](Type type) {
    return type.isIndex() ||
           (type.isIntOrFloat() && type.getIntOrFloatBitWidth() <= 64);
  };
  if (matchPattern(value, m_Constant(&f)) && narrow(f.getType())) {
    t->value = f.getValueAsDouble();
    t->attr = f;
  } else if (matchPattern(value, m_Constant(&i)) && narrow(i.getType())) {
    t->value = static_cast<double>(i.getValue().getSExtValue());
    t->attr = i;
  } else {
    t->scalar = value;
  }
  return t;
}

std::pair<int64_t, std::optional<int64_t>> Tracer::range(AffineExpr e) {
  if (auto c = dyn_cast<AffineConstantExpr>(e))
    return {c.getValue(), c.getValue()};
  if (auto d = dyn_cast<AffineDimExpr>(e)) {
    int64_t extent = d.getPosition() < extents.size() ? extents[d.getPosition()]
                                                      : ShapedType::kDynamic;
    if (ShapedType::isDynamic(extent))
      return {0, std::nullopt};
    return {0, extent - 1};
  }
  auto binary = dyn_cast<AffineBinaryOpExpr>(e);
  if (!binary)
    return {INT64_MIN, std::nullopt};
  auto [lhsLo, lhsHi] = range(binary.getLHS());
  auto rhs = dyn_cast<AffineConstantExpr>(binary.getRHS());
  switch (e.getKind()) {
  case AffineExprKind::Add: {
    auto [rhsLo, rhsHi] = range(binary.getRHS());
    std::optional<int64_t> hi;
    if (lhsHi && rhsHi)
      hi = *lhsHi + *rhsHi;
    return {lhsLo == INT64_MIN || rhsLo == INT64_MIN ? INT64_MIN : lhsLo + rhsLo, hi};
  }
  case AffineExprKind::Mul:
    if (rhs && rhs.getValue() >= 0 && lhsLo >= 0)
      return {lhsLo * rhs.getValue(),
              lhsHi ? std::optional<int64_t>(*lhsHi * rhs.getValue()) : std::nullopt};
    break;
  case AffineExprKind::FloorDiv:
    if (rhs && rhs.getValue() > 0 && lhsLo >= 0)
      return {lhsLo / rhs.getValue(),
              lhsHi ? std::optional<int64_t>(*lhsHi / rhs.getValue()) : std::nullopt};
    break;
  case AffineExprKind::Mod:
    if (rhs && rhs.getValue() > 0)
      return {0, rhs.getValue() - 1};
    break;
  default:
    break;
  }
  return {INT64_MIN, std::nullopt};
}

/// Folds `(a·P + r) floordiv P` to `a` and `(a·P + r) mod P` to `r` where
/// the variables' extents put `r` in [0, P): what a collapse followed by
/// the matching expand (or a size-1 dimension) leaves in an index.
AffineExpr Tracer::simplify(AffineExpr e) {
  auto binary = dyn_cast<AffineBinaryOpExpr>(e);
  if (!binary)
    return e;
  AffineExpr lhs = simplify(binary.getLHS()), rhs = simplify(binary.getRHS());
  auto divisor = dyn_cast<AffineConstantExpr>(rhs);
  bool div = e.getKind() == AffineExprKind::FloorDiv,
       mod = e.getKind() == AffineExprKind::Mod;
  if ((div || mod) && divisor && divisor.getValue() > 0) {
    int64_t p = divisor.getValue();
    // Split the sum into multiples of P and the rest.
    SmallVector<AffineExpr> terms;
    std::function<void(AffineExpr)> flatten = [&](AffineExpr x) {
      if (x.getKind() == AffineExprKind::Add) {
        auto add = cast<AffineBinaryOpExpr>(x);
        flatten(add.getLHS());
        flatten(add.getRHS());
      } else {
        terms.push_back(x);
      }
    };
    flatten(lhs);
    AffineExpr quotient = getAffineConstantExpr(0, e.getContext());
    AffineExpr rest = getAffineConstantExpr(0, e.getContext());
    for (AffineExpr term : terms) {
      int64_t coefficient = 0;
      AffineExpr factor;
      if (auto mul = dyn_cast<AffineBinaryOpExpr>(term);
          mul && term.getKind() == AffineExprKind::Mul)
        if (auto c = dyn_cast<AffineConstantExpr>(mul.getRHS())) {
          coefficient = c.getValue();
          factor = mul.getLHS();
        }
      if (auto c = dyn_cast<AffineConstantExpr>(term)) {
        coefficient = c.getValue();
        factor = getAffineConstantExpr(1, e.getContext());
      }
      if (factor && coefficient % p == 0)
        quotient = quotient + factor * (coefficient / p);
      else
        rest = rest + term;
    }
    auto [lo, hi] = range(rest);
    if (lo >= 0 && hi && *hi < p)
      return div ? quotient : rest;
  }
  switch (e.getKind()) {
  case AffineExprKind::Add:
    return lhs + rhs;
  case AffineExprKind::Mul:
    return lhs * rhs;
  case AffineExprKind::FloorDiv:
    return lhs.floorDiv(rhs);
  case AffineExprKind::CeilDiv:
    return lhs.ceilDiv(rhs);
  case AffineExprKind::Mod:
    return lhs % rhs;
  default:
    return e;
  }
}

const Term *Tracer::trace(Value value, ArrayRef<AffineExpr> unsimplified) {
  SmallVector<AffineExpr> at;
  for (AffineExpr e : unsimplified)
    at.push_back(simplify(e));
  std::pair<void *, std::vector<const void *>> key;
  key.first = value.getAsOpaquePointer();
  for (AffineExpr e : at)
    key.second.push_back(e.getAsOpaquePointer());
  if (const Term *known = memo[key])
    return known;
  const Term *t = exhausted ? leaf(value, at, "a value past the trace's size limit")
                            : traceUncached(value, at);
  memo[key] = t;
  return t;
}

/// Groups that partition [0, expandedRank) in order, one per collapsed
/// dimension (what the verifier should have ensured; the trace does not
/// rely on it).
static bool validReassociation(ArrayRef<ReassociationIndices> groups,
                               int64_t expandedRank, int64_t collapsedRank) {
  if (static_cast<int64_t>(groups.size()) != collapsedRank)
    return false;
  int64_t next = 0;
  for (const ReassociationIndices &group : groups)
    for (int64_t dim : group)
      if (dim != next++)
        return false;
  return next == expandedRank;
}

const Term *Tracer::traceUncached(Value value, ArrayRef<AffineExpr> at) {
  Operation *def = value.getDefiningOp();
  if (!def)
    return leaf(value, at);
  MLIRContext *context = value.getContext();
  if (auto constant = dyn_cast<arith::ConstantOp>(def)) {
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    Type element = dense ? dense.getElementType() : Type();
    if (dense && dense.isSplat() && element.isIntOrFloat() &&
        element.getIntOrFloatBitWidth() <= 64) {
      Term *t = make(Term::Constant, element);
      if (auto floatType = dyn_cast<FloatType>(element)) {
        APFloat splat = dense.getSplatValue<APFloat>();
        t->attr = FloatAttr::get(floatType, splat);
        bool lost;
        splat.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
        t->value = splat.convertToDouble();
      } else {
        APInt splat = dense.getSplatValue<APInt>();
        t->attr = IntegerAttr::get(element, splat);
        t->value = static_cast<double>(splat.getSExtValue());
      }
      return t;
    }
    return leaf(value, at, "a constant tensor");
  }
  visited.insert(def);
  if (auto cast = dyn_cast<tensor::CastOp>(def)) {
    if (!isa<RankedTensorType>(cast.getSource().getType()))
      return leaf(value, at, "a tensor.cast of an unranked tensor");
    return trace(cast.getSource(), at);
  }
  if (auto fill = dyn_cast<linalg::FillOp>(def))
    return scalar(fill.getInputs()[0]);
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(def)) {
    // Each source dimension is its group of result dimensions, row-major.
    ArrayRef<int64_t> sizes = expand.getResultType().getShape();
    SmallVector<AffineExpr> source;
    if (!validReassociation(expand.getReassociationIndices(), sizes.size(),
                            expand.getSrcType().getRank()))
      return leaf(value, at, "a tensor.expand_shape with malformed groups");
    for (ReassociationIndices group : expand.getReassociationIndices()) {
      AffineExpr index = getAffineConstantExpr(0, context);
      for (int64_t dim : group) {
        if (ShapedType::isDynamic(sizes[dim]) && dim != group.front())
          return leaf(value, at, "a tensor.expand_shape with a dynamic inner size");
        index = index * (ShapedType::isDynamic(sizes[dim]) ? 1 : sizes[dim]) +
                at[dim];
      }
      source.push_back(index);
    }
    return trace(expand.getSrc(), source);
  }
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(def)) {
    ArrayRef<int64_t> sizes = collapse.getSrcType().getShape();
    SmallVector<AffineExpr> source;
    if (!validReassociation(collapse.getReassociationIndices(), sizes.size(),
                            collapse.getResultType().getRank()))
      return leaf(value, at, "a tensor.collapse_shape with malformed groups");
    for (auto [position, group] :
         llvm::enumerate(collapse.getReassociationIndices())) {
      int64_t inner = 1;
      SmallVector<AffineExpr> parts;
      for (int64_t dim : llvm::reverse(group)) {
        if (ShapedType::isDynamic(sizes[dim]) && dim != group.front())
          return leaf(value, at, "a tensor.collapse_shape with a dynamic inner size");
        AffineExpr part = at[position].floorDiv(inner);
        if (dim != group.front())
          part = part % sizes[dim];
        parts.push_back(part);
        if (dim != group.front())
          inner *= sizes[dim];
      }
      source.append(parts.rbegin(), parts.rend());
    }
    return trace(collapse.getSrc(), source);
  }
  if (auto softmax = dyn_cast<linalg::SoftmaxOp>(def))
    return traceSoftmax(softmax, at);
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(def))
    if (linalgOp.hasPureTensorSemantics())
      return traceLinalg(linalgOp, cast<OpResult>(value).getResultNumber(), at);
  return leaf(value, at,
              ("a result of " + def->getName().getStringRef()).str());
}

const Term *Tracer::traceSoftmax(linalg::SoftmaxOp op, ArrayRef<AffineExpr> at) {
  // softmax(x)[.., i, ..] = exp(x[i] - max_j x[j]) / sum_j exp(x[j] - max_l x[l])
  unsigned dim = op.getDimension();
  Value input = op.getInput();
  Type type = getElementTypeOrSelf(input.getType());
  MLIRContext *context = op.getContext();
  // The ops of the definition by name, so that the terms match those of a
  // decomposed softmax.
  auto apply = [&](StringRef name, ArrayRef<const Term *> operands) {
    Term *t = make(Term::Apply, type);
    t->name = name;
    t->operands.assign(operands.begin(), operands.end());
    return t;
  };
  int64_t extent = cast<ShapedType>(input.getType()).getDimSize(dim);
  auto shifted = [&](ArrayRef<AffineExpr> where) {
    SmallVector<AffineExpr> inner(where);
    AffineExpr j = fresh(context, extent);
    inner[dim] = j;
    Term *max = make(Term::Max, type);
    max->variable = cast<AffineDimExpr>(j).getPosition();
    max->operands.push_back(trace(input, inner));
    return apply("math.exp", {apply("arith.subf", {trace(input, where), max})});
  };
  SmallVector<AffineExpr> inner(at);
  AffineExpr j = fresh(context, extent);
  inner[dim] = j;
  Term *sum = make(Term::Sum, type);
  sum->variable = cast<AffineDimExpr>(j).getPosition();
  sum->operands.push_back(shifted(inner));
  return apply("arith.divf", {shifted(at), sum});
}

const Term *Tracer::traceLinalg(linalg::LinalgOp op, unsigned result,
                                ArrayRef<AffineExpr> at) {
  MLIRContext *context = op.getContext();
  Value value = op->getResult(result);
  OpOperand *init = op.getDpsInitOperand(result);
  AffineMap out = op.getMatchingIndexingMap(init);
  if (!out.isProjectedPermutation(/*allowZeroInResults=*/true))
    return leaf(value, at, "a linalg op whose output map is not a projection");
  // The loops the output fixes take the element's indices (a constant 0 in
  // the map is a kept size-1 dimension); every other loop must be a
  // reduction, and binds a fresh variable.
  SmallVector<AffineExpr> loops(op.getNumLoops());
  for (auto [position, expr] : llvm::enumerate(out.getResults()))
    if (auto dim = dyn_cast<AffineDimExpr>(expr))
      loops[dim.getPosition()] = at[position];
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  SmallVector<int64_t> loopExtents = op.getStaticLoopRanges();
  SmallVector<unsigned> reduced;
  for (auto [loop, expr] : llvm::enumerate(loops)) {
    if (expr)
      continue;
    if (iterators[loop] != utils::IteratorType::reduction)
      return leaf(value, at, "a linalg op with a parallel loop its output does not index");
    expr = fresh(context, loopExtents[loop]);
    reduced.push_back(cast<AffineDimExpr>(expr).getPosition());
  }
  Block *body = op.getBlock();
  llvm::DenseMap<Value, const Term *> values;
  for (OpOperand *input : op.getDpsInputOperands()) {
    AffineMap map = op.getMatchingIndexingMap(input);
    SmallVector<AffineExpr> where;
    for (AffineExpr e : map.getResults())
      where.push_back(e.replaceDims(loops));
    BlockArgument argument = op.getMatchingBlockArgument(input);
    if (isa<ShapedType>(input->get().getType()))
      values[argument] = trace(input->get(), where);
    else
      values[argument] = scalar(input->get());
  }
  BlockArgument accumulator = op.getMatchingBlockArgument(init);
  // Terms of the body's values, on demand.
  std::function<const Term *(Value)> evaluate = [&](Value v) -> const Term * {
    if (const Term *known = values.lookup(v))
      return known;
    if (v == accumulator)
      return nullptr;
    // Another result's accumulator: not a value of this result's element.
    if (auto argument = dyn_cast<BlockArgument>(v); argument && argument.getOwner() == body)
      return nullptr;
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != body)
      return scalar(v); // from above: a scalar of the function
    const Term *t = nullptr;
    if (auto index = dyn_cast<linalg::IndexOp>(def)) {
      Term *p = make(Term::Position, v.getType());
      p->index = loops[index.getDim()];
      t = p;
    } else if (matchPattern(v, m_Constant())) {
      t = scalar(v);
    } else if (def->getNumResults() == 1 && def->getNumRegions() == 0 &&
               isa<arith::ArithDialect, math::MathDialect>(def->getDialect())) {
      Term *apply = make(Term::Apply, v.getType());
      apply->name = def->getName().getStringRef();
      apply->op = def;
      for (Value operand : def->getOperands()) {
        const Term *o = evaluate(operand);
        if (!o)
          return nullptr;
        apply->operands.push_back(o);
      }
      t = apply;
    } else {
      return nullptr;
    }
    values[v] = t;
    return t;
  };
  Value yielded = body->getTerminator()->getOperand(result);
  if (reduced.empty()) {
    if (const Term *t = evaluate(yielded))
      return t;
    return leaf(value, at, "a linalg body the trace cannot follow");
  }
  // A reduction: the body combines the accumulator with one new term.
  Operation *combine = yielded.getDefiningOp();
  if (!combine || combine->getNumOperands() != 2 ||
      !isa<arith::AddFOp, arith::MaximumFOp, arith::MaxNumFOp>(combine))
    return leaf(value, at, "a reduction other than a sum or a maximum");
  Value other = combine->getOperand(0) == accumulator ? combine->getOperand(1)
                                                      : combine->getOperand(0);
  if (!llvm::is_contained(combine->getOperands(), accumulator))
    return leaf(value, at, "a reduction that does not accumulate");
  const Term *term = evaluate(other);
  if (!term)
    return leaf(value, at, "a linalg body the trace cannot follow");
  bool sum = isa<arith::AddFOp>(combine);
  for (unsigned variable : llvm::reverse(reduced)) {
    Term *r = make(sum ? Term::Sum : Term::Max, yielded.getType());
    r->variable = variable;
    r->operands.push_back(term);
    term = r;
  }
  // Starting from the identity (0 for a sum, -inf for a maximum) it is the
  // reduction alone; otherwise the start is combined in.
  const Term *start = trace(init->get(), at);
  // (A maximum may also start from NaN, which maxnumf ignores.)
  if (start->isConstant(sum ? 0.0 : -INFINITY) ||
      (!sum && isa<arith::MaxNumFOp>(combine) && start->kind == Term::Constant &&
       !start->scalar && std::isnan(start->value)))
    return term;
  Term *t = make(Term::Apply, yielded.getType());
  t->name = combine->getName().getStringRef();
  t->op = combine;
  t->operands = {start, term};
  return t;
}

//===----------------------------------------------------------------------===//
// Matching the expression against attention
//===----------------------------------------------------------------------===//

/// A match, or why there is none. `attention` false: the expression is not
/// attention-shaped at all (no remark); otherwise `why` is the refusal.
struct Match {
  bool attention = false;
  std::string why;
  Value q, k, v;
  bool headsFirst = false;
  double scale = 1.0;
  /// The rank of Q, K, V and O: 4, or 3 for the collapsed [batch·heads,
  /// seq, head_dim] form (one head per batch entry).
  unsigned rank = 4;
  /// The variables of O's dimensions and P·V's reduction (`head` kNoHead in
  /// the rank-3 form).
  unsigned batch = 0, head = 0, query = 0, key = 0;
  /// The score expression around the contraction(s), and what in it stands
  /// for the scaled score: the region's `score` argument.
  const Term *score = nullptr;
  const Term *scaled = nullptr;
  bool scoreMod = false;
  /// Conditions a score must meet (negated where `second` is true).
  SmallVector<std::pair<const Term *, bool>> masks;
  /// The most negative finite value a mask fills hidden scores with (-1e9,
  /// finfo.min), if any mask does: the original then averages V over every
  /// key in a row that sees none, where fa4 gives O = 0.
  std::optional<double> finiteFill;
};

/// The head variable of the rank-3 form, which has none: no index is it.
constexpr unsigned kNoHead = 1u << 20;

/// Renders a value for a remark: `%arg2`, or the op that makes it.
std::string describe(Value value) {
  if (auto argument = dyn_cast<BlockArgument>(value))
    return "argument #" + std::to_string(argument.getArgNumber());
  return "a result of " + value.getDefiningOp()->getName().getStringRef().str();
}

bool isNegInf(const Term *t) { return stripCasts(t)->isConstant(-INFINITY); }

/// A finite fill at or below this hides a score as -inf does wherever the
/// row sees a key: exp(fill - m) is 0 in f32 for any visible max m above
/// fill + 104, i.e. for every score of magnitude below 5 000. (A front end's
/// masks fill with -1e4, -1e9 or finfo(dtype).min.)
constexpr double kFiniteMaskFill = -1e4;

/// -inf, or a finite constant at or below kFiniteMaskFill (set in `fill`).
bool isMaskFill(const Term *t, std::optional<double> &fill) {
  t = stripCasts(t);
  if (isNegInf(t))
    return true;
  if (t->kind != Term::Constant || t->scalar || !std::isfinite(t->value) ||
      t->value > kFiniteMaskFill)
    return false;
  fill = fill ? std::min(*fill, t->value) : t->value;
  return true;
}

/// A function argument of `func` (its tensors are the only ones an
/// fa4.attention on tensors can read).
bool isArgument(Value value, func::FuncOp func) {
  auto argument = dyn_cast<BlockArgument>(value);
  return argument && argument.getOwner() == &func.getBody().front();
}

/// Every Sum of a product of two leaves in `t`: the contractions.
void findContractions(const Term *t, SmallVectorImpl<const Term *> &found) {
  t = stripCasts(t);
  if (t->kind == Term::Sum) {
    const Term *body = stripCasts(t->operands[0]);
    if (body->isApply("arith.mulf") &&
        stripCasts(body->operands[0])->kind == Term::Leaf &&
        stripCasts(body->operands[1])->kind == Term::Leaf) {
      found.push_back(t);
      return;
    }
  }
  for (const Term *o : t->operands)
    findContractions(o, found);
}

std::optional<unsigned> dimOf(AffineExpr e) {
  if (auto dim = dyn_cast<AffineDimExpr>(e))
    return dim.getPosition();
  return std::nullopt;
}

/// Sets the refusal of an attention-shaped expression; false, for the step
/// that refuses to return.
bool refuse(Match &m, const Twine &why) {
  m.why = why.str();
  return false;
}

/// The softmax's parts of O = Σ_k P·V with P = E / Z, or of (Σ_k E·V) / Z:
/// the sum over the keys, E, Z and V's leaf.
struct SoftmaxOfValues {
  const Term *sum = nullptr, *e = nullptr, *z = nullptr, *vLeaf = nullptr;
};

/// Splits `body` into P and V's leaf: the product's factor that is not the
/// probabilities (`isP`) is V, and it must run along the keys of `sum`.
bool splitProduct(const Term *body, const Term *sum, const Term *&p,
                  const Term *&leafV, function_ref<bool(const Term *)> isP) {
  body = stripCasts(body);
  if (!body->isApply("arith.mulf"))
    return false;
  for (int side : {0, 1}) {
    const Term *x = stripCasts(body->operands[side]);
    if (isP(x) && mentions(stripCasts(body->operands[1 - side]), sum->variable)) {
      p = x;
      leafV = stripCasts(body->operands[1 - side]);
      return true;
    }
  }
  return false;
}

/// Whether `root` (O, casts stripped) is a softmax-weighted sum of values
/// with E an exponential: the shape that makes it attention.
bool matchSoftmaxOfValues(const Term *root, SoftmaxOfValues &parts) {
  auto isDiv = [](const Term *t) { return t->isApply("arith.divf"); };
  auto isExp = [](const Term *t) { return t->isApply("math.exp"); };
  const Term *p = nullptr;
  if (root->kind == Term::Sum) {
    parts.sum = root;
    if (!splitProduct(parts.sum->operands[0], parts.sum, p, parts.vLeaf, isDiv))
      return false;
    parts.e = stripCasts(p->operands[0]);
    parts.z = stripCasts(p->operands[1]);
  } else if (root->isApply("arith.divf") &&
             stripCasts(root->operands[0])->kind == Term::Sum) {
    parts.sum = stripCasts(root->operands[0]);
    if (!splitProduct(parts.sum->operands[0], parts.sum, parts.e, parts.vLeaf,
                      isExp))
      return false;
    parts.z = stripCasts(root->operands[1]);
  } else {
    return false;
  }
  return parts.e->isApply("math.exp");
}

/// The score under the exponential, exp(s - M) or exp(s): `s`. M must be
/// constant along the keys and Z must sum E over them.
bool matchExponent(const SoftmaxOfValues &parts, Match &m, const Term *&s) {
  const Term *shifted = stripCasts(parts.e->operands[0]);
  s = shifted;
  if (shifted->isApply("arith.subf")) {
    s = shifted->operands[0];
    // exp(s - M) / Σ exp(s - M) is softmax(s) for any M constant along the
    // keys (the row maximum, usually).
    if (mentions(shifted->operands[1], m.key))
      return refuse(m, "the softmax's shift varies along the keys P·V sums "
                       "over: it is not a softmax over the keys");
  }
  const Term *z = parts.z;
  if (z->kind != Term::Sum ||
      !equalTerms(parts.e, z->operands[0], Renaming{{m.key, z->variable}}))
    return refuse(m, "the softmax normalizes over another dimension than the "
                     "keys P·V sums over");
  return true;
}

/// The masks around the score, peeled off `s` into `m.masks`: selects that
/// fill hidden scores, and additions of such a select of 0 or a fill.
void peelMasks(const Term *&s, Match &m) {
  for (bool changed = true; changed;) {
    changed = false;
    const Term *t = stripCasts(s);
    if (t->isApply("arith.select")) {
      for (int side : {1, 2}) {
        if (isMaskFill(t->operands[side], m.finiteFill)) {
          m.masks.push_back({t->operands[0], side == 1});
          s = t->operands[side == 1 ? 2 : 1];
          changed = true;
          break;
        }
      }
    } else if (t->isApply("arith.addf")) {
      for (int side : {0, 1}) {
        const Term *c = stripCasts(t->operands[side]);
        if (!c->isApply("arith.select"))
          continue;
        bool zeroFirst = stripCasts(c->operands[1])->isConstant(0.0);
        bool zeroSecond = stripCasts(c->operands[2])->isConstant(0.0);
        if ((zeroFirst && isMaskFill(c->operands[2], m.finiteFill)) ||
            (zeroSecond && isMaskFill(c->operands[1], m.finiteFill))) {
          m.masks.push_back({c->operands[0], zeroSecond});
          s = t->operands[1 - side];
          changed = true;
          break;
        }
      }
    }
  }
}

/// The contraction: Q·Kᵀ over the head dim, of rank-4 arguments; every
/// use of it in `s` the same one.
bool findScoreContraction(const Term *s, Match &m, const Term *&contraction) {
  SmallVector<const Term *> contractions;
  findContractions(s, contractions);
  SmallVector<const Term *> scores;
  for (const Term *c : contractions) {
    const Term *body = stripCasts(c->operands[0]);
    const Term *a = stripCasts(body->operands[0]), *b = stripCasts(body->operands[1]);
    unsigned last = m.rank - 1;
    if (a->indices.size() == m.rank && b->indices.size() == m.rank &&
        dimOf(a->indices[last]) == c->variable &&
        dimOf(b->indices[last]) == c->variable)
      scores.push_back(c);
  }
  if (scores.empty())
    return refuse(m, "no contraction of two rank-" + Twine(m.rank) +
                         " tensors (the result's rank) over their last "
                         "dimension (Q·Kᵀ over head_dim) feeds the softmax");
  contraction = scores.front();
  for (const Term *c : scores)
    if (!equalTerms(c, contraction, Renaming()))
      return refuse(m, "the scores combine two different contractions");
  return true;
}

/// Q, K and V: the contraction's operand along the keys is K, the other Q;
/// all three distinct rank-4 tensor arguments of `func`.
bool bindOperands(const Term *contraction, const Term *vLeaf,
                  func::FuncOp func, Match &m, const Term *&qLeaf,
                  const Term *&kLeaf) {
  const Term *body = stripCasts(contraction->operands[0]);
  qLeaf = stripCasts(body->operands[0]);
  kLeaf = stripCasts(body->operands[1]);
  if (mentions(qLeaf, m.key))
    std::swap(qLeaf, kLeaf);
  if (mentions(qLeaf, m.key) || !mentions(kLeaf, m.key))
    return refuse(m, "exactly one operand of the score contraction must run "
                     "along the keys P·V sums over");
  if (vLeaf->kind != Term::Leaf)
    return refuse(m, "V is computed inside the function (not read from an "
                     "argument)");
  for (auto [name, leafTerm] :
       {std::pair<StringRef, const Term *>{"Q", qLeaf}, {"K", kLeaf}, {"V", vLeaf}})
    if (!isArgument(leafTerm->tensor, func))
      return refuse(m, Twine(name) + " is not a function argument (it is " +
                           (leafTerm->why.empty() ? describe(leafTerm->tensor)
                                                  : leafTerm->why) +
                           ")");
  m.q = qLeaf->tensor;
  m.k = kLeaf->tensor;
  m.v = vLeaf->tensor;
  if (m.q == m.k || m.q == m.v || m.k == m.v)
    return refuse(m, "Q, K and V are not three distinct arguments (the kernel "
                     "takes each as its own parameter; pass the tensor twice)");
  for (auto [name, value] : {std::pair<StringRef, Value>{"Q", m.q}, {"K", m.k}, {"V", m.v}}) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || type.getRank() != m.rank)
      return refuse(m, Twine(name) + " is not a rank-" + Twine(m.rank) +
                           " ranked tensor (as the result)");
  }
  return true;
}

/// The rank-3 form: Q, K, V and O are [batch·heads, seq, head_dim], each
/// batch entry one head of its own (K and V's batch index Q's).
bool matchCollapsedLayout(ArrayRef<unsigned> qDims, const Term *kLeaf,
                          const Term *vLeaf, func::FuncOp func, Match &m,
                          unsigned &seqPos) {
  m.head = kNoHead;
  m.query = qDims[1];
  m.headsFirst = false;
  seqPos = 1;
  AffineExpr key = getAffineDimExpr(m.key, func.getContext());
  if (kLeaf->indices[1] != key || vLeaf->indices[1] != key)
    return refuse(m, "K and V are not [batch·heads, seq, head_dim] like Q "
                     "(one layout for Q, K, V and O)");
  if (dimOf(kLeaf->indices[0]) != m.batch || dimOf(vLeaf->indices[0]) != m.batch)
    return refuse(m, "K and V do not share Q's [batch·heads] index");
  if (m.batch != 0 || m.query != 1 || dimOf(vLeaf->indices[2]) != 2u)
    return refuse(m, "the result's dimensions are not [batch·heads, seq, "
                     "head_dim] as Q's (one layout for Q, K, V and O)");
  return true;
}

/// The roles of O's dimensions: Q is [b, q, h, d] or [b, h, q, d] with plain
/// indices, K and V alike (their heads Q's or a grouping of them), O in
/// Q's layout. `seqPos`: the position of the sequence dimension.
bool matchLayout(const Term *qLeaf, const Term *kLeaf, const Term *vLeaf,
                 func::FuncOp func, Match &m, unsigned &seqPos) {
  SmallVector<unsigned> qDims;
  for (AffineExpr index : qLeaf->indices) {
    std::optional<unsigned> dim = dimOf(index);
    if (!dim)
      return refuse(m, "Q is read at a computed index (" +
                           std::to_string(qDims.size()) +
                           "): only a transposition of [batch, seq, heads, "
                           "head_dim] is supported");
    qDims.push_back(*dim);
  }
  m.batch = qDims[0];
  if (m.rank == 3)
    return matchCollapsedLayout(qDims, kLeaf, vLeaf, func, m, seqPos);
  // The head is the index K shares with Q (directly, or grouped).
  unsigned kHeadPos = 0;
  for (unsigned candidate : {1u, 2u}) {
    if (kLeaf->indices[candidate].isFunctionOfDim(qDims[1]) ||
        kLeaf->indices[candidate].isFunctionOfDim(qDims[2]))
      kHeadPos = candidate;
  }
  if (!kHeadPos)
    return refuse(m, "K does not share a head index with Q");
  m.headsFirst = kHeadPos == 1;
  m.head = m.headsFirst ? qDims[1] : qDims[2];
  m.query = m.headsFirst ? qDims[2] : qDims[1];
  seqPos = m.headsFirst ? 2 : 1;
  std::string layout = m.headsFirst ? "[batch, heads, seq, head_dim]"
                                    : "[batch, seq, heads, head_dim]";
  if (kLeaf->indices[seqPos] != getAffineDimExpr(m.key, func.getContext()) ||
      vLeaf->indices[seqPos] != getAffineDimExpr(m.key, func.getContext()))
    return refuse(m, "K and V are not " + layout +
                         " like Q (one layout for Q, K, V and O)");
  int64_t qHeads = cast<ShapedType>(m.q.getType()).getDimSize(m.headsFirst ? 1 : 2);
  int64_t kvHeads = cast<ShapedType>(m.k.getType()).getDimSize(kHeadPos);
  AffineExpr h = getAffineDimExpr(m.head, func.getContext());
  AffineExpr kvHead = h;
  if (!ShapedType::isDynamic(qHeads) && !ShapedType::isDynamic(kvHeads) &&
      kvHeads > 0 && qHeads % kvHeads == 0 && qHeads != kvHeads)
    kvHead = h.floorDiv(qHeads / kvHeads);
  if (kLeaf->indices[kHeadPos] != kvHead || vLeaf->indices[kHeadPos] != kvHead)
    return refuse(m, "K and V heads are not Q's heads or a grouping of "
                     "consecutive Q heads (grouped-query attention)");
  if (dimOf(kLeaf->indices[0]) != m.batch || dimOf(vLeaf->indices[0]) != m.batch)
    return refuse(m, "K and V do not share Q's batch index");
  std::optional<unsigned> vDim = dimOf(vLeaf->indices[3]);
  // O is [b, q, h, dv] (or [b, h, q, dv]), the variables 0..3.
  SmallVector<unsigned> expected = {m.batch, m.query, m.head};
  if (m.headsFirst)
    std::swap(expected[1], expected[2]);
  if (expected != SmallVector<unsigned>{0, 1, 2} || vDim != 3u)
    return refuse(m, "the result's dimensions are not " + layout +
                         " as Q's (one layout for Q, K, V and O)");
  return true;
}

/// Every reduction runs over the whole dimension it stands for: P·V's and
/// the normalization's (`normalization`) over K's keys, the contraction
/// over head_dim (where both sizes are known).
bool checkReductionExtents(const Tracer &tracer, Match &m,
                           unsigned normalization, const Term *contraction,
                           unsigned seqPos) {
  auto sameExtent = [&](unsigned variable, int64_t size) {
    int64_t extent = tracer.extentOf(variable);
    return ShapedType::isDynamic(extent) || ShapedType::isDynamic(size) ||
           extent == size;
  };
  int64_t keys = cast<ShapedType>(m.k.getType()).getDimSize(seqPos);
  int64_t headDim = cast<ShapedType>(m.q.getType()).getDimSize(m.rank - 1);
  if (!sameExtent(m.key, keys) || !sameExtent(normalization, keys))
    return refuse(m, "P·V or the softmax's sum runs over " +
                         Twine(tracer.extentOf(!sameExtent(m.key, keys)
                                                   ? m.key
                                                   : normalization)) +
                         " keys, not K's " + Twine(keys));
  if (!sameExtent(contraction->variable, headDim))
    return refuse(m, "Q·Kᵀ sums over " +
                         Twine(tracer.extentOf(contraction->variable)) +
                         " elements, not head_dim " + Twine(headDim));
  return true;
}

/// The scale: a constant multiplying (or dividing) every use of the
/// contraction in the score `s`; the rest of the score expression is the
/// score_mod.
bool matchScale(const Term *s, const Term *contraction, Match &m) {
  const Term *scaled = nullptr;
  std::string scaleError;
  double scale = 1.0;
  std::function<void(const Term *)> findScale = [&](const Term *t) {
    for (const Term *operand : t->operands) {
      if (equalTerms(operand, contraction, Renaming())) {
        bool mul = t->isApply("arith.mulf"), div = t->isApply("arith.divf");
        if (t->operands.size() != 2)
          continue;
        const Term *other = t->operands[operand == t->operands[0] ? 1 : 0];
        other = stripCasts(other);
        if (mul || (div && operand == t->operands[0])) {
          // (A scale the op cannot take, zero or negative, stays in the
          // score_mod.)
          if (other->kind == Term::Constant && !other->scalar &&
              other->value > 0.0 && std::isfinite(other->value)) {
            double value = div ? 1.0 / other->value : other->value;
            if (scaled && (value != scale || !equalTerms(t, scaled, Renaming())))
              scaleError = "the scores are scaled by different constants";
            scale = value;
            scaled = t;
            continue;
          }
          bool constant = other->kind == Term::Constant && !other->scalar;
          if (!constant && !mentions(other, m.key) && !mentions(other, m.query))
            scaleError = "the scale of Q·Kᵀ is not a compile-time constant "
                         "(it is " +
                         (other->kind == Term::Constant
                              ? describe(other->scalar)
                              : other->kind == Term::Leaf ? describe(other->tensor)
                                                          : std::string("computed")) +
                         ")";
        }
        continue;
      }
      findScale(operand);
    }
  };
  const Term *top = stripCasts(s);
  if (equalTerms(top, contraction, Renaming())) {
    m.scaled = contraction;
    return true;
  }
  // The score itself may be the scaled contraction.
  Term wrapper;
  wrapper.kind = Term::Apply;
  wrapper.operands = {s};
  findScale(&wrapper);
  if (!scaleError.empty())
    return refuse(m, scaleError);
  m.scaled = scaled ? scaled : contraction;
  m.scale = scale;
  return true;
}

Match matchAttention(const Term *o, func::FuncOp func, const Tracer &tracer,
                     unsigned rank) {
  Match m;
  m.rank = rank;
  SoftmaxOfValues parts;
  if (!matchSoftmaxOfValues(stripCasts(o), parts))
    return m;
  // From here on it is attention-shaped: every refusal says why.
  m.attention = true;
  if (tracer.exhausted) {
    refuse(m, "the computation is too large to follow (more than " +
                  Twine(Tracer::kMaxTerms) +
                  " terms): raise one attention per function");
    return m;
  }
  m.key = parts.sum->variable;
  const Term *s = nullptr, *contraction = nullptr, *qLeaf = nullptr,
             *kLeaf = nullptr;
  unsigned seqPos = 0;
  if (!matchExponent(parts, m, s))
    return m;
  peelMasks(s, m);
  if (!findScoreContraction(s, m, contraction) ||
      !bindOperands(contraction, parts.vLeaf, func, m, qLeaf, kLeaf) ||
      !matchLayout(qLeaf, kLeaf, parts.vLeaf, func, m, seqPos) ||
      !checkReductionExtents(tracer, m, parts.z->variable, contraction,
                             seqPos) ||
      !matchScale(s, contraction, m))
    return m;
  m.score = s;
  m.scoreMod = !equalTerms(stripCasts(s), stripCasts(m.scaled), Renaming());
  return m;
}

//===----------------------------------------------------------------------===//
// The rewrite
//===----------------------------------------------------------------------===//

/// Builds the score_mod and mask_mod bodies from terms, the tensors they
/// read being `extras` (collectExtras' list, the regions' trailing
/// arguments); a term the regions cannot compute sets `why`.
class RegionEmitter {
public:
  RegionEmitter(const Match &match, func::FuncOp func, ArrayRef<Value> extras)
      : extras(extras), match(match), func(func) {}

  /// Emits `t` into `builder`'s block; `score` stands for `match.scaled`
  /// (null in the mask_mod). Null with `why` set when it cannot.
  Value emit(OpBuilder &builder, const Term *t, Value score,
             ArrayRef<Value> positions, ArrayRef<Value> extraArguments);

  std::string why;

private:
  ArrayRef<Value> extras;
  const Match &match;
  func::FuncOp func;
  llvm::DenseMap<const Term *, Value> emitted;
};

Value RegionEmitter::emit(OpBuilder &b, const Term *t, Value score,
                          ArrayRef<Value> positions,
                          ArrayRef<Value> extraArguments) {
  if (Value known = emitted.lookup(t))
    return known;
  Location loc = func.getLoc();
  auto fail = [&](const Twine &message) {
    if (why.empty())
      why = message.str();
    return Value();
  };
  // Indices: b, h, q, kv are the region's positions; nothing else may appear.
  auto index = [&](AffineExpr e) -> Value {
    unsigned roles[] = {match.batch, match.head, match.query, match.key};
    SmallVector<AffineExpr> replacement;
    unsigned most = 0;
    e.walk([&](AffineExpr sub) {
      if (auto dim = dyn_cast<AffineDimExpr>(sub))
        most = std::max(most, dim.getPosition() + 1);
    });
    SmallVector<Value> dims(most, Value());
    for (unsigned position = 0; position < most; ++position) {
      auto role = llvm::find(roles, position);
      if (role != std::end(roles))
        dims[position] = positions[role - std::begin(roles)];
      else if (e.isFunctionOfDim(position))
        return fail("a score modification depends on an index other than "
                    "batch, head, query and key");
    }
    return affine::expandAffineExpr(b, loc, e, dims, ValueRange());
  };
  Value result;
  if (score && equalTerms(t, match.scaled, Renaming())) {
    result = score;
    if (t->type != score.getType())
      result = arith::TruncFOp::create(b, loc, t->type, score);
  } else {
    switch (t->kind) {
    case Term::Constant: {
      if (t->scalar)
        return fail("a score modification reads " + describe(t->scalar) +
                    ", a scalar the regions cannot capture (pass a constant)");
      TypedAttr attr = t->attr;
      if (!attr || attr.getType() != t->type)
        return fail("a score modification uses a constant the pass cannot "
                    "rebuild");
      result = arith::ConstantOp::create(b, loc, attr);
      break;
    }
    case Term::Position:
      result = index(t->index);
      break;
    case Term::Leaf: {
      if (!isArgument(t->tensor, func))
        return fail("a score modification reads " +
                    (t->why.empty() ? describe(t->tensor) : t->why) +
                    "; the regions can read only function arguments (extras)");
      if (!isa<RankedTensorType>(t->tensor.getType()))
        return fail("a score modification reads an unranked tensor");
      if (t->tensor == match.q || t->tensor == match.k || t->tensor == match.v)
        return fail("a score modification reads Q, K or V element by element");
      // collectExtras found every tensor the terms read: the region's
      // arguments follow that list.
      unsigned position = llvm::find(extras, t->tensor) - extras.begin();
      if (position >= extraArguments.size())
        return fail("internal: extra without a region argument");
      SmallVector<Value> indices;
      for (AffineExpr e : t->indices) {
        Value i = index(e);
        if (!i)
          return Value();
        indices.push_back(i);
      }
      result = memref::LoadOp::create(b, loc, extraArguments[position], indices);
      break;
    }
    case Term::Sum:
    case Term::Max:
      return fail("a score modification reads a value computed inside the "
                  "function (a reduction); the regions compute one score at "
                  "a time from function arguments");
    case Term::Apply: {
      if (!t->op)
        return fail("a score modification holds a softmax");
      IRMapping mapping;
      for (auto [operand, term] : llvm::zip(t->op->getOperands(), t->operands)) {
        Value v = emit(b, term, score, positions, extraArguments);
        if (!v)
          return Value();
        mapping.map(operand, v);
      }
      result = b.clone(*t->op, mapping)->getResult(0);
      break;
    }
    }
  }
  if (result)
    emitted[t] = result;
  return result;
}

/// The extras a region reads: the ranked tensor arguments its terms read,
/// but for those under `hole` (the scaled score the region receives).
void collectExtras(const Term *t, const Term *hole, func::FuncOp func,
                   SmallVectorImpl<Value> &extras) {
  if (hole && equalTerms(t, hole, Renaming()))
    return;
  if (t->kind == Term::Leaf && isArgument(t->tensor, func) &&
      isa<RankedTensorType>(t->tensor.getType()) &&
      !llvm::is_contained(extras, t->tensor))
    extras.push_back(t->tensor);
  for (const Term *o : t->operands)
    collectExtras(o, hole, func, extras);
}

/// Why some row of `op` may see no key under its mask_mod, or "" when every
/// row sees one: the sequence lengths must be static and the mask_mod's
/// bounds exact.
std::string rowWithoutKeys(AttentionOp op, bool headsFirst) {
  unsigned seqDim = headsFirst ? 2 : 1;
  int64_t seqQ = cast<ShapedType>(op.getQ().getType()).getDimSize(seqDim);
  int64_t seqK = cast<ShapedType>(op.getK().getType()).getDimSize(seqDim);
  if (ShapedType::isDynamic(seqQ) || ShapedType::isDynamic(seqK))
    return "the sequence lengths are dynamic";
  MaskModBounds bounds = analyzeMaskMod(op.getMaskMod());
  if (!bounds.exact)
    return "the mask is not a band of key positions the pass can read";
  for (int64_t query = 0; query < seqQ; ++query)
    if (visibleKeys(bounds.bounds, query, seqQ, seqK).empty())
      return "query position " + std::to_string(query) + " sees no key";
  return "";
}

/// Replaces `result` with the fa4.attention `m` describes; false with
/// `why` set when the op would not verify.
bool rewrite(OpResult result, const Match &m, func::FuncOp func, std::string &why) {
  Operation *root = result.getOwner();
  Location loc = root->getLoc();
  OpBuilder b(root);
  MLIRContext *context = b.getContext();
  auto outType = cast<RankedTensorType>(result.getType());
  // The rank-3 form: views [batch·heads, seq, 1, head_dim] of Q, K and V
  // (one head per batch entry; expand_shape bufferizes to a view, no copy),
  // and O collapsed back.
  Value q = m.q, k = m.k, v = m.v;
  // FP8's attention rounds a shifted P to e4m3 and takes descales: not the
  // roundings a linalg computation on e4m3 tensors states.
  if (isa<Float8E4M3FNType>(getElementTypeOrSelf(q.getType()))) {
    why = "its inputs are FP8 (e4m3): fa4's FP8 attention (a shifted P in "
          "e4m3, descale tables) is not what the linalg states; write "
          "fa4.attention with e4m3 operands and descales instead";
    return false;
  }
  SmallVector<Operation *> views;
  SmallVector<ReassociationIndices> oneHead = {{0}, {1}, {2, 3}};
  auto withHead = [](RankedTensorType type) {
    return RankedTensorType::get(
        {type.getDimSize(0), type.getDimSize(1), 1, type.getDimSize(2)},
        type.getElementType());
  };
  if (m.rank == 3) {
    for (Value *operand : {&q, &k, &v}) {
      auto expanded = tensor::ExpandShapeOp::create(
          b, loc, withHead(cast<RankedTensorType>(operand->getType())),
          *operand, oneHead);
      views.push_back(expanded);
      *operand = expanded;
    }
    outType = withHead(outType);
  }

  // The extras: every function argument the regions read, in first-read order.
  SmallVector<Value> extras;
  if (m.scoreMod)
    collectExtras(m.score, m.scaled, func, extras);
  for (auto [condition, negated] : m.masks)
    collectExtras(condition, nullptr, func, extras);

  SmallVector<Value> sizes;
  for (auto [dim, size] : llvm::enumerate(outType.getShape()))
    if (ShapedType::isDynamic(size))
      sizes.push_back(tensor::DimOp::create(b, loc, q, dim));
  Value init = tensor::EmptyOp::create(b, loc, outType.getShape(),
                                       outType.getElementType(), sizes);
  SmallVector<Value> buffers;
  for (Value extra : extras) {
    auto type = cast<RankedTensorType>(extra.getType());
    buffers.push_back(bufferization::ToBufferOp::create(
        b, loc, MemRefType::get(type.getShape(), type.getElementType()), extra,
        /*readOnly=*/true));
  }
  auto op = AttentionOp::create(
      b, loc, q, k, v, init, Value(), buffers,
      MaskKindAttr::get(context, MaskKind::none), b.getI64IntegerAttr(-1),
      b.getI64IntegerAttr(-1), b.getF32FloatAttr(static_cast<float>(m.scale)),
      b.getF32FloatAttr(0.0f), m.headsFirst ? b.getUnitAttr() : UnitAttr(),
      /*block_mask=*/IntegerAttr(), /*seqused_k=*/IntegerAttr(),
      /*block_table=*/IntegerAttr(), /*num_splits=*/IntegerAttr(),
      /*split_workspace=*/IntegerAttr(), /*cu_seqlens_q=*/IntegerAttr(),
      /*cu_seqlens_k=*/IntegerAttr(), /*q_descale=*/IntegerAttr(),
      /*k_descale=*/IntegerAttr(), /*v_descale=*/IntegerAttr());

  SmallVector<Type> extraTypes;
  for (Value buffer : buffers)
    extraTypes.push_back(buffer.getType());
  Type indexType = b.getIndexType();
  RegionEmitter emitter(m, func, extras);
  // Fills one region: leading arguments, then the extras.
  auto fill = [&](Region &region, ArrayRef<Type> leading,
                  function_ref<Value(OpBuilder &, Block *)> body) {
    Block *block = new Block();
    region.push_back(block);
    for (Type type : leading)
      block->addArgument(type, loc);
    for (Type type : extraTypes)
      block->addArgument(type, loc);
    OpBuilder inner = OpBuilder::atBlockEnd(block);
    Value yielded = body(inner, block);
    if (!yielded)
      return false;
    YieldOp::create(inner, loc, yielded);
    return true;
  };
  auto extraArgs = [&](Block *block, unsigned leading) {
    return SmallVector<Value>(block->getArguments().drop_front(leading));
  };
  bool ok = true;
  if (m.scoreMod) {
    ok = fill(op.getScoreMod(),
              {b.getF32Type(), indexType, indexType, indexType, indexType},
              [&](OpBuilder &inner, Block *block) -> Value {
                SmallVector<Value> positions(block->getArguments().slice(1, 4));
                Value v = emitter.emit(inner, m.score, block->getArgument(0),
                                       positions, extraArgs(block, 5));
                if (v && v.getType() != inner.getF32Type())
                  v = arith::ExtFOp::create(inner, loc, inner.getF32Type(), v);
                return v;
              });
  }
  if (ok && !m.masks.empty()) {
    RegionEmitter maskEmitter(m, func, extras);
    ok = fill(op.getMaskMod(), {indexType, indexType, indexType, indexType},
              [&](OpBuilder &inner, Block *block) -> Value {
                SmallVector<Value> positions(block->getArguments().take_front(4));
                Value all;
                for (auto [condition, negated] : m.masks) {
                  Value c = maskEmitter.emit(inner, condition, Value(), positions,
                                             extraArgs(block, 4));
                  if (!c)
                    return Value();
                  if (negated) {
                    Value one = arith::ConstantOp::create(inner, loc, inner.getBoolAttr(true));
                    c = arith::XOrIOp::create(inner, loc, c, one);
                  }
                  all = all ? arith::AndIOp::create(inner, loc, all, c).getResult() : c;
                }
                return all;
              });
    if (!ok)
      why = maskEmitter.why;
  }
  if (!ok && why.empty())
    why = emitter.why;
  if (ok) {
    // The op must verify as built; its diagnostic is the refusal.
    ScopedDiagnosticHandler capture(context, [&](Diagnostic &diagnostic) {
      if (why.empty())
        why = "fa4.attention would not verify: " + diagnostic.str();
      return success();
    });
    ok = succeeded(mlir::verify(op));
  }
  if (ok && m.finiteFill) {
    std::string unseen = rowWithoutKeys(op, m.headsFirst);
    if (!unseen.empty()) {
      why = "a mask fills hidden scores with the finite " +
            llvm::formatv("{0:e}", *m.finiteFill).str() +
            " instead of -inf, so a row that sees no key averages V there, "
            "where fa4.attention gives O = 0; such a mask is raised only "
            "when every row provably sees a key, and " + unseen +
            " (fill with -inf to accept fa4's semantics)";
      ok = false;
    }
  }
  if (!ok) {
    SmallVector<Operation *> made = {op};
    for (Value buffer : llvm::reverse(buffers))
      made.push_back(buffer.getDefiningOp());
    made.push_back(init.getDefiningOp());
    for (Value size : llvm::reverse(sizes))
      made.push_back(size.getDefiningOp());
    made.append(views.rbegin(), views.rend());
    for (Operation *dead : made)
      dead->erase();
    return false;
  }
  Value out = op->getResult(0);
  if (m.rank == 3) {
    auto collapsed = tensor::CollapseShapeOp::create(b, loc, out, oneHead);
    result.replaceAllUsesWith(collapsed.getResult());
    // Where the function expands O back to one head (a rank-4 result of
    // rank-3 arguments), the pair is O itself.
    for (Operation *user : llvm::make_early_inc_range(collapsed->getUsers()))
      if (auto expand = dyn_cast<tensor::ExpandShapeOp>(user);
          expand && expand.getType() == out.getType() &&
          expand.getReassociationIndices() == oneHead) {
        expand.getResult().replaceAllUsesWith(out);
        expand.erase();
      }
    if (collapsed->use_empty())
      collapsed.erase();
    return true;
  }
  result.replaceAllUsesWith(out);
  return true;
}

struct RaiseAttentionPass
    : public fa4::impl::FA4RaiseAttentionBase<RaiseAttentionPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    // Candidates: rank-4 (and rank-3, collapsed) tensor results, the last
    // first, so that the
    // outermost form of an attention (after its final transpose or reshape)
    // is tried before the values inside it.
    SmallVector<OpResult> candidates;
    func.walk([&](Operation *op) {
      if (isa<AttentionOp>(op))
        return;
      for (OpResult r : op->getResults())
        if (auto type = dyn_cast<RankedTensorType>(r.getType()))
          if (type.getRank() == 4 || type.getRank() == 3)
            candidates.push_back(r);
    });
    // A raise claims the ops it read, so the values inside it are not tried
    // again. A refusal claims nothing: the attention inside an outer form
    // the op cannot take (a final transpose to another layout, an upcast)
    // is still raised, and the refusal's remark is kept only when no raise
    // happened inside it or around it and no other refusal encloses it.
    llvm::DenseSet<Operation *> claimed;
    llvm::SetVector<Operation *> touched;
    struct Refusal {
      Operation *root;
      std::string why;
      llvm::SetVector<Operation *> visited;
    };
    SmallVector<Refusal> refusals;
    SmallVector<Operation *> raised;
    for (OpResult candidate : llvm::reverse(candidates)) {
      if (claimed.contains(candidate.getOwner()))
        continue;
      MLIRContext *context = func.getContext();
      auto type = cast<RankedTensorType>(candidate.getType());
      SmallVector<AffineExpr> at;
      for (unsigned dim = 0; dim < type.getRank(); ++dim)
        at.push_back(getAffineDimExpr(dim, context));
      Tracer tracer(type.getShape());
      const Term *element = tracer.trace(candidate, at);
      Match m = matchAttention(element, func, tracer, type.getRank());
      if (!m.attention)
        continue;
      std::string why = m.why;
      if (why.empty() && rewrite(candidate, m, func, why)) {
        claimed.insert(tracer.visited.begin(), tracer.visited.end());
        touched.insert(tracer.visited.begin(), tracer.visited.end());
        raised.push_back(candidate.getOwner());
        continue;
      }
      refusals.push_back({candidate.getOwner(), why, tracer.visited});
    }
    for (const Refusal &refusal : refusals) {
      bool inner =
          touched.contains(refusal.root) ||
          llvm::any_of(raised, [&](Operation *op) {
            return refusal.visited.contains(op);
          }) ||
          llvm::any_of(refusals, [&](const Refusal &other) {
            return &other != &refusal && other.visited.contains(refusal.root);
          });
      if (!inner)
        refusal.root->emitRemark() << "not raised to fa4.attention: " << refusal.why;
    }
    // The ops the raises left unused: those they read, and then whatever
    // only those read (constants, destinations), in the function's own
    // block. Ops that were dead before are not the pass's to remove.
    Block &body = func.getBody().front();
    SmallVector<Operation *> worklist;
    for (Operation &op : body)
      if (touched.contains(&op))
        worklist.push_back(&op);
    llvm::DenseSet<Operation *> erased;
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (erased.contains(op) || !isOpTriviallyDead(op))
        continue;
      op->walk([&](Operation *inner) {
        for (Value operand : inner->getOperands())
          if (Operation *def = operand.getDefiningOp();
              def && def->getBlock() == &body && def != op)
            worklist.push_back(def);
      });
      erased.insert(op);
      op->erase();
    }
  }
};

} // namespace
