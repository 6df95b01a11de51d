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

TEST(TileConfig, HeadGroupsOfAnyRatio) {
  // The seed's ratio 4 packs whole: one group per K/V head.
  TileConfig seed =
      TileConfig::get(128, 32, 8, MaskKind::causal, -1, -1, 0.1f, 0.0f, 8.0);
  EXPECT_EQ(seed.gqaPacking, 4);
  EXPECT_EQ(seed.groupsPerKv(), 1);
  EXPECT_EQ(seed.headGroups(), 8);
  // Llama 3.2 3B's 24 over 8: unpacked, 24 groups, 3 per K/V head.
  TileConfig three =
      TileConfig::get(128, 24, 8, MaskKind::causal, -1, -1, 0.1f, 0.0f, 8.0);
  EXPECT_EQ(three.gqaRatio, 3);
  EXPECT_EQ(three.gqaPacking, 1);
  EXPECT_EQ(three.groupsPerKv(), 3);
  EXPECT_EQ(three.headGroups(), 24);
  // MQA over 48 heads: groups of 16, three of them.
  TileConfig mqa =
      TileConfig::get(64, 48, 1, MaskKind::none, -1, -1, 0.1f, 0.0f, 8.0);
  EXPECT_EQ(mqa.gqaPacking, 16);
  EXPECT_EQ(mqa.groupsPerKv(), 3);
  EXPECT_EQ(mqa.headGroups(), 3);
}

TEST(TileConfig, MaskBands) {
  EXPECT_EQ(maskBandFor(MaskKind::none, -1, -1).right, -1);
  EXPECT_EQ(maskBandFor(MaskKind::window, 256, 0).left, 256);
  EXPECT_EQ(maskBandFor(MaskKind::window, 256, 0).right, 0);
}

} // namespace
