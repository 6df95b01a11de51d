//===- AttentionMathTest.cpp - index, mask and rounding arithmetic --------===//

#include "fa4/Support/AttentionMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>
#include <vector>
#include <limits>

using namespace mlir::fa4;

namespace {

constexpr MaskBand kNoMask{-1, -1};
constexpr MaskBand kCausal{-1, 0};

TEST(VisibleKeys, CausalIsBottomRightAligned) {
  // Sq == Sk: query i sees keys 0..i.
  EXPECT_EQ(visibleKeys(kCausal, 0, 8, 8).end, 1);
  EXPECT_EQ(visibleKeys(kCausal, 7, 8, 8).end, 8);
  // Sq < Sk: the last query sees every key, the first sees Sk - Sq + 1.
  EXPECT_EQ(visibleKeys(kCausal, 0, 4, 10).end, 7);
  EXPECT_EQ(visibleKeys(kCausal, 3, 4, 10).end, 10);
  // Sq > Sk: the first Sq - Sk queries see nothing.
  IndexRange none = visibleKeys(kCausal, 2, 10, 4);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(visibleKeys(kCausal, 6, 10, 4).end, 1);
}

TEST(VisibleKeys, WindowBoundsBothSides) {
  MaskBand window{2, 1};
  IndexRange keys = visibleKeys(window, 5, 10, 10);
  EXPECT_EQ(keys.begin, 3);
  EXPECT_EQ(keys.end, 7);
  // Clamped to the sequence at both ends.
  EXPECT_EQ(visibleKeys(window, 0, 10, 10).begin, 0);
  EXPECT_EQ(visibleKeys(window, 9, 10, 10).end, 10);
  EXPECT_EQ(visibleKeys(kNoMask, 3, 10, 20).begin, 0);
  EXPECT_EQ(visibleKeys(kNoMask, 3, 10, 20).end, 20);
}

TEST(PackedRows, RoundTripForEveryRatio) {
  for (int64_t ratio : {1, 2, 4, 8, 16})
    for (int64_t row = 0; row < 512; ++row) {
      PackedRow packed = unpackRow(row, ratio);
      EXPECT_EQ(packed.seqPos, row / ratio);
      EXPECT_LT(packed.headInGroup, ratio);
      EXPECT_EQ(packRow(packed, ratio), row);
    }
  // The seed's packing: ratio 4, 128 rows hold 32 query positions.
  EXPECT_EQ(unpackRow(127, 4).seqPos, 31);
  EXPECT_EQ(unpackRow(127, 4).headInGroup, 3);
}

TEST(PackedRows, PackingOfEveryRatio) {
  // Whole where the ratio is a power of two up to 16; otherwise the largest
  // power of two dividing it, at most 16, the rest as groups per K/V head.
  struct Case {
    int64_t ratio, packing;
  } cases[] = {{1, 1},  {2, 2},  {3, 1},  {4, 4},  {5, 1},   {6, 2},
               {7, 1},  {8, 8},  {12, 4}, {16, 16}, {24, 8}, {32, 16},
               {40, 8}, {48, 16}, {64, 16}, {96, 16}, {127, 1}};
  for (Case c : cases) {
    EXPECT_EQ(gqaPacking(c.ratio), c.packing) << "ratio " << c.ratio;
    EXPECT_EQ(c.ratio % gqaPacking(c.ratio), 0);
    // Every tile row holds whole positions of the group's heads.
    EXPECT_EQ(128 % gqaPacking(c.ratio), 0);
  }
}

/// Checks a block range against a brute-force scan of every row and key.
void expectRangeMatchesScan(MaskBand band, int64_t rowBegin, int64_t rows,
                            int64_t ratio, int64_t blockN, int64_t seqQ,
                            int64_t seqK) {
  KvBlockRange range =
      kvBlockRange(band, rowBegin, rows, ratio, blockN, seqQ, seqK);
  ASSERT_LE(range.begin, range.fullBegin);
  ASSERT_LE(range.fullBegin, range.fullEnd);
  ASSERT_LE(range.fullEnd, range.end);
  int64_t blocks = ceilDiv(seqK, blockN);
  for (int64_t n = 0; n < blocks; ++n) {
    bool anyVisible = false, allVisible = true;
    bool anyRow = false;
    for (int64_t row = rowBegin; row < rowBegin + rows; ++row) {
      int64_t pos = row / ratio;
      if (pos >= seqQ)
        continue;
      anyRow = true;
      IndexRange keys = visibleKeys(band, pos, seqQ, seqK);
      for (int64_t key = n * blockN; key < (n + 1) * blockN; ++key) {
        bool visible = key < seqK && key >= keys.begin && key < keys.end;
        anyVisible |= visible;
        allVisible &= visible;
      }
    }
    bool inRange = n >= range.begin && n < range.end;
    bool full = n >= range.fullBegin && n < range.fullEnd;
    // Every block with a visible key is visited; a block marked full needs no
    // mask for any row.
    if (anyVisible) {
      EXPECT_TRUE(inRange) << "block " << n << " skipped but visible";
    }
    if (full) {
      EXPECT_TRUE(anyRow && allVisible) << "block " << n << " marked full";
    }
    // Tight: fully masked blocks are never visited, fully visible ones never
    // masked, for these monotone bands.
    if (!anyVisible) {
      EXPECT_FALSE(inRange) << "block " << n << " visited but fully masked";
    }
    if (anyRow && allVisible) {
      EXPECT_TRUE(full) << "block " << n << " visible but masked";
    }
  }
}

TEST(KvBlockRange, MatchesBruteForceScan) {
  const MaskBand bands[] = {kNoMask, kCausal, {128, 0}, {100, 30}, {0, 0},
                            {-1, 64}, {300, -1}};
  for (MaskBand band : bands)
    for (int64_t ratio : {1, 4, 8})
      for (auto [seqQ, seqK] : {std::pair<int64_t, int64_t>{1, 1}, {127, 127},
                                {128, 128}, {300, 1000}, {1000, 300},
                                {1024, 1024}})
        for (int64_t rowBegin = 0; rowBegin < seqQ * ratio; rowBegin += 256)
          expectRangeMatchesScan(band, rowBegin, 256, ratio, 128, seqQ, seqK);
}

TEST(KvBlockRange, CausalSeedConfiguration) {
  // S = 1024, ratio 4: m_block 0 holds query positions 0..63, which see only
  // KV block 0, and only its lower-left corner: masked, never full.
  KvBlockRange first = kvBlockRange(kCausal, 0, 256, 4, 128, 1024, 1024);
  EXPECT_EQ(first.begin, 0);
  EXPECT_EQ(first.end, 1);
  EXPECT_EQ(first.fullBegin, first.fullEnd);
  // The last m_block (positions 960..1023) sees blocks 0..7; 0..6 are whole.
  KvBlockRange last = kvBlockRange(kCausal, 15 * 256, 256, 4, 128, 1024, 1024);
  EXPECT_EQ(last.begin, 0);
  EXPECT_EQ(last.fullBegin, 0);
  EXPECT_EQ(last.fullEnd, 7);
  EXPECT_EQ(last.end, 8);
}

TEST(KvBlockRange, RowsPastTheSequenceVisitNothing) {
  KvBlockRange range = kvBlockRange(kNoMask, 512, 256, 1, 128, 300, 300);
  EXPECT_EQ(range.begin, range.end);
}

// Block masks: a document mask (ids in runs) under each attribute mask, its
// table built by brute force as create_block_mask builds it; every task's
// narrowed range must visit each block holding a key some row sees, and
// call whole only blocks every row sees whole.
TEST(BlockMask, NarrowingKeepsVisibleBlocksAndWholeOnlyWhole) {
  const int64_t rows = 256, blockN = kBlockMaskKeys;
  uint64_t state = 12345;
  auto random = [&](int64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(n));
  };
  int64_t checkedWhole = 0, skipped = 0;
  for (MaskBand band : {kNoMask, kCausal, MaskBand{300, 0}})
    for (int64_t ratio : {1, 2, 4})
      for (auto [seqQ, seqK] : {std::pair<int64_t, int64_t>{700, 700},
                                {333, 517}, {517, 333}, {129, 1000}}) {
        std::vector<int64_t> doc(std::max(seqQ, seqK));
        for (int64_t i = 0, id = 0; i < static_cast<int64_t>(doc.size()); ++i) {
          if (random(200) == 0)
            ++id;
          doc[i] = id;
        }
        auto sees = [&](int64_t q, int64_t k) {
          IndexRange keys = visibleKeys(band, q, seqQ, seqK);
          return k >= keys.begin && k < keys.end && doc[q] == doc[k];
        };
        auto docOnly = [&](int64_t q, int64_t k) { return doc[q] == doc[k]; };
        // The table describes the document mask alone.
        int64_t queryBlocks = ceilDiv(seqQ, kBlockMaskQueries);
        int64_t kvBlocks = ceilDiv(seqK, blockN);
        std::vector<BlockMaskEntry> table(queryBlocks);
        for (int64_t qb = 0; qb < queryBlocks; ++qb) {
          std::vector<bool> seen(kvBlocks), whole(kvBlocks);
          for (int64_t kb = 0; kb < kvBlocks; ++kb) {
            bool any = false, all = true;
            for (int64_t q = qb * 128; q < std::min(seqQ, qb * 128 + 128); ++q)
              for (int64_t k = kb * blockN; k < std::min(seqK, kb * blockN + blockN); ++k)
                (docOnly(q, k) ? any : all) = docOnly(q, k) ? true : false;
            seen[kb] = any;
            whole[kb] = any && all;
          }
          table[qb] = blockMaskEntry(seen, whole);
        }
        int64_t tasks = ceilDiv(seqQ * ratio, rows);
        for (int64_t task = 0; task < tasks; ++task) {
          int64_t rowBegin = task * rows;
          KvBlockRange attribute =
              kvBlockRange(band, rowBegin, rows, ratio, blockN, seqQ, seqK);
          KvBlockRange range = narrowByBlockMask(
              attribute, attribute, rowBegin, rows, ratio, seqQ, 1,
              [&](int64_t qb, int64_t) { return table[qb]; });
          int64_t firstPos = rowBegin / ratio;
          int64_t lastPos = std::min(seqQ - 1, (rowBegin + rows - 1) / ratio);
          for (int64_t kb = 0; kb < kvBlocks; ++kb) {
            bool any = false, all = true;
            for (int64_t q = firstPos; q <= lastPos; ++q)
              for (int64_t k = kb * blockN; k < std::min(seqK, kb * blockN + blockN); ++k)
                (sees(q, k) ? any : all) = sees(q, k) ? true : false;
            bool visited = kb >= range.begin && kb < range.end;
            bool whole = kb >= range.fullBegin && kb < range.fullEnd;
            ASSERT_TRUE(!any || visited)
                << "block " << kb << " of task " << task << " skipped, ratio "
                << ratio << ", " << seqQ << "x" << seqK;
            ASSERT_TRUE(!whole || all)
                << "block " << kb << " of task " << task << " called whole";
            checkedWhole += whole;
            skipped += !visited && kb >= attribute.begin && kb < attribute.end;
          }
        }
      }
  // The table did narrow ranges and did leave whole blocks.
  EXPECT_GT(checkedWhole, 50);
  EXPECT_GT(skipped, 100);
}

TEST(Rounding, HalfMatchesHandWorkedValues) {
  EXPECT_EQ(floatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalfBits(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalfBits(65520.0f), 0x7c00); // rounds up to inf
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -24)), 0x0001); // smallest subnormal
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -25)), 0x0000); // tie to even: 0
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even 1.0.
  EXPECT_EQ(floatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(floatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(floatToHalfBits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(halfBitsToFloat(floatToHalfBits(std::nanf("")))));
  for (uint32_t bits = 0; bits < 0x7c00; ++bits)
    ASSERT_EQ(floatToHalfBits(halfBitsToFloat(bits)), bits);
}

TEST(Rounding, BFloat16TiesToEven) {
  EXPECT_EQ(floatToBFloat16Bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7.
  EXPECT_EQ(floatToBFloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(floatToBFloat16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(bfloat16BitsToFloat(0xbf80), -1.0f);
  EXPECT_TRUE(std::isnan(roundToBFloat16(std::nanf(""))));
}

} // namespace

// The varlen grid: every tile of every sequence (and head group) is exactly
// one task, whatever the lengths (empty sequences, a table starting past 0,
// rows after the last sequence), and every other task is empty (its m_block
// past the sequence's rows); the slots need no longest sequence.
TEST(VarlenGrid, EveryTileOnceAndTheRestEmpty) {
  struct Case {
    std::vector<int64_t> cu;
    int64_t total, ratio, rows, headGroups;
  };
  std::vector<Case> cases = {
      {{0, 0, 1, 128, 256, 257, 3257}, 3257, 1, 128, 2},
      {{0, 129, 129, 130, 4000}, 4003, 4, 256, 3},
      {{5, 5, 300, 301}, 310, 16, 128, 1},
      {{0, 0, 0}, 7, 2, 128, 2},
      {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 10, 8, 256, 1},
  };
  for (const Case &c : cases) {
    int64_t batch = static_cast<int64_t>(c.cu.size()) - 1;
    int64_t slots = varlenSlot(c.total, batch, c.total, c.ratio, c.rows);
    std::map<std::tuple<int64_t, int64_t, int64_t>, int> seen;
    for (int64_t t = 0; t < slots * c.headGroups; ++t) {
      VarlenTask task =
          varlenTaskAt(t, batch, c.total, c.ratio, c.rows, c.headGroups,
                       [&](int64_t b) { return c.cu[b]; });
      ASSERT_GE(task.batch, 0);
      ASSERT_LT(task.batch, batch);
      ASSERT_GE(task.headGroup, 0);
      ASSERT_LT(task.headGroup, c.headGroups);
      ASSERT_GE(task.mBlock, 0);
      SequenceSpan span = sequenceSpan(double(c.cu[task.batch]),
                                       double(c.cu[task.batch + 1]), c.total);
      if (task.mBlock * c.rows < span.length * c.ratio)
        ++seen[{task.batch, task.headGroup, task.mBlock}];
    }
    for (int64_t b = 0; b < batch; ++b) {
      SequenceSpan span =
          sequenceSpan(double(c.cu[b]), double(c.cu[b + 1]), c.total);
      int64_t tiles = ceilDiv(span.length * c.ratio, c.rows);
      for (int64_t h = 0; h < c.headGroups; ++h)
        for (int64_t m = 0; m < tiles; ++m)
          EXPECT_EQ((seen[{b, h, m}]), 1)
              << "sequence " << b << " head group " << h << " tile " << m;
    }
    int64_t expected = 0;
    for (auto &[key, count] : seen)
      expected += count;
    int64_t tiles = 0;
    for (int64_t b = 0; b < batch; ++b)
      tiles += ceilDiv(sequenceSpan(double(c.cu[b]), double(c.cu[b + 1]),
                                    c.total)
                           .length *
                           c.ratio,
                       c.rows);
    EXPECT_EQ(expected, tiles * c.headGroups);
  }
}

