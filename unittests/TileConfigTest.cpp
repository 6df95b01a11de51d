//===- TileConfigTest.cpp - choosing the tile configuration ---------------===//

#include "fa4/Transforms/TileConfig.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mlir::fa4;

namespace {

TEST(TileConfig, FoldsScaleIntoLog2) {
  float scale = 1.0f / std::sqrt(128.0f);
  TileConfig config = TileConfig::get(128, 32, 8, MaskKind::causal, -1, -1,
                                      scale, 0.0f, 8.0);
  EXPECT_EQ(config.gqaRatio, 4);
  EXPECT_NEAR(config.scaleLog2, scale * 1.4426950408889634, 1e-7);
  EXPECT_EQ(config.qTilesPerTask, 2);
  EXPECT_EQ(config.rowsPerTask(), 256);
  EXPECT_EQ(config.band().left, -1);
  EXPECT_EQ(config.band().right, 0);
}

TEST(TileConfig, SoftcapLeavesOnlyLog2E) {
  TileConfig config =
      TileConfig::get(64, 8, 8, MaskKind::none, -1, -1, 0.125f, 30.0f, 8.0);
  EXPECT_NEAR(config.scaleLog2, 1.4426950408889634, 1e-7);
  EXPECT_EQ(config.gqaRatio, 1);
}

TEST(TileConfig, MaskBands) {
  EXPECT_EQ(maskBandFor(MaskKind::none, -1, -1).right, -1);
  EXPECT_EQ(maskBandFor(MaskKind::window, 256, 0).left, 256);
  EXPECT_EQ(maskBandFor(MaskKind::window, 256, 0).right, 0);
}

} // namespace
