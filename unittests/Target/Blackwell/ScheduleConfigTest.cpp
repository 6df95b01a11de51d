//===- ScheduleConfigTest.cpp - Blackwell roles, stages and budgets -------===//

#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"

#include <gtest/gtest.h>

using namespace mlir::fa4;

namespace {

TEST(ScheduleConfig, RolesFillTheRegisterFileAndTheWarps) {
  int64_t registers = 0;
  uint32_t warps = 0;
  int64_t warpgroupBudget[4] = {0, 0, 0, 0};
  for (const RoleSpec &role : ScheduleConfig::roles()) {
    registers += role.registers * role.numWarps * 32;
    // setmaxnreg is collective over a warpgroup: one budget per warpgroup.
    for (int64_t w = role.firstWarp; w < role.firstWarp + role.numWarps; ++w) {
      int64_t &budget = warpgroupBudget[w / 4];
      EXPECT_TRUE(budget == 0 || budget == role.registers) << "warp " << w;
      budget = role.registers;
    }
    for (int64_t w = role.firstWarp; w < role.firstWarp + role.numWarps; ++w) {
      EXPECT_FALSE(warps & (1u << w)) << "warp " << w << " taken twice";
      warps |= 1u << w;
    }
    EXPECT_EQ(role.registers % 8, 0);
  }
  EXPECT_EQ(registers, blackwell::kRegistersPerSm);
  EXPECT_EQ(warps, 0xffffu);
}

TEST(ScheduleConfig, KvStagesFollowTheSharedMemoryBudget) {
  // Q (2) + O staging (2) + statistics + barriers, the rest K/V tiles.
  EXPECT_EQ(ScheduleConfig::get(128, 2).kvStages(), 3);
  // Head dim 96 pads its rows to 256 bytes (two 128-byte swizzle lines).
  EXPECT_EQ(ScheduleConfig::get(96, 2).kvStages(), 3);
  EXPECT_EQ(ScheduleConfig::get(64, 2).kvStages(), 10);
  // Head dim 32 pads its rows to one 128-byte line: hd64's stages.
  EXPECT_EQ(ScheduleConfig::get(32, 2).kvStages(), 10);
  for (int64_t headDim : {32, 64, 96, 128}) {
    ScheduleConfig config = ScheduleConfig::get(headDim, 2);
    EXPECT_LE(config.smemBytes(), blackwell::kSmemBytesPerCta);
    EXPECT_GT(config.smemBytes() + config.kvItemBytes(),
              blackwell::kSmemBytesPerCta)
        << "one more stage would still fit";
    EXPECT_EQ(config.oStages(), ScheduleConfig::kQStages);
  }
  EXPECT_EQ(ScheduleConfig::get(128, 2).smemBytes(), 232448);
}

TEST(ScheduleConfig, CtaPairsHoldHalfOfEveryKvItem) {
  // Each CTA of a pair holds 16 KB of a 32 KB hd128 K/V item: twice the
  // stages in the same shared memory (docs/TwoCta.md).
  ScheduleConfig pair = ScheduleConfig::get(128, 2);
  pair.ctaPair = true;
  EXPECT_EQ(pair.kvItemBytes(), 16384);
  EXPECT_EQ(pair.kvStages(), 6);
  EXPECT_EQ(pair.oStages(), ScheduleConfig::kQStages);
  EXPECT_EQ(pair.smemBytes(), 232448);
}

TEST(ScheduleConfig, HeadDims192And128ShareOneOStagingStage) {
  // 96 KB of Q and two 32 KB O stages leave one 48 KB K/V item: the O
  // tiles go out through one stage, and the ring gets two.
  ScheduleConfig config = ScheduleConfig::get(192, 2, 128);
  EXPECT_EQ(config.kvItemBytes(), 128 * 384);
  EXPECT_EQ(config.oStages(), 1);
  EXPECT_EQ(config.kvStages(), 2);
  EXPECT_EQ(config.smemBytes(), blackwell::kSmemBytesPerCta);
  EXPECT_EQ(config.accColumns(), 128);
  EXPECT_EQ(2 * config.scoreColumns() + 2 * config.accColumns(),
            blackwell::kTmemColumns);
}

TEST(ScheduleConfig, HeadDim256RunsOneQTileWithoutOStaging) {
  EXPECT_EQ(ScheduleConfig::qTilesFor(192, 128), ScheduleConfig::kQStages);
  EXPECT_EQ(ScheduleConfig::qTilesFor(256, 256), 1);
  EXPECT_EQ(ScheduleConfig::qTilesFor(256, 64), 1);
  // 64 KB of Q, statistics and barriers leave two 64 KB K/V stages and
  // 33 KB: no room for O's 64 KB staging, which the correction warps then
  // replace by stores from registers.
  ScheduleConfig config = ScheduleConfig::get(256, 2);
  EXPECT_EQ(config.qTiles, 1);
  EXPECT_EQ(config.oStages(), 0);
  EXPECT_EQ(config.kvStages(), 2);
  EXPECT_LE(config.smemBytes(), blackwell::kSmemBytesPerCta);
  // S0 and S1 (double-buffered over K/V blocks) and one O: all 512
  // columns.
  EXPECT_EQ(2 * config.scoreColumns() + config.accColumns(),
            blackwell::kTmemColumns);
  // At V's 128 one 32 KB staging stage fits beside them.
  ScheduleConfig narrow = ScheduleConfig::get(256, 2, 128);
  EXPECT_EQ(narrow.oStages(), 1);
  EXPECT_EQ(narrow.kvStages(), 2);
  // Asked for below head dim 256, one tile leaves the ring more stages.
  ScheduleConfig one = ScheduleConfig::get(128, 2, 128, 0, 1);
  EXPECT_EQ(one.oStages(), 1);
  EXPECT_GT(one.kvStages(), ScheduleConfig::get(128, 2).kvStages());
}

TEST(ScheduleConfig, OneTileRolesFitTheirWarpsAndRegisters) {
  int64_t registers = 0, threads = 0;
  uint32_t warps = 0;
  int64_t warpgroupBudget[4] = {0, 0, 0, 0};
  for (const RoleSpec &role : ScheduleConfig::roles(1)) {
    registers += role.registers * role.numWarps * 32;
    threads += role.numWarps * 32;
    for (int64_t w = role.firstWarp; w < role.firstWarp + role.numWarps; ++w) {
      int64_t &budget = warpgroupBudget[w / 4];
      EXPECT_TRUE(budget == 0 || budget == role.registers) << "warp " << w;
      budget = role.registers;
      EXPECT_FALSE(warps & (1u << w)) << "warp " << w << " taken twice";
      warps |= 1u << w;
    }
  }
  // Three whole warpgroups, within what 384 threads hold at launch.
  EXPECT_EQ(warps, 0xfffu);
  EXPECT_LE(registers, blackwell::registersAtLaunch(threads) * threads);
  EXPECT_EQ(ScheduleConfig::roles(2).size(), ScheduleConfig::roles().size());
}

TEST(ScheduleConfig, TmemColumns) {
  ScheduleConfig config = ScheduleConfig::get(128, 2);
  EXPECT_EQ(2 * config.scoreColumns() + 2 * config.accColumns(),
            blackwell::kTmemColumns);
}

} // namespace
