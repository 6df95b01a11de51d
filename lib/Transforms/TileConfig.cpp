//===- TileConfig.cpp - the tile program's configuration ------------------===//

#include "fa4/Transforms/TileConfig.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"

using namespace mlir;
using namespace mlir::fa4;

MaskBand mlir::fa4::maskBandFor(MaskKind mask, int64_t windowLeft,
                                int64_t windowRight) {
  switch (mask) {
  case MaskKind::none:
    return {-1, -1};
  case MaskKind::causal:
    return {-1, 0};
  case MaskKind::window:
    return {windowLeft, windowRight};
  }
  return {-1, -1};
}

static constexpr double kLog2E = 1.4426950408889634;

TileConfig TileConfig::get(int64_t headDim, int64_t numQueryHeads,
                           int64_t numKvHeads, MaskKind mask,
                           int64_t windowLeft, int64_t windowRight, float scale,
                           float softcap, double rescaleThreshold) {
  TileConfig config;
  config.headDim = headDim;
  config.numQueryHeads = numQueryHeads;
  config.numKvHeads = numKvHeads;
  config.gqaRatio = numQueryHeads / numKvHeads;
  config.mask = mask;
  config.windowLeft = windowLeft;
  config.windowRight = windowRight;
  config.scale = scale;
  config.softcap = softcap;
  config.scaleLog2 = static_cast<float>(softcap > 0.0f ? kLog2E : scale * kLog2E);
  config.rescaleThreshold = static_cast<float>(rescaleThreshold);
  return config;
}

TileConfig TileConfig::get(AttentionOp op, double rescaleThreshold) {
  TileConfig config =
      get(op.getHeadDim(), op.getNumQueryHeads(), op.getNumKvHeads(),
          op.getMask(), op.getWindowLeft(), op.getWindowRight(),
          op.getEffectiveScale(), op.getSoftcap().convertToFloat(),
          rescaleThreshold);
  if (!op.getScoreMod().empty()) {
    config.scoreMod = true;
    config.scaleLog2 = static_cast<float>(kLog2E);
  }
  return config;
}
