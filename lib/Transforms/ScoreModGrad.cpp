//===- ScoreModGrad.cpp - the derivative of a score_mod region ------------===//
//
// One walk down the straight-line region: each op is copied, and when the
// score flows into one of its float results, that op's rule builds the
// result's tangent right after the copy, from the copied operands and their
// tangents. A missing tangent is a zero one, so an operand the score never
// reaches costs no instruction. The rules build only ops that score_mod
// regions may hold (fa4-sim's ModProgram and the kernels run the same list),
// so the derivative is a region like any score_mod.
//
//===----------------------------------------------------------------------===//

#include "fa4/Transforms/ScoreModGrad.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <memory>

using namespace mlir;
using namespace mlir::fa4;

namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

/// The derivative block under construction: the copy of each value of the
/// score_mod and the tangent of each value the score flows into.
class Tangents {
public:
  explicit Tangents(OpBuilder &builder)
      : builder(builder), loc(builder.getUnknownLoc()) {}

  /// The copy of `original` in the derivative block.
  Value primal(Value original) const { return copies.lookup(original); }
  /// The tangent of `original`; null (zero) where the score does not reach.
  Value tangent(Value original) const { return tangents.lookup(original); }
  void setTangent(Value original, Value tangent) {
    tangents[original] = tangent;
  }
  IRMapping &mapping() { return copies; }
  /// Where the ops built next say they come from.
  void setLoc(Location next) { loc = next; }

  template <typename OpT, typename... Args> Value build(Args &&...args) {
    return OpT::create(builder, loc, std::forward<Args>(args)...);
  }
  Value constant(Type type, double value) {
    return build<arith::ConstantOp>(builder.getFloatAttr(type, value));
  }
  Value scaled(Value x, double factor) {
    return build<arith::MulFOp>(x, constant(x.getType(), factor));
  }
  Value orZero(Value t, Type type) { return t ? t : constant(type, 0.0); }

  // Tangent arithmetic, where a null tangent is zero: nothing is built for
  // a term that vanishes.
  Value add(Value a, Value b) {
    if (!a || !b)
      return a ? a : b;
    return build<arith::AddFOp>(a, b);
  }
  Value sub(Value a, Value b) {
    if (!b)
      return a;
    return a ? build<arith::SubFOp>(a, b) : build<arith::NegFOp>(b);
  }
  Value neg(Value t) { return t ? build<arith::NegFOp>(t) : t; }
  // A tangent that is zero at run time stays zero whatever it is multiplied
  // or divided by: a piece the score does not move (the flat side of a max,
  // a select's other branch) has derivative 0 even where the next op's
  // slope is infinite (sqrt at 0), as the autograd frameworks' backward
  // passes give it, where 0·∞ would make a NaN.
  Value mul(Value factor, Value t) {
    return t ? keepZero(t, build<arith::MulFOp>(factor, t)) : t;
  }
  Value div(Value t, Value divisor) {
    return t ? keepZero(t, build<arith::DivFOp>(t, divisor)) : t;
  }
  /// `product` where `t` is not zero, else 0.
  Value keepZero(Value t, Value product) {
    Value zero = constant(t.getType(), 0.0);
    Value isZero = build<arith::CmpFOp>(arith::CmpFPredicate::OEQ, t, zero);
    return build<arith::SelectOp>(isZero, zero, product);
  }

private:
  OpBuilder &builder;
  Location loc;
  IRMapping copies;
  llvm::DenseMap<Value, Value> tangents;
};

} // namespace

//===----------------------------------------------------------------------===//
// The rules: the tangent of each op's result given its operands' tangents, at
// least one of which is not null. A rule may return null for a zero tangent.
//===----------------------------------------------------------------------===//

static Value tangentOf(Tangents &t, arith::AddFOp op) {
  return t.add(t.tangent(op.getLhs()), t.tangent(op.getRhs()));
}

static Value tangentOf(Tangents &t, arith::SubFOp op) {
  return t.sub(t.tangent(op.getLhs()), t.tangent(op.getRhs()));
}

static Value tangentOf(Tangents &t, arith::NegFOp op) {
  return t.neg(t.tangent(op.getOperand()));
}

static Value tangentOf(Tangents &t, arith::MulFOp op) {
  return t.add(t.mul(t.primal(op.getRhs()), t.tangent(op.getLhs())),
               t.mul(t.primal(op.getLhs()), t.tangent(op.getRhs())));
}

// (x / y)' = (x' - (x / y) · y') / y
static Value tangentOf(Tangents &t, arith::DivFOp op) {
  Value numerator =
      t.sub(t.tangent(op.getLhs()),
            t.mul(t.primal(op.getResult()), t.tangent(op.getRhs())));
  return t.div(numerator, t.primal(op.getRhs()));
}

// fmod(x, y) = x - trunc(x / y) · y, the quotient piecewise constant.
static Value tangentOf(Tangents &t, arith::RemFOp op) {
  Value dy = t.tangent(op.getRhs());
  Value truncated;
  if (dy) {
    // trunc(q) = copysign(floor(|q|), q): math.trunc is not among the ops a
    // region may hold.
    Value quotient =
        t.build<arith::DivFOp>(t.primal(op.getLhs()), t.primal(op.getRhs()));
    truncated = t.build<math::CopySignOp>(
        t.build<math::FloorOp>(t.build<math::AbsFOp>(quotient)), quotient);
  }
  return t.sub(t.tangent(op.getLhs()), t.mul(truncated, dy));
}

/// A maximum or minimum: the tangent of the operand the result equals (the
/// first on a tie; where the result is NaN its tangent means nothing). The
/// comparison with the result covers the NaN-ignoring maxnumf/minnumf too.
static Value tangentOfChoice(Tangents &t, Operation *op) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Type type = op->getResult(0).getType();
  Value isLhs = t.build<arith::CmpFOp>(
      arith::CmpFPredicate::OEQ, t.primal(op->getResult(0)), t.primal(lhs));
  return t.build<arith::SelectOp>(isLhs, t.orZero(t.tangent(lhs), type),
                                  t.orZero(t.tangent(rhs), type));
}

static Value tangentOf(Tangents &t, arith::MaximumFOp op) {
  return tangentOfChoice(t, op);
}
static Value tangentOf(Tangents &t, arith::MinimumFOp op) {
  return tangentOfChoice(t, op);
}
static Value tangentOf(Tangents &t, arith::MaxNumFOp op) {
  return tangentOfChoice(t, op);
}
static Value tangentOf(Tangents &t, arith::MinNumFOp op) {
  return tangentOfChoice(t, op);
}

// Piecewise: the condition's own dependence on the score moves no value
// except at the switch, where there is no derivative.
static Value tangentOf(Tangents &t, arith::SelectOp op) {
  Type type = op.getType();
  return t.build<arith::SelectOp>(
      t.primal(op.getCondition()), t.orZero(t.tangent(op.getTrueValue()), type),
      t.orZero(t.tangent(op.getFalseValue()), type));
}

static Value tangentOf(Tangents &t, arith::ExtFOp op) {
  return t.build<arith::ExtFOp>(op.getType(), t.tangent(op.getIn()));
}

static Value tangentOf(Tangents &t, arith::TruncFOp op) {
  return t.build<arith::TruncFOp>(op.getType(), t.tangent(op.getIn()));
}

static Value tangentOf(Tangents &t, math::FmaOp op) {
  Value a = op.getA(), b = op.getB();
  return t.add(
      t.add(t.mul(t.primal(b), t.tangent(a)), t.mul(t.primal(a), t.tangent(b))),
      t.tangent(op.getC()));
}

static Value tangentOf(Tangents &t, math::ExpOp op) {
  return t.mul(t.primal(op.getResult()), t.tangent(op.getOperand()));
}

static Value tangentOf(Tangents &t, math::Exp2Op op) {
  return t.mul(t.scaled(t.primal(op.getResult()), kLn2),
               t.tangent(op.getOperand()));
}

static Value tangentOf(Tangents &t, math::ExpM1Op op) {
  Value z = t.primal(op.getResult());
  return t.mul(t.build<arith::AddFOp>(z, t.constant(z.getType(), 1.0)),
               t.tangent(op.getOperand()));
}

static Value tangentOf(Tangents &t, math::LogOp op) {
  return t.div(t.tangent(op.getOperand()), t.primal(op.getOperand()));
}

static Value tangentOf(Tangents &t, math::Log2Op op) {
  return t.div(t.tangent(op.getOperand()),
               t.scaled(t.primal(op.getOperand()), kLn2));
}

static Value tangentOf(Tangents &t, math::Log1pOp op) {
  Value x = t.primal(op.getOperand());
  return t.div(t.tangent(op.getOperand()),
               t.build<arith::AddFOp>(x, t.constant(x.getType(), 1.0)));
}

// tanh' = 1 - tanh²
static Value tangentOf(Tangents &t, math::TanhOp op) {
  Value z = t.primal(op.getResult());
  Value square = t.build<arith::MulFOp>(z, z);
  return t.mul(t.build<arith::SubFOp>(t.constant(z.getType(), 1.0), square),
               t.tangent(op.getOperand()));
}

// sqrt' = 0.5 / sqrt
static Value tangentOf(Tangents &t, math::SqrtOp op) {
  return t.div(t.scaled(t.tangent(op.getOperand()), 0.5),
               t.primal(op.getResult()));
}

// rsqrt' = -0.5 · rsqrt³
static Value tangentOf(Tangents &t, math::RsqrtOp op) {
  Value z = t.primal(op.getResult());
  Value cube = t.build<arith::MulFOp>(t.build<arith::MulFOp>(z, z), z);
  return t.mul(t.scaled(cube, -0.5), t.tangent(op.getOperand()));
}

// erf' = 2/√π · exp(-x²)
static Value tangentOf(Tangents &t, math::ErfOp op) {
  Value x = t.primal(op.getOperand());
  Value gaussian = t.build<math::ExpOp>(
      t.build<arith::NegFOp>(t.build<arith::MulFOp>(x, x)));
  return t.mul(t.scaled(gaussian, kTwoOverSqrtPi), t.tangent(op.getOperand()));
}

static Value tangentOf(Tangents &t, math::SinOp op) {
  return t.mul(t.build<math::CosOp>(t.primal(op.getOperand())),
               t.tangent(op.getOperand()));
}

static Value tangentOf(Tangents &t, math::CosOp op) {
  return t.neg(t.mul(t.build<math::SinOp>(t.primal(op.getOperand())),
                     t.tangent(op.getOperand())));
}

/// copysign(1, x): the sign of x, ±1 at a signed zero.
static Value signOf(Tangents &t, Value x) {
  return t.build<math::CopySignOp>(t.constant(x.getType(), 1.0), x);
}

static Value tangentOf(Tangents &t, math::AbsFOp op) {
  return t.mul(signOf(t, t.primal(op.getOperand())),
               t.tangent(op.getOperand()));
}

// copysign(x, y) = |x| · sign(y): d/dx = sign(x) · sign(y), d/dy = 0.
static Value tangentOf(Tangents &t, math::CopySignOp op) {
  Value dx = t.tangent(op.getLhs());
  if (!dx)
    return Value();
  Value signs = t.build<arith::MulFOp>(signOf(t, t.primal(op.getLhs())),
                                       signOf(t, t.primal(op.getRhs())));
  return t.mul(signs, dx);
}

// (x^y)' = y · x^(y-1) · x' + x^y · ln(x) · y'. The logarithm is built only
// where the exponent varies: with a constant exponent (an integer power) x
// may be negative.
static Value tangentOf(Tangents &t, math::PowFOp op) {
  Value x = t.primal(op.getLhs()), y = t.primal(op.getRhs());
  Value dx = t.tangent(op.getLhs()), dy = t.tangent(op.getRhs());
  Value viaBase, viaExponent;
  if (dx) {
    Value lowered = t.build<math::PowFOp>(
        x, t.build<arith::SubFOp>(y, t.constant(y.getType(), 1.0)));
    viaBase = t.mul(t.build<arith::MulFOp>(y, lowered), dx);
  }
  if (dy) {
    // x^y · ln(x), 0 where x^y is (a zero base: 0 · -inf is no slope).
    Value power = t.primal(op.getResult());
    Value slope = t.keepZero(power, t.build<arith::MulFOp>(
                                        power, t.build<math::LogOp>(x)));
    viaExponent = t.mul(slope, dy);
  }
  return t.add(viaBase, viaExponent);
}

// Piecewise constant.
static Value tangentOf(Tangents &, math::FloorOp) { return Value(); }
static Value tangentOf(Tangents &, math::CeilOp) { return Value(); }
static Value tangentOf(Tangents &, math::RoundOp) { return Value(); }

using TangentRule = Value (*)(Tangents &, Operation *);

template <typename OpT> static Value applyRule(Tangents &t, Operation *op) {
  return tangentOf(t, cast<OpT>(op));
}

/// The derivative rule of `op`'s kind, null when it has none: the one list
/// that differentiateScoreMod and firstNonDifferentiable both read.
static TangentRule ruleFor(Operation *op) {
  return llvm::TypeSwitch<Operation *, TangentRule>(op)
      .Case<arith::AddFOp, arith::SubFOp, arith::NegFOp, arith::MulFOp,
            arith::DivFOp, arith::RemFOp, arith::MaximumFOp, arith::MinimumFOp,
            arith::MaxNumFOp, arith::MinNumFOp, arith::SelectOp, arith::ExtFOp,
            arith::TruncFOp, math::FmaOp, math::ExpOp, math::Exp2Op,
            math::ExpM1Op, math::LogOp, math::Log2Op, math::Log1pOp,
            math::TanhOp, math::SqrtOp, math::RsqrtOp, math::ErfOp, math::SinOp,
            math::CosOp, math::AbsFOp, math::CopySignOp, math::PowFOp,
            math::FloorOp, math::CeilOp, math::RoundOp>(
          [](auto concrete) -> TangentRule {
            return &applyRule<decltype(concrete)>;
          })
      .Default([](Operation *) -> TangentRule { return nullptr; });
}

/// Whether the score flows into a float result of `op`: one of its operands
/// carries a tangent. A comparison or a conversion to an integer has no float
/// result, so the score stops there (piecewise constant).
static bool carriesScore(Operation &op,
                         llvm::function_ref<bool(Value)> hasTangent) {
  return llvm::any_of(op.getResultTypes(), llvm::IsaPred<FloatType>) &&
         llvm::any_of(op.getOperands(), hasTangent);
}

/// Drops the copies the derivative does not read (the primal's own result,
/// the loads of an additive bias): the backward kernel runs the region for
/// every score.
static void eraseUnused(Block &block) {
  Operation *terminator = block.getTerminator();
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (&op != terminator && isOpTriviallyDead(&op))
      op.erase();
}

LogicalResult mlir::fa4::differentiateScoreMod(Region &scoreMod,
                                               Region &derivative) {
  assert(scoreMod.hasOneBlock() && derivative.empty() &&
         "differentiates a score_mod block into an empty region");
  Block &body = scoreMod.front();
  Value score = body.getArgument(0);
  // Built detached, so that a refusal leaves `derivative` as it was; neither
  // region need have a parent op, so the context comes from a type.
  auto block = std::make_unique<Block>();
  OpBuilder builder(score.getContext());
  builder.setInsertionPointToEnd(block.get());
  Tangents t(builder);
  for (BlockArgument argument : body.getArguments())
    t.mapping().map(argument,
                    block->addArgument(argument.getType(), argument.getLoc()));
  t.setLoc(score.getLoc());
  t.setTangent(score, t.constant(score.getType(), 1.0));

  auto hasTangent = [&](Value value) {
    return static_cast<bool>(t.tangent(value));
  };
  for (Operation &op : body.without_terminator()) {
    builder.clone(op, t.mapping());
    // A bitcast of the score to an integer is not a piecewise constant (as
    // a comparison or fptosi is): its bits come back as a float with a
    // slope no rule knows.
    if (isa<arith::BitcastOp>(op) && llvm::any_of(op.getOperands(), hasTangent))
      return op.emitError()
             << "fa4.attention_backward cannot differentiate 'arith.bitcast' "
                "in the score_mod: it reinterprets the score's bits, which "
                "have no derivative";
    if (!carriesScore(op, hasTangent))
      continue;
    TangentRule rule = ruleFor(&op);
    if (!rule)
      return op.emitError()
             << "fa4.attention_backward cannot differentiate '" << op.getName()
             << "' in the score_mod: the score flows into it and it has no "
                "derivative rule";
    t.setLoc(op.getLoc());
    Value result = op.getResult(0);
    t.setTangent(result, t.orZero(rule(t, &op), result.getType()));
  }

  auto yield = cast<YieldOp>(body.getTerminator());
  Value newScore = yield.getValue();
  t.setLoc(yield.getLoc());
  YieldOp::create(builder, yield.getLoc(),
                  t.orZero(t.tangent(newScore), newScore.getType()));
  eraseUnused(*block);
  derivative.push_back(block.release());
  return success();
}

Operation *mlir::fa4::firstNonDifferentiable(Region &scoreMod) {
  if (scoreMod.empty())
    return nullptr;
  Block &body = scoreMod.front();
  llvm::DenseSet<Value> reached = {body.getArgument(0)};
  auto hasTangent = [&](Value value) { return reached.contains(value); };
  for (Operation &op : body.without_terminator()) {
    // (A bitcast of the score: differentiateScoreMod refuses it too.)
    if (isa<arith::BitcastOp>(op) && llvm::any_of(op.getOperands(), hasTangent))
      return &op;
    if (!carriesScore(op, hasTangent))
      continue;
    if (!ruleFor(&op))
      return &op;
    reached.insert(op.getResult(0));
  }
  return nullptr;
}
