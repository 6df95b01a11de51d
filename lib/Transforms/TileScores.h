//===- TileScores.h - one tile's scores, as both programs compute them -*- C++ -*-===//
//
// S for one (query block, K/V block) pair: the score MMA, the softcap or the
// score_mod, and on a straddling block the mask. The forward's tile program
// builds it before its softmax, the backward's to recompute P; one builder,
// so that the backward differentiates exactly what the forward computed.
// Internal to lib/Transforms.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_TRANSFORMS_TILESCORES_H
#define FA4_LIB_TRANSFORMS_TILESCORES_H

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::fa4 {

/// The scores of one tile: `raw` Q·Kᵀ, `scores` after the softcap or the
/// score_mod (scaled), `visible` after the mask (`scores` on a block with
/// no mask work).
struct TileScores {
  Value raw, scores, visible;
};

/// Builds a tile's scores for `entry` (fa4.attention or
/// fa4.attention_backward: its regions and extras), packed rows from `row`,
/// keys from `col`; `masked` for a block that straddles a mask boundary;
/// `scoreFactor` FP8's descale product (null: none).
template <typename EntryOp>
TileScores buildTileScores(OpBuilder &b, Location loc, EntryOp entry,
                           const TileConfig &config,
                           RankedTensorType scoreType, Value qTile, Value kTile,
                           Value batch, Value head, Value row, Value col,
                           Value seqQ, Value seqK, bool masked,
                           Value scoreFactor = {}) {
  TileScores tile;
  tile.raw = ScoreMmaOp::create(b, loc, scoreType, qTile, kTile);
  tile.scores = tile.raw;
  // FP8's q_descale · k_descale (`scoreFactor`) scales the scores inside
  // the softcap or before the score_mod; without them the softmax's
  // exponent takes it.
  if (config.softcap > 0.0f)
    tile.scores = SoftcapOp::create(b, loc, scoreType, tile.raw, scoreFactor,
                                    APFloat(config.softcap),
                                    APFloat(config.scale));
  IRMapping none;
  if (config.scoreMod) {
    auto mod = ScoreModOp::create(b, loc, scoreType, tile.raw, batch, head,
                                  row, col, seqQ, seqK, scoreFactor,
                                  entry.getExtras(),
                                  config.gqaPacking, APFloat(config.scale));
    entry.getScoreMod().cloneInto(&mod.getBody(), none);
    tile.scores = mod;
  }
  tile.visible = tile.scores;
  // Masked columns become -inf before the softmax, so neither the row max
  // nor the row sum ever sees them.
  if (masked) {
    bool maskMod = !entry.getMaskMod().empty();
    auto mask = MaskOp::create(
        b, loc, scoreType, tile.scores, row, col, seqQ, seqK,
        maskMod ? batch : Value(), maskMod ? head : Value(),
        maskMod ? ValueRange(entry.getExtras()) : ValueRange(),
        config.gqaPacking, config.mask, config.windowLeft, config.windowRight);
    entry.getMaskMod().cloneInto(&mask.getMaskMod(), none);
    tile.visible = mask;
  }
  return tile;
}

} // namespace mlir::fa4

#endif // FA4_LIB_TRANSFORMS_TILESCORES_H
