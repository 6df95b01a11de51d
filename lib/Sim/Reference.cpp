//===- Reference.cpp - the float64 attention reference --------------------===//

#include "fa4/Sim/Reference.h"

#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/Float8.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <random>

namespace mlir::fa4::sim {

/// Whether query i may see key j, straight from the definition: causal and
/// windows are aligned to the bottom-right corner of the score matrix.
static bool isVisible(const Problem &p, int64_t b, int64_t h, int64_t i,
                      int64_t j) {
  int64_t keys = p.keysOf(b);
  if (j >= keys || (p.maskMod && !p.maskMod(b, h, i, j)))
    return false;
  int64_t diagonal = i + keys - p.seqQ;
  if (p.causal && j > diagonal)
    return false;
  if (p.window) {
    if (p.windowLeft >= 0 && j < diagonal - p.windowLeft)
      return false;
    if (p.windowRight >= 0 && j > diagonal + p.windowRight)
      return false;
  }
  return true;
}

/// The larger of two scores, NaN when either is: a NaN score makes its row
/// NaN, as in SDPA (std::max would drop it, and a row of NaN scores would
/// pass for a row that sees no key).
template <typename T> static T nanMax(T a, T b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN()
                                        : std::max(a, b);
}

/// q·k in float64.
static double float64Dot(const float *a, const float *b, int64_t d) {
  double dot = 0.0;
  for (int64_t x = 0; x < d; ++x)
    dot += static_cast<double>(a[x]) * b[x];
  return dot;
}

/// q·k in float32 with eight partial sums, as a blocked float32 dot product
/// keeps them (and the compiler can run them side by side).
static float float32Dot(const float *a, const float *b, int64_t d) {
  float partial[8] = {};
  int64_t x = 0;
  for (; x + 8 <= d; x += 8)
    for (int64_t lane = 0; lane < 8; ++lane)
      partial[lane] += a[x + lane] * b[x + lane];
  for (; x < d; ++x)
    partial[0] += a[x] * b[x];
  float dot = 0.0f;
  for (float sum : partial)
    dot += sum;
  return dot;
}

/// The score the softmax sees of raw score `dot`: scaled, softcapped, then
/// the score_mod.
static double referenceScore(const Problem &p, double dot, int64_t b,
                             int64_t h, int64_t i, int64_t j) {
  double s = dot * p.scale;
  if (p.softcap > 0.0)
    s = p.softcap * std::tanh(s / p.softcap);
  if (p.scoreMod)
    s = p.scoreMod(s, b, h, i, j);
  return s;
}

/// referenceScore in float32, the score_mod's result rounded to it.
static float lowpScore(const Problem &p, float dot, int64_t b, int64_t h,
                       int64_t i, int64_t j) {
  const float softcap = static_cast<float>(p.softcap);
  float s = dot * static_cast<float>(p.scale);
  if (softcap > 0.0f)
    s = softcap * std::tanh(s / softcap);
  if (p.scoreMod)
    s = static_cast<float>(p.scoreMod(s, b, h, i, j));
  return s;
}

/// Varlen: each sequence is a batch-1 problem of its own, its rows cut
/// out of the packed tensors and its O and LSE put back. Rows of no
/// sequence are NaN: the kernel must leave them as they were, and the
/// simulators poison its outputs with NaN. `run` is the dense attention.
template <typename T, typename Run>
static void perSequence(const Problem &p, const std::vector<float> &q,
                        const std::vector<float> &k, const std::vector<float> &v,
                        std::vector<T> &out, std::vector<T> &lse, Run run) {
  const int64_t d = p.headDim, dv = p.vDim();
  out.assign(p.seqQ * p.qHeads * dv, std::numeric_limits<T>::quiet_NaN());
  lse.assign(p.qHeads * p.seqQ, std::numeric_limits<T>::quiet_NaN());
  for (int64_t b = 0; b < p.sequences(); ++b) {
    SequenceSpan queries = sequenceSpan(double(p.cuSeqlensQ[b]),
                                        double(p.cuSeqlensQ[b + 1]), p.seqQ);
    SequenceSpan keys = sequenceSpan(double(p.cuSeqlensK[b]),
                                     double(p.cuSeqlensK[b + 1]), p.seqK);
    if (queries.length == 0)
      continue;
    Problem one = p;
    one.cuSeqlensQ.clear();
    one.cuSeqlensK.clear();
    one.batch = 1;
    one.seqQ = queries.length;
    one.seqK = keys.length;
    one.seqUsedK.clear();
    if (!p.seqUsedK.empty())
      one.seqUsedK = {std::clamp<int64_t>(p.seqUsedK[b], 0, keys.length)};
    for (auto [table, oneTable] :
         {std::pair{&p.qDescale, &one.qDescale},
          std::pair{&p.kDescale, &one.kDescale},
          std::pair{&p.vDescale, &one.vDescale}})
      if (!table->empty())
        oneTable->assign(table->begin() + b * p.kvHeads,
                         table->begin() + (b + 1) * p.kvHeads);
    if (p.scoreMod)
      one.scoreMod = [&p, b](double s, int64_t, int64_t h, int64_t i,
                             int64_t j) { return p.scoreMod(s, b, h, i, j); };
    if (p.maskMod)
      one.maskMod = [&p, b](int64_t, int64_t h, int64_t i, int64_t j) {
        return p.maskMod(b, h, i, j);
      };
    auto rows = [&](const std::vector<float> &packed, SequenceSpan span,
                    int64_t heads, int64_t width) {
      return std::vector<float>(packed.begin() + span.offset * heads * width,
                                packed.begin() + (span.offset + span.length) *
                                                     heads * width);
    };
    std::vector<T> oneOut, oneLse;
    run(one, rows(q, queries, p.qHeads, d), rows(k, keys, p.kvHeads, d),
        rows(v, keys, p.kvHeads, dv), oneOut, oneLse);
    std::copy(oneOut.begin(), oneOut.end(),
              out.begin() + queries.offset * p.qHeads * dv);
    for (int64_t h = 0; h < p.qHeads; ++h)
      std::copy_n(oneLse.begin() + h * one.seqQ, one.seqQ,
                  lse.begin() + h * p.seqQ + queries.offset);
  }
}

void referenceAttention(const Problem &p, const std::vector<float> &q,
                        const std::vector<float> &k,
                        const std::vector<float> &v, std::vector<double> &out,
                        std::vector<double> &lse) {
  if (p.isVarlen())
    return perSequence(p, q, k, v, out, lse,
                       [](const Problem &one, const std::vector<float> &q,
                          const std::vector<float> &k,
                          const std::vector<float> &v, std::vector<double> &out,
                          std::vector<double> &lse) {
                         referenceAttention(one, q, k, v, out, lse);
                       });
  const int64_t d = p.headDim, dv = p.vDim();
  const int64_t groupSize = p.qHeads / p.kvHeads;
  out.assign(p.batch * p.seqQ * p.qHeads * dv, 0.0);
  lse.assign(p.batch * p.qHeads * p.seqQ,
             -std::numeric_limits<double>::infinity());
  std::vector<double> scores(p.seqK), acc(dv);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.qHeads; ++h) {
      const int64_t kvHead = h / groupSize;
      for (int64_t i = 0; i < p.seqQ; ++i) {
        const float *qRow = &q[((b * p.seqQ + i) * p.qHeads + h) * d];
        double maxScore = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < p.seqK; ++j) {
          if (!isVisible(p, b, h, i, j)) {
            scores[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const float *kRow = &k[((b * p.seqK + j) * p.kvHeads + kvHead) * d];
          double s = referenceScore(
              p, float64Dot(qRow, kRow, d) * p.scoreDescale(b, kvHead), b, h,
              i, j);
          scores[j] = s;
          maxScore = nanMax(maxScore, s);
        }
        if (maxScore == -std::numeric_limits<double>::infinity())
          continue; // no visible key: O = 0, LSE = -inf
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < p.seqK; ++j) {
          if (scores[j] == -std::numeric_limits<double>::infinity())
            continue;
          double weight = std::exp(scores[j] - maxScore);
          sum += weight;
          const float *vRow = &v[((b * p.seqK + j) * p.kvHeads + kvHead) * dv];
          for (int64_t x = 0; x < dv; ++x)
            acc[x] += weight * vRow[x];
        }
        double *oRow = &out[((b * p.seqQ + i) * p.qHeads + h) * dv];
        double vDescale = p.valueDescale(b, kvHead);
        for (int64_t x = 0; x < dv; ++x)
          oRow[x] = acc[x] * vDescale / sum;
        lse[(b * p.qHeads + h) * p.seqQ + i] = maxScore + std::log(sum);
      }
    }
  }
}

void lowPrecisionAttention(const Problem &p, bool bf16,
                           const std::vector<float> &q,
                           const std::vector<float> &k,
                           const std::vector<float> &v, std::vector<float> &out,
                           std::vector<float> &lse) {
  if (p.isVarlen())
    return perSequence(p, q, k, v, out, lse,
                       [bf16](const Problem &one, const std::vector<float> &q,
                              const std::vector<float> &k,
                              const std::vector<float> &v,
                              std::vector<float> &out, std::vector<float> &lse) {
                         lowPrecisionAttention(one, bf16, q, k, v, out, lse);
                       });
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  auto round = [&](float value) {
    return bf16 ? roundToBFloat16(value) : roundToHalf(value);
  };
  const int64_t d = p.headDim, dv = p.vDim();
  const int64_t groupSize = p.qHeads / p.kvHeads;
  out.assign(p.batch * p.seqQ * p.qHeads * dv, 0.0f);
  lse.assign(p.batch * p.qHeads * p.seqQ, kMinusInf);
  std::vector<float> scores(p.seqK), acc(dv);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.qHeads; ++h) {
      const int64_t kvHead = h / groupSize;
      for (int64_t i = 0; i < p.seqQ; ++i) {
        const float *qRow = &q[((b * p.seqQ + i) * p.qHeads + h) * d];
        float maxScore = kMinusInf;
        for (int64_t j = 0; j < p.seqK; ++j) {
          scores[j] = kMinusInf;
          if (!isVisible(p, b, h, i, j))
            continue;
          const float *kRow = &k[((b * p.seqK + j) * p.kvHeads + kvHead) * d];
          float s = lowpScore(
              p,
              float32Dot(qRow, kRow, d) *
                  static_cast<float>(p.scoreDescale(b, kvHead)),
              b, h, i, j);
          scores[j] = s;
          maxScore = nanMax(maxScore, s);
        }
        if (maxScore == kMinusInf)
          continue; // no visible key: O = 0, LSE = -inf
        float sum = 0.0f;
        for (float &s : scores) {
          s = std::exp(s - maxScore);
          sum += s;
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        // FP8: FlashAttention-3's way, unshifted: the unnormalized P
        // (in [0, 1]) rounded to e4m3 for P·V, the division by the f32 sum
        // at the end. (Rounding the normalized P instead would lose most
        // of it to e4m3's subnormals and make a yardstick far too lenient.)
        for (int64_t j = 0; j < p.seqK; ++j) {
          float weight = p.fp8 ? roundToE4m3(scores[j])
                               : round(scores[j] / sum);
          if (weight == 0.0f)
            continue;
          const float *vRow = &v[((b * p.seqK + j) * p.kvHeads + kvHead) * dv];
          for (int64_t x = 0; x < dv; ++x)
            acc[x] += weight * vRow[x];
        }
        float *oRow = &out[((b * p.seqQ + i) * p.qHeads + h) * dv];
        auto vDescale = static_cast<float>(p.valueDescale(b, kvHead));
        float normalize = p.fp8 ? vDescale / sum : vDescale;
        for (int64_t x = 0; x < dv; ++x)
          oRow[x] = round(acc[x] * normalize);
        lse[(b * p.qHeads + h) * p.seqQ + i] = maxScore + std::log(sum);
      }
    }
  }
}

/// |got - want|, 0 where both are the same infinity (the LSE of a row that
/// sees no key) or both NaN (a row with a NaN score), NaN where one is NaN.
static double difference(double got, double want) {
  if (std::isnan(got) && std::isnan(want))
    return 0.0;
  return std::isinf(want) && got == want ? 0.0 : std::fabs(got - want);
}

/// The largest difference, an infinity where one is NaN.
static double maxDifference(const std::vector<float> &got,
                            const std::vector<double> &want) {
  double largest = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = difference(got[i], want[i]);
    largest = std::max(largest, std::isnan(err) ? INFINITY : err);
  }
  return largest;
}

/// The root-mean-square difference over the finite reference values.
static double rmsDifference(const std::vector<float> &got,
                            const std::vector<double> &want) {
  double sum = 0.0;
  int64_t count = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(want[i]))
      continue;
    double err = got[i] - want[i];
    sum += err * err;
    ++count;
  }
  return count ? std::sqrt(sum / static_cast<double>(count)) : 0.0;
}

void computeReference(const Problem &problem, bool bf16,
                      const std::vector<float> &q, const std::vector<float> &k,
                      const std::vector<float> &v, Reference &reference) {
  referenceAttention(problem, q, k, v, reference.out, reference.lse);
  std::vector<float> lowpOut, lowpLse;
  lowPrecisionAttention(problem, bf16, q, k, v, lowpOut, lowpLse);
  reference.lowpMaxAbsErr = maxDifference(lowpOut, reference.out);
  reference.lowpLseMaxAbsErr = maxDifference(lowpLse, reference.lse);
  reference.lowpRmsErr = rmsDifference(lowpOut, reference.out);
}

/// Judges one output against its float64 reference (see
/// compareWithReference); `maxAbsErr` gets the largest error, `maxRelErr`
/// (when given) the largest relative one where the reference exceeds atol.
static bool judge(const std::vector<float> &got, const std::vector<double> &want,
                  double lowpMaxAbsErr, double atol, double rtol,
                  double &maxAbsErr, double *maxRelErr) {
  bool everyElement = true;
  double largest = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = difference(got[i], want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i])))
      everyElement = false; // NaN fails here too
    err = std::isfinite(err) ? err : INFINITY;
    largest = std::max(largest, err);
    // Relative error means little on values near zero, which atol covers.
    if (maxRelErr && std::fabs(want[i]) > atol)
      *maxRelErr = std::max(*maxRelErr, err / std::fabs(want[i]));
  }
  maxAbsErr = std::max(maxAbsErr, largest);
  // FlashAttention's rule judges: the kernel's largest error at most twice
  // the plain low-precision reference's, plus atol. It needs a finite
  // yardstick: where the low-precision reference itself overflowed, the
  // per-element atol/rtol test judges instead.
  if (!std::isfinite(lowpMaxAbsErr))
    return everyElement;
  return largest <= 2.0 * lowpMaxAbsErr + atol;
}

bool compareWithReference(const Reference &reference,
                          const std::vector<float> &out,
                          const std::vector<float> *lse, double atol,
                          double rtol, Errors &errors) {
  errors.refLowpMaxAbsErr = reference.lowpMaxAbsErr;
  errors.refLowpRmsErr = reference.lowpRmsErr;
  double rms = rmsDifference(out, reference.out);
  errors.rmsErr = std::max(errors.rmsErr, std::isnan(rms) ? INFINITY : rms);
  bool ok = judge(out, reference.out, reference.lowpMaxAbsErr, atol, rtol,
                  errors.maxAbsErr, &errors.maxRelErr);
  if (!lse)
    return ok;
  errors.refLowpLseMaxAbsErr = reference.lowpLseMaxAbsErr;
  errors.lseMaxAbsErr = std::max(errors.lseMaxAbsErr, 0.0);
  return judge(*lse, reference.lse, reference.lowpLseMaxAbsErr, atol, rtol,
               errors.lseMaxAbsErr, nullptr) &&
         ok;
}

/// Where row i of query head h of batch b starts in Q, O, dO and dQ.
static int64_t queryOffset(const Problem &p, int64_t b, int64_t i, int64_t h) {
  return ((b * p.seqQ + i) * p.qHeads + h) * p.headDim;
}

/// Where key j of K/V head kvHead of batch b starts in K, V, dK and dV.
static int64_t keyOffset(const Problem &p, int64_t b, int64_t j,
                         int64_t kvHead) {
  return ((b * p.seqK + j) * p.kvHeads + kvHead) * p.headDim;
}

/// The slope of the score_mod at score x from its values alone, so that no
/// compiler's derivative of it is trusted. At steps h = 1e-3, 1e-6, 1e-9
/// (times max(1, |x|)) in turn, the one-sided slopes either side of x
/// (each Richardson-extrapolated, second order) are compared: where they
/// agree, no kink or jump of the mod (a max, an abs, a floor) and no bend
/// sharper than h lies within h of x, and the slope is the Richardson
/// extrapolation (4·D(h/2) - D(h)) / 3 of central differences D, whose
/// error is O(h⁴) from truncation plus about 3e-16 · |mod(x)| / h from
/// rounding (under 1e-12 for tanh-shaped mods at the first step). Where they
/// disagree at every step, x is within 1e-9 of a kink or jump (or on it):
/// the slope of the side to its right where that is finite, else the left
/// side's (a jump to -inf hides the keys past it), else 0. A mod that is
/// not finite at x has no slope there.
static double scoreModSlope(const Problem &p, double x, int64_t b, int64_t h,
                            int64_t i, int64_t j) {
  auto mod = [&](double y) { return p.scoreMod(y, b, h, i, j); };
  const double size = std::max(1.0, std::fabs(x));
  const double at = mod(x);
  if (!std::isfinite(at))
    return 0.0;
  double right = 0.0, left = 0.0;
  for (double step : {1e-3 * size, 1e-6 * size, 1e-9 * size}) {
    auto oneSided = [&](double sign, double delta) {
      return (mod(x + sign * delta) - at) / (sign * delta);
    };
    right = 2.0 * oneSided(1.0, step / 2.0) - oneSided(1.0, step);
    left = 2.0 * oneSided(-1.0, step / 2.0) - oneSided(-1.0, step);
    double rounding = 16.0 * 2.3e-16 * (std::fabs(at) + 1.0) / step;
    double tolerance =
        1e-5 * std::max({1.0, std::fabs(right), std::fabs(left)}) + rounding;
    if (std::isfinite(right) && std::isfinite(left) &&
        std::fabs(right - left) <= tolerance) {
      auto central = [&](double delta) {
        return (mod(x + delta) - mod(x - delta)) / (2.0 * delta);
      };
      return (4.0 * central(step / 2.0) - central(step)) / 3.0;
    }
  }
  return std::isfinite(right) ? right : std::isfinite(left) ? left : 0.0;
}

/// dx/ds: how the score the softmax sees moves with raw score `dot`.
static double referenceSlope(const Problem &p, double dot, int64_t b,
                             int64_t h, int64_t i, int64_t j) {
  double slope = p.scale;
  double s = dot * p.scale;
  if (p.softcap > 0.0) {
    double t = std::tanh(s / p.softcap);
    slope *= 1.0 - t * t;
    s = p.softcap * t;
  }
  if (p.scoreMod)
    slope *= scoreModSlope(p, s, b, h, i, j);
  return slope;
}

/// referenceSlope in float32; the score_mod's slope is taken in float64 at
/// the float32 score.
static float lowpSlope(const Problem &p, float dot, int64_t b, int64_t h,
                       int64_t i, int64_t j) {
  const float softcap = static_cast<float>(p.softcap);
  float slope = static_cast<float>(p.scale);
  float s = dot * slope;
  if (softcap > 0.0f) {
    float t = std::tanh(s / softcap);
    slope *= 1.0f - t * t;
    s = softcap * t;
  }
  if (p.scoreMod)
    slope *= static_cast<float>(scoreModSlope(p, s, b, h, i, j));
  return slope;
}

namespace {
/// What a backward pass reads: the forward's inputs and dO, and for the
/// low-precision pass the forward's rounded O and float32 LSE.
struct BackwardInputs {
  const std::vector<float> &q, &k, &v, &dout;
  const std::vector<float> *out, *lse;
};

/// What a backward pass accumulates into, in Q's and K's layouts.
template <typename T> struct Gradients {
  std::vector<T> &dq, &dk, &dv;
};
} // namespace

/// Query row i of (b, h)'s share of the float64 gradients: its dQ row whole,
/// and its terms of dK and dV.
static void referenceBackwardRow(const Problem &p, const BackwardInputs &in,
                                 int64_t b, int64_t h, int64_t i,
                                 Gradients<double> grad) {
  const int64_t d = p.headDim;
  const int64_t kvHead = h / (p.qHeads / p.kvHeads);
  const float *qRow = &in.q[queryOffset(p, b, i, h)];
  const float *doRow = &in.dout[queryOffset(p, b, i, h)];
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  std::vector<double> dots(p.seqK), probs(p.seqK, kMinusInf);
  double maxScore = kMinusInf;
  for (int64_t j = 0; j < p.seqK; ++j) {
    if (!isVisible(p, b, h, i, j))
      continue;
    dots[j] = float64Dot(qRow, &in.k[keyOffset(p, b, j, kvHead)], d);
    probs[j] = referenceScore(p, dots[j], b, h, i, j);
    maxScore = nanMax(maxScore, probs[j]);
  }
  if (maxScore == kMinusInf)
    return; // no visible key: P = 0, no gradient
  double sum = 0.0;
  for (double &prob : probs) {
    // Even in a NaN row a key it cannot see gets no gradient.
    prob = prob == kMinusInf ? 0.0 : std::exp(prob - maxScore);
    sum += prob;
  }
  // dP = dO·V, and delta = rowsum(P ∘ dP) from the definition, not dO·O.
  std::vector<double> dProbs(p.seqK, 0.0);
  double delta = 0.0;
  for (int64_t j = 0; j < p.seqK; ++j) {
    if (probs[j] == 0.0)
      continue;
    probs[j] /= sum;
    dProbs[j] = float64Dot(doRow, &in.v[keyOffset(p, b, j, kvHead)], d);
    delta += probs[j] * dProbs[j];
  }
  double *dqRow = &grad.dq[queryOffset(p, b, i, h)];
  for (int64_t j = 0; j < p.seqK; ++j) {
    if (probs[j] == 0.0)
      continue;
    double dScore = probs[j] * (dProbs[j] - delta) *
                    referenceSlope(p, dots[j], b, h, i, j);
    const float *kRow = &in.k[keyOffset(p, b, j, kvHead)];
    double *dkRow = &grad.dk[keyOffset(p, b, j, kvHead)];
    double *dvRow = &grad.dv[keyOffset(p, b, j, kvHead)];
    for (int64_t x = 0; x < d; ++x) {
      dqRow[x] += dScore * kRow[x];
      dkRow[x] += dScore * qRow[x];
      dvRow[x] += probs[j] * doRow[x];
    }
  }
}

void referenceAttentionBackward(const Problem &p, const std::vector<float> &q,
                                const std::vector<float> &k,
                                const std::vector<float> &v,
                                const std::vector<float> &dout,
                                std::vector<double> &dq,
                                std::vector<double> &dk,
                                std::vector<double> &dv) {
  assert(!p.isVarlen() && p.pageSize == 0 &&
         "the backward reference takes dense problems only");
  dq.assign(p.batch * p.seqQ * p.qHeads * p.headDim, 0.0);
  dk.assign(p.batch * p.seqK * p.kvHeads * p.headDim, 0.0);
  dv.assign(dk.size(), 0.0);
  BackwardInputs in{q, k, v, dout, nullptr, nullptr};
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.qHeads; ++h)
      for (int64_t i = 0; i < p.seqQ; ++i)
        referenceBackwardRow(p, in, b, h, i, {dq, dk, dv});
}

/// `value` rounded to the input type.
static float roundToInput(bool bf16, float value) {
  return bf16 ? roundToBFloat16(value) : roundToHalf(value);
}

/// Query row i of (b, h)'s share of the low-precision gradients, summed in
/// float32: P from the given LSE, rounded to the input type for dV and dS,
/// and dS rounded to it before dQ and dK.
static void lowpBackwardRow(const Problem &p, bool bf16,
                            const BackwardInputs &in, int64_t b, int64_t h,
                            int64_t i, Gradients<float> grad) {
  const int64_t d = p.headDim;
  const int64_t kvHead = h / (p.qHeads / p.kvHeads);
  const float rowLse = (*in.lse)[(b * p.qHeads + h) * p.seqQ + i];
  if (rowLse == -std::numeric_limits<float>::infinity())
    return; // no visible key: P = 0, no gradient
  const float *qRow = &in.q[queryOffset(p, b, i, h)];
  const float *doRow = &in.dout[queryOffset(p, b, i, h)];
  const float delta = float32Dot(doRow, &(*in.out)[queryOffset(p, b, i, h)], d);
  float *dqRow = &grad.dq[queryOffset(p, b, i, h)];
  for (int64_t j = 0; j < p.seqK; ++j) {
    if (!isVisible(p, b, h, i, j))
      continue;
    const float *kRow = &in.k[keyOffset(p, b, j, kvHead)];
    const float dot = float32Dot(qRow, kRow, d);
    const float prob =
        roundToInput(bf16, std::exp(lowpScore(p, dot, b, h, i, j) - rowLse));
    if (prob == 0.0f)
      continue;
    const float dProb = float32Dot(doRow, &in.v[keyOffset(p, b, j, kvHead)], d);
    const float dScore = roundToInput(
        bf16, prob * (dProb - delta) * lowpSlope(p, dot, b, h, i, j));
    float *dkRow = &grad.dk[keyOffset(p, b, j, kvHead)];
    float *dvRow = &grad.dv[keyOffset(p, b, j, kvHead)];
    for (int64_t x = 0; x < d; ++x) {
      dqRow[x] += dScore * kRow[x];
      dkRow[x] += dScore * qRow[x];
      dvRow[x] += prob * doRow[x];
    }
  }
}

void lowPrecisionAttentionBackward(
    const Problem &p, bool bf16, const std::vector<float> &q,
    const std::vector<float> &k, const std::vector<float> &v,
    const std::vector<float> &out, const std::vector<float> &dout,
    const std::vector<float> &lse, std::vector<float> &dq,
    std::vector<float> &dk, std::vector<float> &dv) {
  assert(!p.isVarlen() && p.pageSize == 0 &&
         "the backward reference takes dense problems only");
  dq.assign(p.batch * p.seqQ * p.qHeads * p.headDim, 0.0f);
  dk.assign(p.batch * p.seqK * p.kvHeads * p.headDim, 0.0f);
  dv.assign(dk.size(), 0.0f);
  BackwardInputs in{q, k, v, dout, &out, &lse};
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.qHeads; ++h)
      for (int64_t i = 0; i < p.seqQ; ++i)
        lowpBackwardRow(p, bf16, in, b, h, i, {dq, dk, dv});
  for (std::vector<float> *gradient : {&dq, &dk, &dv})
    for (float &x : *gradient)
      x = roundToInput(bf16, x);
}

void computeBackwardReference(const Problem &problem, bool bf16,
                              const std::vector<float> &q,
                              const std::vector<float> &k,
                              const std::vector<float> &v,
                              const std::vector<float> &out,
                              const std::vector<float> &dout,
                              const std::vector<float> &lse,
                              BackwardReference &reference) {
  referenceAttentionBackward(problem, q, k, v, dout, reference.dq,
                             reference.dk, reference.dv);
  std::vector<float> dq, dk, dv;
  lowPrecisionAttentionBackward(problem, bf16, q, k, v, out, dout, lse, dq, dk,
                                dv);
  reference.lowpDqErr = maxDifference(dq, reference.dq);
  reference.lowpDkErr = maxDifference(dk, reference.dk);
  reference.lowpDvErr = maxDifference(dv, reference.dv);
}

bool compareGradients(const BackwardReference &reference,
                      const std::vector<float> &dq,
                      const std::vector<float> &dk,
                      const std::vector<float> &dv, double atol,
                      GradientErrors &errors) {
  errors.refLowpDq = reference.lowpDqErr;
  errors.refLowpDk = reference.lowpDkErr;
  errors.refLowpDv = reference.lowpDvErr;
  // rtol 0: where the low-precision reference overflowed, atol alone judges.
  bool dqOk = judge(dq, reference.dq, reference.lowpDqErr, atol, 0.0,
                    errors.dq, nullptr);
  bool dkOk = judge(dk, reference.dk, reference.lowpDkErr, atol, 0.0,
                    errors.dk, nullptr);
  bool dvOk = judge(dv, reference.dv, reference.lowpDvErr, atol, 0.0,
                    errors.dv, nullptr);
  return dqOk && dkOk && dvOk;
}

/// Incoherent processing: every head-dim row of Q and K becomes H·S·x /
/// sqrt(d), H the Walsh-Hadamard matrix and S one diagonal of random signs
/// for all rows, an orthogonal map that leaves each score q·k unchanged and
/// spreads an outlier entry over the whole row before it is rounded.
static void rotateQueriesAndKeys(const Problem &p, uint64_t seed,
                                 std::vector<float> &q, std::vector<float> &k) {
  const int64_t d = p.headDim;
  std::mt19937_64 generator(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<float> signs(d);
  for (float &sign : signs)
    sign = generator() & 1 ? -1.0f : 1.0f;
  const float norm = 1.0f / std::sqrt(static_cast<float>(d));
  for (std::vector<float> *values : {&q, &k})
    for (size_t row = 0; row + d <= values->size(); row += d) {
      float *x = values->data() + row;
      for (int64_t i = 0; i < d; ++i)
        x[i] *= signs[i];
      for (int64_t half = 1; half < d; half *= 2)
        for (int64_t i = 0; i < d; i += 2 * half)
          for (int64_t j = i; j < i + half; ++j) {
            float a = x[j], b = x[j + half];
            x[j] = a + b;
            x[j + half] = a - b;
          }
      for (int64_t i = 0; i < d; ++i)
        x[i] *= norm;
    }
}

void fillInputs(const Problem &p, bool bf16, uint64_t seed,
                InputDistribution distribution, std::vector<float> &q,
                std::vector<float> &k, std::vector<float> &v,
                UnroundedInputs *unrounded) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  auto round = [&](float value) {
    return bf16 ? roundToBFloat16(value) : roundToHalf(value);
  };
  q.resize(p.batch * p.seqQ * p.qHeads * p.headDim);
  k.resize(p.batch * p.seqK * p.kvHeads * p.headDim);
  v.resize(p.batch * p.seqK * p.kvHeads * p.vDim());
  for (float &x : q)
    x = normal(generator);
  for (float &x : k)
    x = normal(generator);
  for (float &x : v)
    x = normal(generator);

  switch (distribution) {
  case InputDistribution::Normal:
    break;
  case InputDistribution::Growing: {
    // q·k grows by ~headDim/2 per KV block towards the first key; the KV loop
    // visits blocks last to first, so nearly every block raises the row max
    // by far more than the rescale threshold.
    for (float &x : q)
      x = 0.5f * x + 1.0f;
    for (int64_t i = 0; i < static_cast<int64_t>(k.size()); ++i) {
      int64_t key = (i / (p.kvHeads * p.headDim)) % p.seqK;
      float growth = 0.5f * static_cast<float>(p.seqK - 1 - key) / 128.0f;
      k[i] = 0.5f * k[i] + growth;
    }
    break;
  }
  case InputDistribution::NonFinite: {
    auto qAt = [&](int64_t row, int64_t head) -> float & {
      return q[(row * p.qHeads + head) * p.headDim];
    };
    auto kAt = [&](int64_t key) -> float & { return k[key * p.kvHeads * p.headDim]; };
    if (p.seqQ > 3)
      qAt(3, 0) = std::numeric_limits<float>::quiet_NaN();
    if (p.seqK > 15)
      kAt(15) = std::numeric_limits<float>::quiet_NaN();
    if (p.seqK > 142)
      kAt(142) = std::numeric_limits<float>::infinity();
    break;
  }
  case InputDistribution::Spikes: {
    std::normal_distribution<float> outlier(0.0f, 10.0f);
    for (std::vector<float> *values : {&q, &k, &v})
      for (float &x : *values)
        if (uniform(generator) < 0.001f)
          x += outlier(generator);
    break;
  }
  case InputDistribution::Outliers:
    for (float &x : q)
      if (uniform(generator) < 0.01f)
        x *= 16.0f;
    for (float &x : k)
      if (uniform(generator) < 0.01f)
        x *= 16.0f;
    for (float &x : v)
      if (uniform(generator) < 0.01f)
        x *= 100.0f;
    break;
  }
  if (unrounded)
    *unrounded = {q, k, v};
  if (p.fp8 && p.fp8Rotation)
    rotateQueriesAndKeys(p, seed, q, k);
  // FP8 inputs are e4m3 (saturating: an outlier past 448 is 448).
  for (std::vector<float> *values : {&q, &k, &v})
    for (float &x : *values)
      x = p.fp8 ? roundToE4m3(x) : round(x);
  // K and V rows: K's head dim and V's.
  std::pair<std::vector<float> *, int64_t> keyTensors[] = {{&k, p.headDim},
                                                           {&v, p.vDim()}};
  // With per-sequence key counts, the keys past a sequence's count are
  // memory the kernel must not let reach O (a cache's unfilled rows, which
  // may hold anything): NaN here, so that a kernel that does fails.
  // Varlen: the K and V rows past the last sequence are no sequence's
  // (spare rows of a packed tensor): NaN, which must not reach any O.
  if (p.isVarlen())
    for (int64_t key = std::clamp<int64_t>(p.cuSeqlensK.back(), 0, p.seqK);
         key < p.seqK; ++key)
      for (auto [values, width] : keyTensors)
        std::fill_n(values->begin() + key * p.kvHeads * width,
                    p.kvHeads * width, std::numeric_limits<float>::quiet_NaN());
  if (!p.seqUsedK.empty() && p.isVarlen()) {
    // Varlen: the rows of each sequence past its count.
    for (int64_t b = 0; b < p.sequences(); ++b) {
      SequenceSpan keys = sequenceSpan(double(p.cuSeqlensK[b]),
                                       double(p.cuSeqlensK[b + 1]), p.seqK);
      for (int64_t key = std::clamp<int64_t>(p.seqUsedK[b], 0, keys.length);
           key < keys.length; ++key)
        for (auto [values, width] : keyTensors)
          std::fill_n(values->begin() + (keys.offset + key) * p.kvHeads * width,
                      p.kvHeads * width,
                      std::numeric_limits<float>::quiet_NaN());
    }
  } else if (!p.seqUsedK.empty())
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t key = std::max<int64_t>(p.keysOf(b), 0); key < p.seqK; ++key)
        for (auto [values, width] : keyTensors)
          std::fill_n(values->begin() + ((b * p.seqK + key) * p.kvHeads) * width,
                      p.kvHeads * width,
                      std::numeric_limits<float>::quiet_NaN());
}

Problem problemOf(const runtime::Manifest &manifest, int64_t batch,
                  int64_t seqQ, int64_t seqK) {
  Problem problem;
  problem.batch = batch;
  problem.seqQ = seqQ;
  problem.seqK = seqK;
  problem.qHeads = manifest.qHeads;
  problem.kvHeads = manifest.kvHeads;
  problem.headDim = manifest.headDim;
  problem.valueHeadDim = manifest.vHeadDim();
  problem.causal = manifest.mask == "causal";
  problem.window = manifest.mask == "window";
  problem.windowLeft = manifest.windowLeft;
  problem.windowRight = manifest.windowRight;
  problem.scale = manifest.scale;
  problem.softcap = manifest.softcap;
  problem.pageSize = manifest.blockTable >= 0 ? manifest.pageSize : 0;
  // (The descale tables are the caller's to draw or read.)
  problem.fp8 = manifest.dtype == "e4m3";
  return problem;
}

} // namespace mlir::fa4::sim
