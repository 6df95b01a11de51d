//===- ScoreModGradTest.cpp - score_mod derivatives by finite differences -===//
//
// Each score_mod below is differentiated into the score_mod of a copy of its
// function, and both regions run in double as fa4-sim's reference runs them,
// on the same extras: at every sample the derivative must agree with the
// central finite difference of the region itself. The samples keep clear of
// the kinks (a max's tie, a select's switch, a floor's step), where neither
// side has a derivative to agree on.
//
//===----------------------------------------------------------------------===//

#include "Succeeds.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/InitFA4.h"
#include "fa4/Sim/Mods.h"
#include "fa4/Transforms/ScoreModGrad.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <cmath>
#include <functional>
#include <memory>

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::fa4;

namespace {

using ScoreFunction =
    std::function<double(double s, int64_t b, int64_t h, int64_t i, int64_t j)>;

struct Position {
  int64_t batch, head, query, key;
};
constexpr Position kPositions[] = {{0, 0, 3, 5}, {0, 1, 40, 17}, {0, 1, 63, 0}};
constexpr double kScores[] = {-2.3, -0.55, 0.37, 1.15, 2.71};
constexpr double kStep = 1e-5;
constexpr uint64_t kSeed = 7;

AttentionOp attentionIn(func::FuncOp func) {
  AttentionOp found;
  func.walk([&](AttentionOp op) { found = op; });
  return found;
}

class ScoreModGradTest : public ::testing::Test {
protected:
  ScoreModGradTest() {
    DialectRegistry registry;
    registerTileLevelDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  /// Parses @mod, one fa4.attention whose score_mod is `body` over %s, %b,
  /// %h, %i, %j and the extras %bias ([q_idx, kv_idx]) and %slopes
  /// ([q_head]).
  bool parse(const std::string &body) {
    std::string text = R"(
      func.func @mod(%query: memref<1x64x2x64xf16>,
                     %key: memref<1x64x2x64xf16>,
                     %value: memref<1x64x2x64xf16>,
                     %out: memref<1x64x2x64xf16>,
                     %bias_table: memref<64x64xf32>,
                     %slope_table: memref<2xf32>) {
        fa4.attention %query, %key, %value -> %out
            extras(%bias_table, %slope_table : memref<64x64xf32>, memref<2xf32>)
            : memref<1x64x2x64xf16>, memref<1x64x2x64xf16>,
              memref<1x64x2x64xf16> -> memref<1x64x2x64xf16>
        score_mod {
        ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
             %bias: memref<64x64xf32>, %slopes: memref<2xf32>):
    )" + body + R"(
        }
        return
      })";
    module = parseSourceString<ModuleOp>(text, &context);
    return static_cast<bool>(module);
  }

  func::FuncOp function(StringRef name) {
    return module->lookupSymbol<func::FuncOp>(name);
  }
  Region &scoreMod(StringRef name) {
    return attentionIn(function(name)).getScoreMod();
  }

  /// Differentiates @mod's score_mod into the score_mod of @derivative, a copy
  /// of @mod; false with `diagnostics` holding what was reported.
  bool differentiate() {
    func::FuncOp copy = function("mod").clone();
    copy.setSymName("derivative");
    module->push_back(copy);
    Region &derivative = attentionIn(copy).getScoreMod();
    derivative.getBlocks().clear();
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
      diagnostics += diagnostic.str();
      return success();
    });
    if (failed(differentiateScoreMod(scoreMod("mod"), derivative)))
      return false;
    // The derivative is a score_mod like any other.
    EXPECT_TRUE(succeeded(verify(*module))) << diagnostics;
    return true;
  }

  /// @name's score_mod as fa4-sim's float64 reference runs it, on extras
  /// drawn from one seed: @mod and @derivative read the same ones.
  ScoreFunction evaluator(StringRef name, std::unique_ptr<sim::Mods> &mods) {
    std::string message;
    if (!fa4test::succeeds(sim::Mods::fromFunction(function(name)), mods,
                           message)) {
      ADD_FAILURE() << message;
      return {};
    }
    sim::Problem problem;
    problem.seqQ = problem.seqK = 64;
    problem.qHeads = problem.kvHeads = 2;
    if (!fa4test::succeeds(mods->fillExtras(problem, kSeed), message)) {
      ADD_FAILURE() << message;
      return {};
    }
    mods->attach(problem);
    return problem.scoreMod;
  }

  /// Differentiates `body` and checks the derivative against central finite
  /// differences at `scores` at every position.
  void expectMatchesFiniteDifferences(const std::string &body,
                                      llvm::ArrayRef<double> scores = kScores) {
    ASSERT_TRUE(parse(body)) << body;
    EXPECT_EQ(firstNonDifferentiable(scoreMod("mod")), nullptr);
    ASSERT_TRUE(differentiate()) << diagnostics;
    std::unique_ptr<sim::Mods> modMods, derivativeMods;
    ScoreFunction f = evaluator("mod", modMods);
    ScoreFunction derivative = evaluator("derivative", derivativeMods);
    ASSERT_TRUE(f && derivative);
    for (Position p : kPositions) {
      for (double s : scores) {
        auto at = [&](const ScoreFunction &g, double score) {
          return g(score, p.batch, p.head, p.query, p.key);
        };
        double expected = (at(f, s + kStep) - at(f, s - kStep)) / (2 * kStep);
        EXPECT_NEAR(at(derivative, s), expected,
                    1e-6 * std::max(1.0, std::fabs(expected)))
            << "score " << s << " at (b, h, i, j) = (" << p.batch << ", "
            << p.head << ", " << p.query << ", " << p.key << ")";
      }
    }
    EXPECT_EQ(modMods->error(), "");
    EXPECT_EQ(derivativeMods->error(), "");
  }

  /// The ops of @derivative's score_mod named `name`.
  size_t countInDerivative(StringRef name) {
    size_t count = 0;
    scoreMod("derivative").walk([&](Operation *op) {
      count += op->getName().getStringRef() == name;
    });
    return count;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string diagnostics;
};

TEST_F(ScoreModGradTest, IdentityIsOne) {
  ASSERT_NO_FATAL_FAILURE(expectMatchesFiniteDifferences("fa4.yield %s : f32"));
  Block &block = scoreMod("derivative").front();
  ASSERT_EQ(block.getOperations().size(), 2u);
  auto one = dyn_cast<arith::ConstantOp>(block.front());
  ASSERT_TRUE(one);
  EXPECT_EQ(cast<FloatAttr>(one.getValue()).getValueAsDouble(), 1.0);
}

TEST_F(ScoreModGradTest, ScaleAndBiasLeavesTheLoadOut) {
  ASSERT_NO_FATAL_FAILURE(expectMatchesFiniteDifferences(R"(
    %x = memref.load %bias[%i, %j] : memref<64x64xf32>
    %c = arith.constant 0.125 : f32
    %m = arith.mulf %s, %c : f32
    %r = arith.addf %m, %x : f32
    fa4.yield %r : f32)"));
  // The bias moves the score, not its slope: the derivative does not read it.
  EXPECT_EQ(countInDerivative("memref.load"), 0u);
  EXPECT_EQ(countInDerivative("arith.addf"), 0u);
}

TEST_F(ScoreModGradTest, Softcap) {
  expectMatchesFiniteDifferences(R"(
    %c = arith.constant 5.0 : f32
    %q = arith.divf %s, %c : f32
    %t = math.tanh %q : f32
    %r = arith.mulf %c, %t : f32
    fa4.yield %r : f32)",
                                 {-7.5, -2.3, -0.55, 0.37, 2.71, 9.0});
}

TEST_F(ScoreModGradTest, Square) {
  expectMatchesFiniteDifferences(R"(
    %r = arith.mulf %s, %s : f32
    fa4.yield %r : f32)");
}

TEST_F(ScoreModGradTest, ExpAndLogChains) {
  expectMatchesFiniteDifferences(R"(
    %one = arith.constant 1.0 : f32
    %half = arith.constant 0.5 : f32
    %e = math.exp %s : f32
    %e1 = arith.addf %e, %one : f32
    %softplus = math.log %e1 : f32
    %hs = arith.mulf %s, %half : f32
    %e2 = math.exp2 %hs : f32
    %sq = arith.mulf %s, %s : f32
    %sq1 = arith.addf %sq, %one : f32
    %l2 = math.log2 %sq1 : f32
    %l1p = math.log1p %sq : f32
    %em1 = math.expm1 %hs : f32
    %a = arith.addf %softplus, %e2 : f32
    %b2 = arith.subf %a, %l2 : f32
    %c = arith.addf %b2, %l1p : f32
    %r = arith.addf %c, %em1 : f32
    fa4.yield %r : f32)");
}

TEST_F(ScoreModGradTest, MaximaAndMinima) {
  expectMatchesFiniteDifferences(R"(
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %minus_one = arith.constant -1.0 : f32
    %two = arith.constant 2.0 : f32
    %clamped = arith.maximumf %s, %half : f32
    %s2 = arith.mulf %s, %two : f32
    %capped = arith.minnumf %s2, %one : f32
    %floor = arith.maxnumf %minus_one, %s : f32
    %sq = arith.mulf %s, %s : f32
    %lower = arith.minimumf %s, %sq : f32
    %a = arith.addf %clamped, %capped : f32
    %b2 = arith.mulf %floor, %lower : f32
    %r = arith.addf %a, %b2 : f32
    fa4.yield %r : f32)");
}

TEST_F(ScoreModGradTest, SelectOnComparison) {
  // A leaky ReLU: the comparison itself carries no tangent.
  expectMatchesFiniteDifferences(R"(
    %zero = arith.constant 0.0 : f32
    %leak = arith.constant 0.1 : f32
    %positive = arith.cmpf ogt, %s, %zero : f32
    %l = arith.mulf %s, %leak : f32
    %r = arith.select %positive, %s, %l : f32
    fa4.yield %r : f32)");
}

TEST_F(ScoreModGradTest, PowersOfEitherOperand) {
  // s³ has a varying base only: at negative s its derivative must not take
  // the logarithm of the base.
  ASSERT_NO_FATAL_FAILURE(expectMatchesFiniteDifferences(R"(
    %one = arith.constant 1.0 : f32
    %two = arith.constant 2.0 : f32
    %three = arith.constant 3.0 : f32
    %y = arith.constant 1.5 : f32
    %sq = arith.mulf %s, %s : f32
    %base = arith.addf %sq, %one : f32
    %p1 = math.powf %base, %y : f32
    %p2 = math.powf %two, %s : f32
    %p3 = math.powf %base, %s : f32
    %p4 = math.powf %s, %three : f32
    %a = arith.addf %p1, %p2 : f32
    %b2 = arith.addf %p3, %p4 : f32
    %r = arith.addf %a, %b2 : f32
    fa4.yield %r : f32)"));
  EXPECT_EQ(countInDerivative("math.log"), 2u);
}

TEST_F(ScoreModGradTest, Division) {
  expectMatchesFiniteDifferences(R"(
    %x = memref.load %bias[%i, %j] : memref<64x64xf32>
    %one = arith.constant 1.0 : f32
    %sq = arith.mulf %s, %s : f32
    %den = arith.addf %sq, %one : f32
    %q1 = arith.divf %x, %den : f32
    %q2 = arith.divf %s, %den : f32
    %r = arith.addf %q1, %q2 : f32
    fa4.yield %r : f32)");
}

TEST_F(ScoreModGradTest, PositionDependentSlope) {
  // ALiBi, and a score weight that grows with the distance: d = 1 + 0.01 ·
  // (j - i), different at every position.
  ASSERT_NO_FATAL_FAILURE(expectMatchesFiniteDifferences(R"(
    %slope = memref.load %slopes[%h] : memref<2xf32>
    %d = arith.subi %j, %i : index
    %di = arith.index_cast %d : index to i64
    %df = arith.sitofp %di : i64 to f32
    %alibi = arith.mulf %slope, %df : f32
    %k = arith.constant 0.01 : f32
    %one = arith.constant 1.0 : f32
    %w = arith.mulf %df, %k : f32
    %weight = arith.addf %w, %one : f32
    %m = arith.mulf %s, %weight : f32
    %r = arith.addf %m, %alibi : f32
    fa4.yield %r : f32)"));
  EXPECT_EQ(countInDerivative("memref.load"), 0u);
  EXPECT_EQ(countInDerivative("arith.subi"), 1u);
}

TEST_F(ScoreModGradTest, RootsErfAndTrigonometry) {
  expectMatchesFiniteDifferences(R"(
    %one = arith.constant 1.0 : f32
    %x = memref.load %bias[%i, %j] : memref<64x64xf32>
    %sq = arith.mulf %s, %s : f32
    %sq1 = arith.addf %sq, %one : f32
    %root = math.sqrt %sq1 : f32
    %inverse = math.rsqrt %sq1 : f32
    %e = math.erf %s : f32
    %sin = math.sin %s : f32
    %cos = math.cos %s : f32
    %sincos = arith.mulf %sin, %cos : f32
    %fma = math.fma %s, %s, %x : f32
    %neg = arith.negf %fma : f32
    %a = arith.addf %root, %inverse : f32
    %b2 = arith.addf %e, %sincos : f32
    %c = arith.addf %a, %b2 : f32
    %r = arith.subf %c, %neg : f32
    fa4.yield %r : f32)");
}

TEST_F(ScoreModGradTest, PiecewiseOps) {
  expectMatchesFiniteDifferences(R"(
    %one = arith.constant 1.0 : f32
    %two = arith.constant 2.0 : f32
    %three = arith.constant 3.0 : f32
    %period = arith.constant 0.7 : f32
    %dividend = arith.constant 2.5 : f32
    %abs = math.absf %s : f32
    %shifted = arith.subf %s, %one : f32
    %signed = math.copysign %s, %shifted : f32
    %s3 = arith.mulf %s, %three : f32
    %wrapped = arith.remf %s3, %period : f32
    %sq = arith.mulf %s, %s : f32
    %sq1 = arith.addf %sq, %one : f32
    %rem = arith.remf %dividend, %sq1 : f32
    %s2 = arith.mulf %s, %two : f32
    %fl = math.floor %s2 : f32
    %ce = math.ceil %s2 : f32
    %ro = math.round %s : f32
    %a = arith.addf %abs, %signed : f32
    %b2 = arith.addf %wrapped, %rem : f32
    %c = arith.addf %a, %b2 : f32
    %d = arith.addf %fl, %ce : f32
    %e = arith.mulf %d, %ro : f32
    %r = arith.addf %c, %e : f32
    fa4.yield %r : f32)");
}

TEST_F(ScoreModGradTest, HalfPrecisionThroughCasts) {
  ASSERT_NO_FATAL_FAILURE(expectMatchesFiniteDifferences(R"(
    %two = arith.constant 2.0 : f16
    %h16 = arith.truncf %s : f32 to f16
    %e = math.exp %h16 : f16
    %m = arith.mulf %e, %two : f16
    %r = arith.extf %m : f16 to f32
    fa4.yield %r : f32)"));
  // The primal's truncf feeds the exp, its extf only the score: the tangent
  // has one of each.
  EXPECT_EQ(countInDerivative("arith.truncf"), 2u);
  EXPECT_EQ(countInDerivative("arith.extf"), 1u);
}

TEST_F(ScoreModGradTest, ComparisonsAndIntegersStopTheScore) {
  // s + trunc(2s) + (s < 0 ? 1 : 3): the integer and the choice are
  // piecewise constant, so the derivative is 1.
  ASSERT_NO_FATAL_FAILURE(expectMatchesFiniteDifferences(R"(
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %two = arith.constant 2.0 : f32
    %three = arith.constant 3.0 : f32
    %s2 = arith.mulf %s, %two : f32
    %n = arith.fptosi %s2 : f32 to i32
    %whole = arith.sitofp %n : i32 to f32
    %negative = arith.cmpf olt, %s, %zero : f32
    %choice = arith.select %negative, %one, %three : f32
    %a = arith.addf %s, %whole : f32
    %r = arith.addf %a, %choice : f32
    fa4.yield %r : f32)"));
  EXPECT_EQ(countInDerivative("arith.fptosi"), 0u);
}

TEST_F(ScoreModGradTest, RefusesAnOpWithoutARule) {
  ASSERT_TRUE(parse(R"(
    %half = arith.constant 0.5 : f32
    %x = arith.mulf %s, %half : f32
    %t = math.tan %x : f32
    fa4.yield %t : f32)"));
  Operation *refused = firstNonDifferentiable(scoreMod("mod"));
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->getName().getStringRef(), "math.tan");
  EXPECT_FALSE(differentiate());
  EXPECT_NE(diagnostics.find("fa4.attention_backward cannot differentiate "
                             "'math.tan' in the score_mod"),
            std::string::npos)
      << diagnostics;
  EXPECT_TRUE(scoreMod("derivative").empty());
}

TEST_F(ScoreModGradTest, AcceptsAnyOpTheScoreDoesNotReach) {
  // math.atan has no rule, but only the head's slope flows into it.
  ASSERT_TRUE(parse(R"(
    %slope = memref.load %slopes[%h] : memref<2xf32>
    %t = math.atan %slope : f32
    %r = arith.addf %s, %t : f32
    fa4.yield %r : f32)"));
  EXPECT_EQ(firstNonDifferentiable(scoreMod("mod")), nullptr);
  ASSERT_TRUE(differentiate()) << diagnostics;
  auto yield = cast<YieldOp>(scoreMod("derivative").front().getTerminator());
  auto one = yield.getValue().getDefiningOp<arith::ConstantOp>();
  ASSERT_TRUE(one);
  EXPECT_EQ(cast<FloatAttr>(one.getValue()).getValueAsDouble(), 1.0);
  EXPECT_EQ(countInDerivative("math.atan"), 0u);
}

} // namespace
