//===- BackwardReferenceTest.cpp - attention's reference gradients --------===//
//
// The float64 gradients are checked against what they claim to be, the
// slope of the float64 forward: a central difference of L = Σ dO ∘ O moved
// one input entry at a time. The low-precision gradients and the judge are
// then checked against the float64 ones.
//
//===----------------------------------------------------------------------===//

#include "fa4/Sim/Reference.h"
#include "fa4/Support/AttentionMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace mlir::fa4::sim;

namespace {

/// Small sizes: every entry of Q, K and V is moved, two forwards each.
Problem smallProblem(int64_t seqQ, int64_t seqK, int64_t qHeads,
                     int64_t kvHeads) {
  Problem p;
  p.batch = 2;
  p.seqQ = seqQ;
  p.seqK = seqK;
  p.qHeads = qHeads;
  p.kvHeads = kvHeads;
  p.headDim = 8;
  p.scale = 1.0 / std::sqrt(8.0);
  return p;
}

std::vector<float> normalValues(size_t count, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float &x : values)
    x = normal(generator);
  return values;
}

/// L = Σ dO ∘ O, whose gradients are the backward pass's for upstream dO.
double loss(const Problem &p, const std::vector<float> &q,
            const std::vector<float> &k, const std::vector<float> &v,
            const std::vector<float> &dout) {
  std::vector<double> out, lse;
  referenceAttention(p, q, k, v, out, lse);
  double sum = 0.0;
  for (size_t x = 0; x < out.size(); ++x)
    sum += dout[x] * out[x];
  return sum;
}

/// Moves each finite entry of `inputs[which]` by ±1e-3 (the float nearest
/// to; the difference divides by the step actually taken) and checks the
/// gradient against the central difference of the loss. A non-finite entry
/// (a K/V row past seqused_k) must get gradient 0.
void expectGradientMatches(const Problem &p, std::vector<float> inputs[4],
                           int which, const std::vector<double> &gradient,
                           const char *name) {
  constexpr double kStep = 1e-3, kAtol = 1e-7, kRtol = 1e-5;
  std::vector<float> &tensor = inputs[which];
  ASSERT_EQ(gradient.size(), tensor.size()) << name;
  double largest = 0.0;
  size_t worst = 0;
  for (size_t x = 0; x < tensor.size(); ++x) {
    const float original = tensor[x];
    if (!std::isfinite(original)) {
      EXPECT_EQ(gradient[x], 0.0) << name << "[" << x << "]";
      continue;
    }
    const float plus = static_cast<float>(original + kStep);
    const float minus = static_cast<float>(original - kStep);
    tensor[x] = plus;
    double lossPlus = loss(p, inputs[0], inputs[1], inputs[2], inputs[3]);
    tensor[x] = minus;
    double lossMinus = loss(p, inputs[0], inputs[1], inputs[2], inputs[3]);
    tensor[x] = original;
    double slope = (lossPlus - lossMinus) / (double(plus) - double(minus));
    double excess = std::fabs(gradient[x] - slope) - kRtol * std::fabs(slope);
    if (excess > largest) {
      largest = excess;
      worst = x;
    }
  }
  EXPECT_LE(largest, kAtol)
      << name << "[" << worst << "] = " << gradient[worst];
}

/// dQ, dK and dV of the float64 reference against the finite difference.
void expectMatchesFiniteDifference(const Problem &p, uint64_t seed) {
  std::vector<float> inputs[4];
  fillInputs(p, /*bf16=*/false, seed, InputDistribution::Normal, inputs[0],
             inputs[1], inputs[2]);
  inputs[3] = normalValues(inputs[0].size(), seed + 1);
  std::vector<double> dq, dk, dv;
  referenceAttentionBackward(p, inputs[0], inputs[1], inputs[2], inputs[3], dq,
                             dk, dv);
  expectGradientMatches(p, inputs, 0, dq, "dq");
  expectGradientMatches(p, inputs, 1, dk, "dk");
  expectGradientMatches(p, inputs, 2, dv, "dv");
}

TEST(BackwardReference, PlainMatchesFiniteDifference) {
  expectMatchesFiniteDifference(smallProblem(5, 7, 2, 2), 1);
}

TEST(BackwardReference, CausalMatchesFiniteDifference) {
  expectMatchesFiniteDifference(
      [] {
        Problem p = smallProblem(6, 10, 2, 2);
        p.causal = true;
        return p;
      }(),
      2);
}

TEST(BackwardReference, WindowMatchesFiniteDifference) {
  expectMatchesFiniteDifference(
      [] {
        Problem p = smallProblem(7, 9, 2, 1);
        p.window = true;
        p.windowLeft = 2;
        p.windowRight = 1;
        return p;
      }(),
      3);
}

TEST(BackwardReference, GroupedQueryMatchesFiniteDifference) {
  expectMatchesFiniteDifference(
      [] {
        Problem p = smallProblem(6, 6, 4, 1);
        p.causal = true;
        return p;
      }(),
      4);
}

TEST(BackwardReference, SoftcapMatchesFiniteDifference) {
  expectMatchesFiniteDifference(
      [] {
        // Scores of a few units against a cap of 1.5: tanh well off its linear
        // part, so a wrong slope shows.
        Problem p = smallProblem(5, 7, 2, 2);
        p.scale = 1.0;
        p.softcap = 1.5;
        return p;
      }(),
      5);
}

TEST(BackwardReference, ScoreModMatchesFiniteDifference) {
  expectMatchesFiniteDifference(
      [] {
        Problem p = smallProblem(5, 7, 2, 1);
        p.scoreMod = [](double s, int64_t b, int64_t h, int64_t i, int64_t j) {
          return s * (1.0 + 0.25 * h) +
                 0.5 * std::tanh(s) * std::cos(0.7 * (i - j)) + 0.1 * b;
        };
        return p;
      }(),
      6);
}

TEST(BackwardReference, RowsThatSeeNoKeyGetNoGradient) {
  // Causal with seqQ > seqK: queries 0..3 see no key. With seqused_k and a
  // mask_mod, batch 0's keys 3.. are NaN, which must reach no gradient.
  Problem p = smallProblem(8, 4, 2, 2);
  p.causal = true;
  p.seqUsedK = {3, 4};
  p.maskMod = [](int64_t, int64_t h, int64_t i, int64_t j) {
    return (i + j + h) % 3 != 0;
  };
  expectMatchesFiniteDifference(p, 7);

  std::vector<float> q, k, v;
  fillInputs(p, /*bf16=*/false, 7, InputDistribution::Normal, q, k, v);
  std::vector<double> dq, dk, dv;
  referenceAttentionBackward(p, q, k, v, normalValues(q.size(), 8), dq, dk, dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t x = 0; x < p.qHeads * p.headDim; ++x)
        EXPECT_EQ(dq[(b * p.seqQ + i) * p.qHeads * p.headDim + x], 0.0);
  for (double x : dk)
    EXPECT_TRUE(std::isfinite(x));
}

TEST(BackwardReference, NaNRowReachesOnlyTheKeysItSees) {
  // Query 1 of head 0 has a NaN: its dQ row is NaN, and so are dK and dV of
  // keys 0 and 1 (the ones it sees, causal); keys 2.. stay finite.
  Problem p = smallProblem(6, 6, 1, 1);
  p.batch = 1;
  p.causal = true;
  std::vector<float> q, k, v;
  fillInputs(p, /*bf16=*/false, 9, InputDistribution::Normal, q, k, v);
  q[1 * p.headDim] = std::numeric_limits<float>::quiet_NaN();
  std::vector<double> dq, dk, dv;
  referenceAttentionBackward(p, q, k, v, normalValues(q.size(), 10), dq, dk,
                             dv);
  for (int64_t j = 0; j < p.seqK; ++j) {
    EXPECT_EQ(std::isnan(dq[j * p.headDim]), j == 1) << "query " << j;
    EXPECT_EQ(std::isnan(dk[j * p.headDim]), j <= 1) << "key " << j;
    EXPECT_EQ(std::isnan(dv[j * p.headDim]), j <= 1) << "key " << j;
  }
}

/// A causal GQA problem of moderate size, its inputs, dO, and both backward
/// references from the low-precision forward's O and LSE.
struct LowPrecisionCase {
  Problem problem;
  std::vector<float> q, k, v, dout;
  BackwardReference reference;
  std::vector<float> lowpDq, lowpDk, lowpDv;

  explicit LowPrecisionCase(bool bf16, double softcap = 0.0) {
    problem.batch = 2;
    problem.seqQ = 64;
    problem.seqK = 80;
    problem.qHeads = 4;
    problem.kvHeads = 2;
    problem.headDim = 32;
    problem.scale = 1.0 / std::sqrt(32.0);
    problem.causal = true;
    problem.softcap = softcap;
    fillInputs(problem, bf16, 11, InputDistribution::Normal, q, k, v);
    dout = normalValues(q.size(), 12);
    for (float &x : dout) // dO comes in the input type, as Q does
      x = bf16 ? mlir::fa4::roundToBFloat16(x) : mlir::fa4::roundToHalf(x);
    std::vector<float> out, lse;
    lowPrecisionAttention(problem, bf16, q, k, v, out, lse);
    computeBackwardReference(problem, bf16, q, k, v, out, dout, lse, reference);
    lowPrecisionAttentionBackward(problem, bf16, q, k, v, out, dout, lse,
                                  lowpDq, lowpDk, lowpDv);
  }
};

/// Near, relative to the largest gradient: two ulps of it in the input type
/// (the plain low-precision pass makes about half that).
const double kBf16Tolerance = std::ldexp(1.0, -6);
const double kFp16Tolerance = std::ldexp(1.0, -9);

double maxMagnitude(const std::vector<double> &values) {
  double largest = 0.0;
  for (double x : values)
    largest = std::max(largest, std::fabs(x));
  return largest;
}

TEST(BackwardReference, LowPrecisionIsNearFloat64) {
  LowPrecisionCase bf16(true), fp16(false);
  const BackwardReference &b = bf16.reference, &h = fp16.reference;
  EXPECT_LE(b.lowpDqErr, kBf16Tolerance * maxMagnitude(b.dq));
  EXPECT_LE(b.lowpDkErr, kBf16Tolerance * maxMagnitude(b.dk));
  EXPECT_LE(b.lowpDvErr, kBf16Tolerance * maxMagnitude(b.dv));
  EXPECT_LE(h.lowpDqErr, kFp16Tolerance * maxMagnitude(h.dq));
  EXPECT_LE(h.lowpDkErr, kFp16Tolerance * maxMagnitude(h.dk));
  EXPECT_LE(h.lowpDvErr, kFp16Tolerance * maxMagnitude(h.dv));
  // And not the float64 ones: fp16's three more mantissa bits show.
  EXPECT_GT(h.lowpDqErr, 0.0);
  EXPECT_LT(h.lowpDqErr, b.lowpDqErr);
  EXPECT_LT(h.lowpDkErr, b.lowpDkErr);
  EXPECT_LT(h.lowpDvErr, b.lowpDvErr);
}

TEST(BackwardReference, LowPrecisionSoftcapIsNearFloat64) {
  // A cap of 0.5 against scores of about ±1: tanh's slope well below 1.
  for (bool bf16 : {true, false}) {
    LowPrecisionCase c(bf16, 0.5);
    const BackwardReference &r = c.reference;
    const double tolerance = bf16 ? kBf16Tolerance : kFp16Tolerance;
    EXPECT_LE(r.lowpDqErr, tolerance * maxMagnitude(r.dq)) << bf16;
    EXPECT_LE(r.lowpDkErr, tolerance * maxMagnitude(r.dk)) << bf16;
    EXPECT_LE(r.lowpDvErr, tolerance * maxMagnitude(r.dv)) << bf16;
  }
}

std::vector<float> rounded(const std::vector<double> &values) {
  return std::vector<float>(values.begin(), values.end());
}

TEST(BackwardReference, CompareGradientsPassesTheReferences) {
  LowPrecisionCase c(true);
  GradientErrors errors;
  EXPECT_TRUE(
      compareGradients(c.reference, c.lowpDq, c.lowpDk, c.lowpDv, 0.0, errors));
  EXPECT_EQ(errors.dk, c.reference.lowpDkErr);
  EXPECT_EQ(errors.refLowpDk, c.reference.lowpDkErr);
  EXPECT_TRUE(compareGradients(c.reference, rounded(c.reference.dq),
                               rounded(c.reference.dk), rounded(c.reference.dv),
                               0.0, errors));
}

TEST(BackwardReference, CompareGradientsFailsOnNaN) {
  LowPrecisionCase c(true);
  GradientErrors errors;
  std::vector<float> dq = rounded(c.reference.dq);
  dq[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(compareGradients(c.reference, dq, rounded(c.reference.dk),
                                rounded(c.reference.dv), 1e-2, errors));
  EXPECT_TRUE(std::isinf(errors.dq));
}

TEST(BackwardReference, CompareGradientsFailsOnAnInfinity) {
  LowPrecisionCase c(true);
  GradientErrors errors;
  std::vector<float> dv = rounded(c.reference.dv);
  dv[3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(compareGradients(c.reference, rounded(c.reference.dq),
                                rounded(c.reference.dk), dv, 1e-2, errors));
}

TEST(BackwardReference, CompareGradientsFailsOnTenTimesTheLowPrecisionError) {
  LowPrecisionCase c(true);
  GradientErrors errors;
  std::vector<float> dk = rounded(c.reference.dk);
  dk[40] = static_cast<float>(c.reference.dk[40] + 10 * c.reference.lowpDkErr);
  EXPECT_FALSE(compareGradients(c.reference, rounded(c.reference.dq), dk,
                                rounded(c.reference.dv), 0.0, errors));
  EXPECT_NEAR(errors.dk, 10 * c.reference.lowpDkErr,
              1e-2 * c.reference.lowpDkErr);
  // Folded with max: a later clean run leaves the largest error standing.
  EXPECT_TRUE(
      compareGradients(c.reference, c.lowpDq, c.lowpDk, c.lowpDv, 0.0, errors));
  EXPECT_NEAR(errors.dk, 10 * c.reference.lowpDkErr,
              1e-2 * c.reference.lowpDkErr);
}

} // namespace
