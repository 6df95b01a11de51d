//===- MaskAnalysis.h - the key bounds a mask_mod region implies -*- C++ -*-===//
//
// A mask_mod region is code; the block skipping of FlashAttention needs
// intervals. The analysis reads the region's predicate as a boolean formula
// over comparisons affine in (q_idx, kv_idx) (and their quotients by a chunk
// size), and turns each comparison into a bound on kv_idx as a non-decreasing
// function of q_idx (support/AttentionMath.h's KeyBound). Conjunctions
// intersect, disjunctions that share one side unite, negations flip the
// comparison. What it cannot read (loads of extras, a predicate on the batch
// or the head, a bound that falls as q grows) it over-approximates, and says
// the bounds are no longer exact: the region must then run per element.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TRANSFORMS_MASKANALYSIS_H
#define FA4_TRANSFORMS_MASKANALYSIS_H

#include "fa4/Support/AttentionMath.h"

namespace mlir {
class Region;
namespace fa4 {
enum class MaskKind : uint32_t;

struct MaskModBounds {
  /// Every key the predicate admits lies within these bounds.
  KeyBounds bounds;
  /// The predicate admits exactly the keys within the bounds: it need not be
  /// evaluated per element.
  bool exact = true;
};

/// The bounds of a mask_mod region (block arguments batch, q_head, q_idx,
/// kv_idx, ...). An empty region admits every key.
MaskModBounds analyzeMaskMod(Region &region);

/// The bounds of an attribute mask anded with a mask_mod region: what a
/// kv_block_range or an fa4.mask applies.
MaskModBounds maskBounds(MaskKind mask, int64_t windowLeft,
                         int64_t windowRight, Region &maskMod);

} // namespace fa4
} // namespace mlir

#endif // FA4_TRANSFORMS_MASKANALYSIS_H
