//===- TileConfig.h - the tile program's configuration ----------*- C++ -*-===//
//
// Chosen once from the entry op and the pass options; the tile pass, its tests
// and later levels read it, none re-derives it.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TRANSFORMS_TILECONFIG_H
#define FA4_TRANSFORMS_TILECONFIG_H

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Support/AttentionMath.h"

namespace mlir {
class Region;
} // namespace mlir

namespace mlir::fa4 {

class AttentionOp;

/// The band of visible keys that a mask kind and its bounds describe.
/// The cap c of a score_mod that computes c · tanh(score / c) and nothing
/// else, 0 for any other region: the softcap attribute written as code.
float softcapOf(Region &scoreMod);
MaskBand maskBandFor(MaskKind mask, int64_t windowLeft, int64_t windowRight);

struct TileConfig {
  /// Rows of a Q tile: one TMEM lane per row.
  static constexpr int64_t kBlockM = 128;
  /// Keys of a K/V tile: the default, and Blackwell's only (S is 128 TMEM
  /// columns).
  static constexpr int64_t kBlockN = 128;
  /// Q tiles per task on Blackwell: two, so one tile's softmax hides under
  /// the other's MMAs. Hopper's task is one tile, split between its two
  /// consumer warpgroups.
  static constexpr int64_t kBlackwellQTilesPerTask = 2;

  /// Q tiles per task (1 or 2), chosen by the target's schedule.
  int64_t qTilesPerTask = kBlackwellQTilesPerTask;
  /// Rows of a Q tile: kBlockM, or Hopper's 192 (three consumer
  /// warpgroups of 64 rows; the tile pass's q-tile-rows).
  int64_t blockM = kBlockM;
  int64_t rowsPerTask() const { return blockM * qTilesPerTask; }
  /// Keys of a K/V block, chosen by the target's schedule
  /// (target::defaultBlockN) or the tile pass's block-n option.
  int64_t blockN = kBlockN;

  /// Q and K's head dim, and V and O's (the same but for (192, 128)).
  int64_t headDim = 128;
  int64_t valueHeadDim = 128;
  int64_t numQueryHeads = 1;
  int64_t numKvHeads = 1;
  /// Query heads per K/V head.
  int64_t gqaRatio = 1;
  /// Query heads packed in a tile's rows (gqaPacking of the ratio): a task
  /// covers one head group of that many heads.
  int64_t gqaPacking = 1;
  /// Head groups per K/V head (gqaRatio / gqaPacking).
  int64_t groupsPerKv() const { return gqaRatio / gqaPacking; }
  int64_t headGroups() const { return numQueryHeads / gqaPacking; }
  MaskKind mask = MaskKind::none;
  int64_t windowLeft = -1;
  int64_t windowRight = -1;
  /// The softmax scale the user asked for.
  float scale = 1.0f;
  /// 0 when off; otherwise scores become softcap·tanh(score·scale/softcap).
  float softcap = 0.0f;
  /// A score_mod region rewrites the scaled scores.
  bool scoreMod = false;
  /// The one constant every exponential uses: exp(x·scale) = exp2(x·scaleLog2).
  /// With a softcap or a score_mod the scale is applied before them, leaving
  /// log2(e).
  float scaleLog2 = 1.0f;
  float rescaleThreshold = 8.0f;
  /// FP8 (e4m3 Q, K and V): the probabilities are lifted by 2^probShift
  /// into e4m3's range (FlashAttention-3's 8) and the max is kept current
  /// (a rescale threshold of 0): a stale max would let them grow past
  /// e4m3's 448.
  bool fp8 = false;
  int64_t probShift = 0;
  static constexpr int64_t kFp8ProbShift = 8;

  MaskBand band() const { return maskBandFor(mask, windowLeft, windowRight); }

  static TileConfig get(int64_t headDim, int64_t numQueryHeads,
                        int64_t numKvHeads, MaskKind mask, int64_t windowLeft,
                        int64_t windowRight, float scale, float softcap,
                        double rescaleThreshold);
  static TileConfig get(AttentionOp op, double rescaleThreshold);
};

} // namespace mlir::fa4

#endif // FA4_TRANSFORMS_TILECONFIG_H
