//===- Reference.h - the float64 attention reference ------------*- C++ -*-===//
//
// Written from the definition of attention alone, sharing no code with the
// tile program or the kernel: a bug in their arithmetic cannot hide in both.
// Beside it, the same attention computed plainly in low precision says what
// the input type alone costs. fa4-sim and fa4-emu draw their inputs and
// check their outputs here.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SIM_REFERENCE_H
#define FA4_SIM_REFERENCE_H

#include "fa4/Runtime/Launch.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace mlir::fa4::sim {

enum class InputDistribution {
  /// Standard normal Q, K and V.
  Normal,
  /// Scores that grow towards the keys visited last, so that nearly every KV
  /// block moves the row max past the rescale threshold.
  Growing,
  /// Normal, with rare entries of Q and K scaled by 16 and of V by 100.
  Outliers,
  /// The FlashAttention-3 paper's FP8 accuracy inputs: each entry N(0, 1)
  /// plus, with probability 0.001, an N(0, 100) outlier.
  Spikes,
  /// Normal, with NaN and infinite entries in the first batch's first KV
  /// head: a NaN in the first element of query row 3 of Q head 0, a NaN in
  /// key 15's and a +inf in key 142's (columns the software exp2 computes by
  /// default), so that some rows' scores are NaN or infinite and the others
  /// stay finite.
  NonFinite,
};

struct Problem {
  int64_t batch = 1, seqQ = 1, seqK = 1;
  int64_t qHeads = 1, kvHeads = 1, headDim = 64;
  /// V and O's head dim (0: headDim).
  int64_t valueHeadDim = 0;
  int64_t vDim() const { return valueHeadDim > 0 ? valueHeadDim : headDim; }
  bool causal = false;
  bool window = false;
  int64_t windowLeft = -1, windowRight = -1;
  double scale = 1.0;
  double softcap = 0.0;
  /// A score_mod: the new score of scaled score `s` at (batch, query head,
  /// query position, key position). Applied after the softcap.
  std::function<double(double s, int64_t b, int64_t h, int64_t i, int64_t j)>
      scoreMod;
  /// A mask_mod: whether query i of (batch, query head) may see key j, anded
  /// with the mask above.
  std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)> maskMod;
  /// seqused_k: sequence b's keys are its first seqUsedK[b] (each in [0,
  /// seqK]), and its masks align to that length; empty: all seqK.
  std::vector<int64_t> seqUsedK;
  /// A paged K/V cache (block_table): its page size and blocks, 0 for dense
  /// K and V. seqK is then max_blocks · pageSize.
  int64_t pageSize = 0, numBlocks = 0;
  /// Varlen (cu_seqlens): Q, K, V and O are packed, batch 1 with seqQ and
  /// seqK the totals, and sequence b is rows [cuSeqlensQ[b], cuSeqlensQ[b +
  /// 1]) of Q and O and [cuSeqlensK[b], cuSeqlensK[b + 1]) of K and V
  /// (batch + 1 entries each; empty: a dense batch). seqUsedK then has one
  /// count per sequence.
  std::vector<int64_t> cuSeqlensQ, cuSeqlensK;
  bool isVarlen() const { return !cuSeqlensQ.empty(); }
  /// The sequences: the batch, or the cu_seqlens tables' entries less one.
  int64_t sequences() const {
    return isVarlen() ? static_cast<int64_t>(cuSeqlensQ.size()) - 1 : batch;
  }
  int64_t keysOf(int64_t b) const {
    return seqUsedK.empty() ? seqK : seqUsedK[b];
  }
  /// FP8: Q, K and V are e4m3 (O in the f16/bf16 the callers' `bf16`
  /// names), and each of the descale tables `[sequences(), kvHeads]`
  /// multiplies its tensor (empty: 1): the attention is that of q ·
  /// qDescale, k · kDescale, v · vDescale.
  bool fp8 = false;
  /// FP8 inputs drawn by fillInputs: Q and K rotated by a random
  /// Hadamard transform before their rounding to e4m3 (head dims that are
  /// powers of two).
  bool fp8Rotation = false;
  std::vector<double> qDescale, kDescale, vDescale;
  /// The product of the Q and K descales of (sequence, K/V head), and V's.
  double scoreDescale(int64_t b, int64_t kvHead) const {
    return descaleOf(qDescale, b, kvHead) * descaleOf(kDescale, b, kvHead);
  }
  double valueDescale(int64_t b, int64_t kvHead) const {
    return descaleOf(vDescale, b, kvHead);
  }
  double descaleOf(const std::vector<double> &table, int64_t b,
                   int64_t kvHead) const {
    return table.empty() ? 1.0 : table[b * kvHeads + kvHead];
  }
};

/// Q is [batch, seqQ, qHeads, headDim], K [batch, seqK, kvHeads, headDim], V
/// [batch, seqK, kvHeads, vDim()], O [batch, seqQ, qHeads, vDim()], LSE
/// [batch, qHeads, seqQ]; all row-major.
void referenceAttention(const Problem &problem, const std::vector<float> &q,
                        const std::vector<float> &k,
                        const std::vector<float> &v, std::vector<double> &out,
                        std::vector<double> &lse);

/// Attention as a plain implementation in the input type computes it, the
/// way FlashAttention's tests build their low-precision reference: scores,
/// softmax and sums in float32, the probabilities P rounded to the input type
/// (bf16 or fp16) before P·V, O rounded to it; the LSE stays float32. Same
/// layouts as referenceAttention.
void lowPrecisionAttention(const Problem &problem, bool bf16,
                           const std::vector<float> &q,
                           const std::vector<float> &k,
                           const std::vector<float> &v, std::vector<float> &out,
                           std::vector<float> &lse);

/// What a kernel's output is judged against: the float64 reference, and the
/// error the low-precision reference makes against it.
struct Reference {
  std::vector<double> out, lse;
  /// max |O_lowp - O_ref| and max |LSE_lowp - LSE_ref|.
  double lowpMaxAbsErr = 0.0;
  double lowpLseMaxAbsErr = 0.0;
  /// The low-precision O's root-mean-square error (the FlashAttention-3
  /// paper's measure of FP8 accuracy), over the finite reference values.
  double lowpRmsErr = 0.0;
};

/// Both references for one problem's inputs.
void computeReference(const Problem &problem, bool bf16,
                      const std::vector<float> &q, const std::vector<float> &k,
                      const std::vector<float> &v, Reference &reference);

/// The largest errors against the float64 reference, over every run folded
/// in, and the low-precision reference's.
struct Errors {
  double maxAbsErr = 0.0;
  /// Over the outputs whose reference magnitude exceeds atol.
  double maxRelErr = 0.0;
  /// -1 until an LSE is compared.
  double lseMaxAbsErr = -1.0;
  /// The Reference's low-precision errors, the LSE's -1 until an LSE is
  /// compared.
  double refLowpMaxAbsErr = 0.0;
  double refLowpLseMaxAbsErr = -1.0;
  /// O's root-mean-square error (the largest of the runs'), and the
  /// low-precision reference's.
  double rmsErr = 0.0;
  double refLowpRmsErr = 0.0;
};

/// Folds one run's O (and LSE, when `lse` is non-null) into `errors` and
/// judges it by FlashAttention's rule: O (and the LSE, on its own) passes
/// when, in max-norm, its error is at most twice the plain low-precision
/// reference's plus atol, which scales with what the input type cannot
/// represent (bf16 at large magnitudes). Only where the low-precision
/// reference itself overflowed does the per-element test (atol + rtol *
/// |reference|) judge instead. A NaN, or an infinity the reference does not
/// have, fails. The float64 figures are reported either way.
bool compareWithReference(const Reference &reference,
                          const std::vector<float> &out,
                          const std::vector<float> *lse, double atol,
                          double rtol, Errors &errors);

/// The gradients of attention's inputs for the gradient dO of its output,
/// from the definition in float64: P from the scores, dV = Pᵀ·dO, dP = dO·Vᵀ,
/// dS = P ∘ (dP - rowsum(P ∘ dP)) ∘ dx/ds (x the score the softmax sees, s
/// = q·k), dQ = dS·K and dK = dSᵀ·Q, dK and dV summed over the query heads
/// of a K/V head. A score_mod's slope is a Richardson-extrapolated central
/// difference of it at a step that no kink, jump or sharp bend of the mod
/// straddles (down to 1e-9), good to about 1e-10 where the mod is smooth;
/// within 1e-9 of a kink it is the right side's. A row that
/// sees no key, and a key no row sees, get zero. dO and dQ have Q's layout,
/// dK and dV K's. Dense problems only: the caller must not pass a varlen or
/// paged one.
void referenceAttentionBackward(const Problem &problem,
                                const std::vector<float> &q,
                                const std::vector<float> &k,
                                const std::vector<float> &v,
                                const std::vector<float> &dout,
                                std::vector<double> &dq,
                                std::vector<double> &dk,
                                std::vector<double> &dv);

/// The same gradients as a plain implementation in the input type computes
/// them, FlashAttention's low-precision reference's backward: scores in
/// float32, P = exp(x - LSE) from the given float32 LSE, rounded to the input
/// type before dV = Pᵀ·dO and dS; dP and delta = rowsum(dO ∘ O) (O the given
/// one, rounded to the input type) in float32; dS rounded to the input type
/// before dQ = dS·K and dK = dSᵀ·Q; every sum in float32, and dQ, dK and dV
/// rounded to the input type. Dense problems only, as above.
void lowPrecisionAttentionBackward(
    const Problem &problem, bool bf16, const std::vector<float> &q,
    const std::vector<float> &k, const std::vector<float> &v,
    const std::vector<float> &out, const std::vector<float> &dout,
    const std::vector<float> &lse, std::vector<float> &dq,
    std::vector<float> &dk, std::vector<float> &dv);

/// What a backward kernel's gradients are judged against: the float64
/// gradients, and the errors the low-precision ones make against them.
struct BackwardReference {
  std::vector<double> dq, dk, dv;
  /// max |lowp - ref| of each gradient.
  double lowpDqErr = 0.0, lowpDkErr = 0.0, lowpDvErr = 0.0;
};

/// Both backward references for one problem's inputs, dO, and the forward's
/// O (rounded to the input type) and float32 LSE, which only the
/// low-precision one reads.
void computeBackwardReference(const Problem &problem, bool bf16,
                              const std::vector<float> &q,
                              const std::vector<float> &k,
                              const std::vector<float> &v,
                              const std::vector<float> &out,
                              const std::vector<float> &dout,
                              const std::vector<float> &lse,
                              BackwardReference &reference);

/// The largest gradient errors against the float64 reference, over every
/// run folded in, and the low-precision reference's.
struct GradientErrors {
  double dq = 0.0, dk = 0.0, dv = 0.0;
  double refLowpDq = 0.0, refLowpDk = 0.0, refLowpDv = 0.0;
};

/// Folds one run's dQ, dK and dV into `errors` and judges each by
/// FlashAttention's rule, as compareWithReference judges O: its max-norm
/// error at most twice the low-precision reference's plus atol (atol alone
/// where that reference overflowed). A NaN, or an infinity the reference
/// does not have, fails.
bool compareGradients(const BackwardReference &reference,
                      const std::vector<float> &dq,
                      const std::vector<float> &dk,
                      const std::vector<float> &dv, double atol,
                      GradientErrors &errors);

/// The problem a launch manifest's attention describes, at these sizes.
Problem problemOf(const runtime::Manifest &manifest, int64_t batch,
                  int64_t seqQ, int64_t seqK);

/// Seeded inputs of one distribution, each value rounded to the input type
/// (bf16 or fp16), in the layouts above. With the problem's seqUsedK, the K
/// and V rows past each sequence's count are NaN (memory no kernel may let
/// reach O): set seqUsedK before the inputs are drawn. A varlen problem's K
/// and V rows past its last sequence are NaN too.
/// FP8 problems round to e4m3 instead; `unrounded`, when given, receives
/// Q, K and V as drawn, before that rounding.
struct UnroundedInputs {
  std::vector<float> q, k, v;
};
void fillInputs(const Problem &problem, bool bf16, uint64_t seed,
                InputDistribution distribution, std::vector<float> &q,
                std::vector<float> &k, std::vector<float> &v,
                UnroundedInputs *unrounded = nullptr);

} // namespace mlir::fa4::sim

#endif // FA4_SIM_REFERENCE_H
