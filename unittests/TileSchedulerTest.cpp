//===- TileSchedulerTest.cpp - the persistent kernel's task order ---------===//

#include "fa4/Support/TileScheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

using namespace mlir::fa4;

namespace {

struct Case {
  int64_t batch, kvHeads, ratio, seqQ, seqK;
  MaskBand band;
};

/// Shapes that exercise tails, Sq != Sk both ways, every mask kind and GQA.
std::vector<Case> cases() {
  std::vector<Case> all;
  const MaskBand bands[] = {{-1, -1}, {-1, 0}, {200, 0}, {100, 37}, {0, 0},
                            {-1, 64}};
  for (int64_t batch : {1, 2, 3})
    for (int64_t kvHeads : {1, 8})
      for (int64_t ratio : {1, 4, 16})
        for (auto [seqQ, seqK] : {std::pair<int64_t, int64_t>{1, 1},
                                  {127, 127}, {1024, 1024}, {1000, 3000},
                                  {3000, 700}})
          for (MaskBand band : bands)
            all.push_back({batch, kvHeads, ratio, seqQ, seqK, band});
  return all;
}

TaskGridShape shapeOf(const Case &c) {
  TaskGridShape shape;
  shape.batch = c.batch;
  shape.headGroups = c.kvHeads;
  shape.gqaRatio = c.ratio;
  shape.seqQ = c.seqQ;
  shape.seqK = c.seqK;
  shape.band = c.band;
  return shape;
}

TEST(TileScheduler, EveryTaskExactlyOnceOverAnyGrid) {
  for (const Case &c : cases())
    for (auto [order, l2Keys] :
         {std::pair{TileScheduler::Order::Static, int64_t(0)},
          std::pair{TileScheduler::Order::Lpt, int64_t(0)},
          // LPT in sections of 1, 2 or 4 pairs (the last one shorter).
          std::pair{TileScheduler::Order::Lpt, c.seqK},
          std::pair{TileScheduler::Order::Lpt, 2 * c.seqK + 1},
          std::pair{TileScheduler::Order::Lpt, 7 * c.seqK}}) {
      TaskGridShape shape = shapeOf(c);
      shape.l2Keys = l2Keys;
      TileScheduler scheduler(shape, order);
      int64_t mBlocks = ceilDiv(c.seqQ * c.ratio, 256);
      ASSERT_EQ(scheduler.numTasks(), c.batch * c.kvHeads * mBlocks);
      for (int64_t grid : {1, 3, 148})
      for (bool snake : {false, true}) {
        std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
        for (int64_t cta = 0; cta < grid; ++cta)
          for (const Task &task : tasksOfCta(scheduler, cta, grid, snake)) {
            EXPECT_GE(task.batch, 0);
            EXPECT_LT(task.batch, c.batch);
            EXPECT_GE(task.headGroup, 0);
            EXPECT_LT(task.headGroup, c.kvHeads);
            EXPECT_GE(task.mBlock, 0);
            EXPECT_LT(task.mBlock, mBlocks);
            EXPECT_TRUE(seen.insert({task.batch, task.headGroup, task.mBlock}).second)
                << "task visited twice";
          }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), scheduler.numTasks());
      }
    }
}

// The snake evens out the CTAs' work where round robin over the
// heaviest-first order does not: causal, 16 heads, batch x seq = 16k, 132
// CTAs (the H200), the busiest CTA's work against the mean.
TEST(TileScheduler, SnakeBalancesCausalWork) {
  for (int64_t seq : {4096, 8192, 16384}) {
    TaskGridShape shape;
    shape.batch = 16384 / seq;
    shape.headGroups = 16;
    shape.rows = 128;
    shape.seqQ = seq;
    shape.seqK = seq;
    shape.band = MaskBand{-1, 0};
    TileScheduler scheduler(shape, TileScheduler::Order::Lpt);
    int64_t grid = 132, total = 0, busiest = 0, roundRobin = 0;
    for (int64_t cta = 0; cta < grid; ++cta) {
      int64_t work = 0, plain = 0;
      for (const Task &task : tasksOfCta(scheduler, cta, grid, /*snake=*/true))
        work += scheduler.work(task.mBlock) + 1;
      for (int64_t index = cta; index < scheduler.numTasks(); index += grid)
        plain += scheduler.work(scheduler.taskAt(index).mBlock) + 1;
      total += work;
      busiest = std::max(busiest, work);
      roundRobin = std::max(roundRobin, plain);
    }
    double mean = double(total) / double(grid);
    EXPECT_LT(busiest / mean, 1.02) << "seq " << seq;
    EXPECT_GT(roundRobin / mean, 1.04) << "seq " << seq;
  }
}

TEST(TileScheduler, SnakePositionsAreAPermutation) {
  for (int64_t grid : {1, 2, 3, 7, 132})
    for (int64_t tasks : {1, 2, 5, 131, 132, 133, 264, 265, 1000}) {
      std::set<int64_t> seen;
      for (int64_t cta = 0; cta < grid; ++cta)
        for (int64_t round = 0; round * grid + cta < tasks; ++round) {
          int64_t position = snakePosition(round, cta, grid, tasks);
          EXPECT_GE(position, round * grid);
          EXPECT_LT(position, std::min(tasks, (round + 1) * grid));
          EXPECT_TRUE(seen.insert(position).second);
        }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), tasks);
    }
}

TEST(TileScheduler, LptWorkNeverIncreases) {
  for (const Case &c : cases()) {
    TileScheduler scheduler(shapeOf(c), TileScheduler::Order::Lpt);
    int64_t previous = INT64_MAX;
    for (int64_t index = 0; index < scheduler.numTasks(); ++index) {
      int64_t work = scheduler.work(scheduler.taskAt(index).mBlock);
      EXPECT_LE(work, previous) << "position " << index;
      previous = work;
    }
  }
}

TEST(TileScheduler, CausalLptIsTheLastMBlockFirst) {
  // Bottom-right causal: later m_blocks see more keys, so LPT is the reverse
  // m_block order, heads of one m_block together.
  TaskGridShape shape;
  shape.batch = 1;
  shape.headGroups = 2;
  shape.gqaRatio = 4;
  shape.seqQ = 1024;
  shape.seqK = 1024;
  shape.band = {-1, 0};
  TileScheduler scheduler(shape, TileScheduler::Order::Lpt);
  ASSERT_EQ(scheduler.numMBlocks(), 16);
  EXPECT_EQ(scheduler.taskAt(0).mBlock, 15);
  EXPECT_EQ(scheduler.taskAt(1).mBlock, 15);
  EXPECT_EQ(scheduler.taskAt(1).headGroup, 1);
  EXPECT_EQ(scheduler.taskAt(2).mBlock, 14);
  EXPECT_EQ(scheduler.taskAt(31).mBlock, 0);
  EXPECT_EQ(scheduler.work(15), 8);
  EXPECT_EQ(scheduler.work(0), 1);
}

TEST(TileScheduler, StaticIsMBlockFastest) {
  TaskGridShape shape;
  shape.batch = 2;
  shape.headGroups = 3;
  shape.seqQ = 600; // 3 m_blocks
  shape.seqK = 600;
  TileScheduler scheduler(shape, TileScheduler::Order::Static);
  Task task = scheduler.taskAt(4);
  EXPECT_EQ(task.mBlock, 1);
  EXPECT_EQ(task.headGroup, 1);
  EXPECT_EQ(task.batch, 0);
  task = scheduler.taskAt(17);
  EXPECT_EQ(task.mBlock, 2);
  EXPECT_EQ(task.headGroup, 2);
  EXPECT_EQ(task.batch, 1);
}

// Sections: the largest power of two of pairs whose K and V fit, at least
// one, at most every pair.
TEST(TileScheduler, L2SectionPairs) {
  EXPECT_EQ(l2SectionPairs(0, 4096, 64), 64);      // no sections
  EXPECT_EQ(l2SectionPairs(102400, 4096, 64), 16); // hd128 bf16, 50 MiB: 25
  EXPECT_EQ(l2SectionPairs(102400, 1024, 64), 64); // 100 fit
  EXPECT_EQ(l2SectionPairs(102400, 16384, 16), 4); // 6 fit
  EXPECT_EQ(l2SectionPairs(102400, 1 << 20, 16), 1);
  EXPECT_EQ(l2SectionPairs(102400, 0, 3), 3);
  EXPECT_EQ(l2SectionPairs(5, 4, 1), 1);
}

// Within a section the heaviest m_block comes first for each of its pairs,
// and the next section starts only when this one's tasks are all dealt.
TEST(TileScheduler, LptSectionsTakeTheirHeadsTogether) {
  TaskGridShape shape;
  shape.batch = 2;
  shape.headGroups = 5; // 10 pairs: sections of 4, 4 and 2
  shape.rows = 128;
  shape.seqQ = 384; // 3 m_blocks
  shape.seqK = 384;
  shape.band = {-1, 0};
  shape.l2Keys = 4 * 384 + 100;
  TileScheduler scheduler(shape, TileScheduler::Order::Lpt);
  auto pairOf = [&](const Task &t) { return t.batch * 5 + t.headGroup; };
  for (int64_t index = 0; index < scheduler.numTasks(); ++index) {
    Task task = scheduler.taskAt(index);
    int64_t section = index < 12 ? 0 : index < 24 ? 1 : 2;
    int64_t width = section < 2 ? 4 : 2;
    int64_t within = index - 12 * section;
    EXPECT_EQ(pairOf(task), 4 * section + within % width) << index;
    EXPECT_EQ(task.mBlock, 2 - within / width) << index;
  }
}

} // namespace
