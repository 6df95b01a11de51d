//===- ScheduleConfigTest.cpp - Hopper roles, stages and budgets ----------===//

#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Target/Hopper/ScheduleConfig.h"

#include <gtest/gtest.h>

using namespace mlir::fa4;

namespace {

TEST(HopperScheduleConfig, RolesFitTheRegisterFileAndTheWarpgroups) {
  // Two consumers (a 128-row Q tile) and three (a 192-row one).
  for (int64_t consumers : {2, 3}) {
    hopper::ScheduleConfig config;
    config.consumers = consumers;
    int64_t registers = 0;
    int64_t warps = 0;
    for (const RoleSpec &role : config.roles()) {
      // One role per warpgroup: setmaxnreg is warpgroup-collective, and
      // wgmma is issued by a whole warpgroup starting at a multiple of 4.
      EXPECT_EQ(role.firstWarp % 4, 0);
      EXPECT_EQ(role.numWarps, 4);
      EXPECT_EQ(role.firstWarp, warps);
      EXPECT_EQ(role.registers % 8, 0);
      EXPECT_GE(role.registers, 24);
      EXPECT_LE(role.registers, 256);
      EXPECT_EQ(hopper::ScheduleConfig::consumerIndex(role),
                role.firstWarp / 4 - 1);
      registers += role.registers * role.numWarps * 32;
      warps += role.numWarps;
    }
    // setmaxnreg moves registers within the launch's allocation: a budget
    // past it makes an increase wait forever.
    int64_t threads = warps * 32;
    EXPECT_LE(registers, blackwell::registersAtLaunch(threads) * threads);
    EXPECT_EQ(warps, 4 * (consumers + 1));
    EXPECT_EQ(config.qRows(), 64 * consumers);
  }
  // 168 per thread of 384, 128 of 512.
  EXPECT_EQ(blackwell::registersAtLaunch(384), 168);
  EXPECT_EQ(blackwell::registersAtLaunch(512), 128);
}

TEST(HopperScheduleConfig, KvStagesFollowTheSharedMemoryBudget) {
  // Q (one tile) + two 64-row O halves + barriers, the rest K and V pairs.
  EXPECT_EQ(hopper::ScheduleConfig::get(128, 2).kvStages(), 2);
  EXPECT_EQ(hopper::ScheduleConfig::get(96, 2).kvStages(), 2);
  EXPECT_EQ(hopper::ScheduleConfig::get(64, 2).kvStages(), 4);
  // Head dim 32 pads its rows to one 128-byte swizzle line: hd64's stages.
  EXPECT_EQ(hopper::ScheduleConfig::get(32, 2).kvStages(), 4);
  for (int64_t headDim : {32, 64, 96, 128}) {
    hopper::ScheduleConfig config = hopper::ScheduleConfig::get(headDim, 2);
    EXPECT_LE(config.fixedSmemBytes() + config.kvStages() * config.kvPairBytes(),
              hopper::ScheduleConfig::kSmemLimit);
  }
  // (192, 128): 48 KB of Q and 32 KB of O staging leave one 80 KB pair; O
  // written from registers instead, two.
  hopper::ScheduleConfig deep = hopper::ScheduleConfig::get(192, 2, 128);
  EXPECT_EQ(deep.kvPairBytes(), 128 * 384 + 128 * 256);
  EXPECT_EQ(deep.kvStages(), 1);
  deep.chooseOStaging();
  EXPECT_FALSE(deep.oStaged);
  EXPECT_EQ(deep.kvStages(), 2);
  for (int64_t headDim : {64, 96, 128}) {
    hopper::ScheduleConfig config = hopper::ScheduleConfig::get(headDim, 2);
    config.chooseOStaging();
    EXPECT_TRUE(config.oStaged);
  }
  // Asked for one stage, (192, 128) keeps its O staging; asked for more
  // than either layout holds, the by-address maximum is the one refused.
  hopper::ScheduleConfig single = hopper::ScheduleConfig::get(192, 2, 128);
  single.chooseOStaging(1);
  EXPECT_TRUE(single.oStaged);
  single.chooseOStaging(2);
  EXPECT_FALSE(single.oStaged);
  single.chooseOStaging(3);
  EXPECT_FALSE(single.oStaged);
  EXPECT_EQ(single.maxKvStages(), 2);
  // Head dim 128 stages O whatever is asked (its staged ring has two).
  hopper::ScheduleConfig config = hopper::ScheduleConfig::get(128, 2);
  for (int64_t requested : {0, 1, 2, 3}) {
    config.chooseOStaging(requested);
    EXPECT_TRUE(config.oStaged);
  }
  config.kvStagesOverride = 1;
  EXPECT_EQ(config.kvStages(), 1);
}

TEST(HopperScheduleConfig, BlocksNarrowWhereTwoStagesOf128KeysDoNotFit) {
  // Every head dim up to 192 keeps 128-key blocks, FP8's too but at head
  // dim 128, which takes 192 (measured on the H200, run 47) in three
  // stages of 24 KB of K and 32 KB of V transposed (256-key lines).
  for (auto [headDim, valueHeadDim] :
       {std::pair<int64_t, int64_t>{64, 64}, {96, 96}, {128, 128}, {128, 64},
        {192, 128}, {192, 64}})
    EXPECT_EQ(hopper::ScheduleConfig::defaultBlockN(headDim, valueHeadDim, 2),
              128);
  EXPECT_EQ(hopper::ScheduleConfig::defaultBlockN(128, 128, 1), 192);
  EXPECT_EQ(hopper::ScheduleConfig::defaultBlockN(128, 64, 1), 128);
  EXPECT_EQ(hopper::ScheduleConfig::defaultBlockN(96, 96, 1), 128);
  hopper::ScheduleConfig fp8 = hopper::ScheduleConfig::get(128, 1, 128, 192);
  EXPECT_EQ(fp8.kvPairBytes(), 192 * 128 + 128 * 256);
  fp8.chooseOStaging();
  EXPECT_TRUE(fp8.oStaged);
  EXPECT_EQ(fp8.kvStages(), 3);
  // Head dim 256: Q's 64 KB and two 80-key pairs of 40 KB each (O written
  // from registers) are 226 KB; 96 keys would leave one stage.
  EXPECT_EQ(hopper::ScheduleConfig::defaultBlockN(256, 256, 2), 80);
  hopper::ScheduleConfig wide = hopper::ScheduleConfig::get(256, 2, 256, 80);
  EXPECT_EQ(wide.kvPairBytes(), 2 * 80 * 512);
  wide.chooseOStaging();
  EXPECT_FALSE(wide.oStaged);
  EXPECT_EQ(wide.kvStages(), 2);
  EXPECT_LE(wide.fixedSmemBytes() + wide.kvStages() * wide.kvPairBytes(),
            hopper::ScheduleConfig::kSmemLimit);
  hopper::ScheduleConfig wider = hopper::ScheduleConfig::get(256, 2, 256, 96);
  wider.chooseOStaging();
  EXPECT_EQ(wider.kvStages(), 1);
  // (256, 128): a 96-key pair is 72 KB, two of them fit beside Q.
  EXPECT_EQ(hopper::ScheduleConfig::defaultBlockN(256, 128, 2), 96);
  EXPECT_EQ(hopper::ScheduleConfig::defaultBlockN(256, 64, 2), 128);
  // The chip table's answer is the family's.
  EXPECT_EQ(target::defaultBlockN(target::info(target::Chip::Sm90a), 256, 256,
                                  16),
            80);
  EXPECT_EQ(target::defaultBlockN(target::info(target::Chip::Sm100a), 256,
                                  256, 16),
            128);
}

TEST(HopperScheduleConfig, BlockSizesEachFamilyTakes) {
  const target::ChipInfo &hopperChip = target::info(target::Chip::Sm90a);
  const target::ChipInfo &blackwellChip = target::info(target::Chip::Sm100a);
  for (int64_t keys : {16, 64, 80, 128, 176, 256})
    EXPECT_EQ(target::blockNProblem(hopperChip, keys, 16), "") << keys;
  for (int64_t keys : {0, 8, 72, 129, 272})
    EXPECT_NE(target::blockNProblem(hopperChip, keys, 16), "") << keys;
  // FP8: whole 32-key steps of 8-bit wgmma, up to 256.
  for (int64_t keys : {32, 64, 128, 160, 224, 256})
    EXPECT_EQ(target::blockNProblem(hopperChip, keys, 8), "") << keys;
  for (int64_t keys : {0, 16, 48, 80, 288})
    EXPECT_NE(target::blockNProblem(hopperChip, keys, 8), "") << keys;
  EXPECT_EQ(target::blockNProblem(blackwellChip, 128, 16), "");
  EXPECT_NE(target::blockNProblem(blackwellChip, 80, 16), "");
}

} // namespace
