//===- Reference.cpp - the float64 attention reference --------------------===//

#include "Reference.h"

#include <cmath>
#include <limits>

namespace mlir::fa4::sim {

/// Whether query i may see key j, straight from the definition: causal and
/// windows are aligned to the bottom-right corner of the score matrix.
static bool isVisible(const Problem &p, int64_t i, int64_t j) {
  int64_t diagonal = i + p.seqK - p.seqQ;
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

void referenceAttention(const Problem &p, const std::vector<float> &q,
                        const std::vector<float> &k,
                        const std::vector<float> &v, std::vector<double> &out,
                        std::vector<double> &lse) {
  const int64_t d = p.headDim;
  const int64_t groupSize = p.qHeads / p.kvHeads;
  out.assign(p.batch * p.seqQ * p.qHeads * d, 0.0);
  lse.assign(p.batch * p.qHeads * p.seqQ,
             -std::numeric_limits<double>::infinity());
  std::vector<double> scores(p.seqK), acc(d);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.qHeads; ++h) {
      const int64_t kvHead = h / groupSize;
      for (int64_t i = 0; i < p.seqQ; ++i) {
        const float *qRow = &q[((b * p.seqQ + i) * p.qHeads + h) * d];
        double maxScore = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < p.seqK; ++j) {
          if (!isVisible(p, i, j)) {
            scores[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const float *kRow = &k[((b * p.seqK + j) * p.kvHeads + kvHead) * d];
          double dot = 0.0;
          for (int64_t x = 0; x < d; ++x)
            dot += static_cast<double>(qRow[x]) * kRow[x];
          double s = dot * p.scale;
          if (p.softcap > 0.0)
            s = p.softcap * std::tanh(s / p.softcap);
          scores[j] = s;
          maxScore = std::max(maxScore, s);
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
          const float *vRow = &v[((b * p.seqK + j) * p.kvHeads + kvHead) * d];
          for (int64_t x = 0; x < d; ++x)
            acc[x] += weight * vRow[x];
        }
        double *oRow = &out[((b * p.seqQ + i) * p.qHeads + h) * d];
        for (int64_t x = 0; x < d; ++x)
          oRow[x] = acc[x] / sum;
        lse[(b * p.qHeads + h) * p.seqQ + i] = maxScore + std::log(sum);
      }
    }
  }
}

} // namespace mlir::fa4::sim
