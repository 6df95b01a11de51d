//===- Reference.h - the float64 attention reference ------------*- C++ -*-===//
//
// Written from the definition of attention alone, sharing no code with the
// tile program: a bug in the tile arithmetic cannot hide in both.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_SIM_REFERENCE_H
#define FA4_LIB_SIM_REFERENCE_H

#include <cstdint>
#include <vector>

namespace mlir::fa4::sim {

struct Problem {
  int64_t batch = 1, seqQ = 1, seqK = 1;
  int64_t qHeads = 1, kvHeads = 1, headDim = 64;
  bool causal = false;
  bool window = false;
  int64_t windowLeft = -1, windowRight = -1;
  double scale = 1.0;
  double softcap = 0.0;
};

/// Q and O are [batch, seqQ, qHeads, headDim], K and V [batch, seqK, kvHeads,
/// headDim], LSE [batch, qHeads, seqQ]; all row-major.
void referenceAttention(const Problem &problem, const std::vector<float> &q,
                        const std::vector<float> &k,
                        const std::vector<float> &v, std::vector<double> &out,
                        std::vector<double> &lse);

} // namespace mlir::fa4::sim

#endif // FA4_LIB_SIM_REFERENCE_H
