//===- TileAttentionBackward.h - the backward's tile program ----*- C++ -*-===//
//
// fa4-tile's second entry: fa4.attention_backward to its level-B program.
// Internal to lib/Transforms.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_TRANSFORMS_TILEATTENTIONBACKWARD_H
#define FA4_LIB_TRANSFORMS_TILEATTENTIONBACKWARD_H

#include "fa4/Transforms/TileConfig.h"

#include "mlir/Support/LLVM.h"

namespace mlir::fa4 {
class AttentionBackwardOp;

/// The backward's configuration: the forward's for the same variant, one
/// 128-row query block per step (a softcap written as a score_mod takes
/// the softcap's path, as in the forward).
TileConfig backwardTileConfig(AttentionBackwardOp op);

/// Replaces `op` (its memrefs the function's arguments) with the backward
/// tile program and records `fa4.backward_spec` on the function; failure,
/// after an error, when its score_mod cannot be differentiated.
LogicalResult tileAttentionBackward(AttentionBackwardOp op);
} // namespace mlir::fa4

#endif // FA4_LIB_TRANSFORMS_TILEATTENTIONBACKWARD_H
