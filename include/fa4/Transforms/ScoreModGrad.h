//===- ScoreModGrad.h - the derivative of a score_mod region ----*- C++ -*-===//
//
// The attention backward pass needs dS = dS' · d score_mod(s) / ds at every
// score: a region of the same shape as the score_mod that yields that
// derivative, built by forward-mode differentiation (one tangent per float
// value the score flows into, the score's own tangent 1). What does not
// depend on the score (index arithmetic, loads of extras, constants) is
// copied once and carries no tangent; a comparison or a conversion to an
// integer is piecewise constant, so nothing flows on through it.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TRANSFORMS_SCOREMODGRAD_H
#define FA4_TRANSFORMS_SCOREMODGRAD_H

#include "mlir/Support/LLVM.h"

namespace mlir {
class Operation;
class Region;
namespace fa4 {

/// Builds into `derivative` (an empty region) the derivative of the score_mod
/// region `scoreMod` (non-empty: an absent score_mod is the identity, whose
/// derivative is 1) with respect to its score argument: one block with the
/// same arguments, the code the derivative reads, and the tangent of every
/// float value that depends on the score, ending in `fa4.yield %d : f32`
/// (d new_score / d score). Ops that compute nothing the derivative reads
/// are left out. On failure, after an error at the first op the score flows
/// through that has no derivative rule ("fa4.attention_backward cannot
/// differentiate 'math.tan' in the score_mod: ..."), `derivative` is left
/// empty.
LogicalResult differentiateScoreMod(Region &scoreMod, Region &derivative);

/// The first op of a score_mod region that the score flows through and that
/// has no derivative rule, null when every one has: what
/// differentiateScoreMod would refuse, for verifiers that refuse early.
Operation *firstNonDifferentiable(Region &scoreMod);

} // namespace fa4
} // namespace mlir

#endif // FA4_TRANSFORMS_SCOREMODGRAD_H
