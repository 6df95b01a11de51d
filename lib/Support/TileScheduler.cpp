//===- TileScheduler.cpp - task order of the persistent kernel ------------===//

#include "fa4/Support/TileScheduler.h"

#include <algorithm>
#include <numeric>

using namespace mlir::fa4;

TileScheduler::TileScheduler(const TaskGridShape &shape, Order order)
    : shape(shape), order(order),
      mBlocks(ceilDiv(shape.seqQ * shape.gqaRatio, shape.rows)) {
  if (order != Order::Lpt)
    return;
  // Longest processing time first: a causal m_block's work (or a mask_mod's) is the
  // number of KV blocks its rows see, so the heaviest go to the CTAs first and
  // the light ones fill in the tail.
  mBlockOrder.resize(mBlocks);
  std::iota(mBlockOrder.rbegin(), mBlockOrder.rend(), 0);
  std::vector<int64_t> weights(mBlocks);
  for (int64_t m = 0; m < mBlocks; ++m)
    weights[m] = work(m);
  // Heaviest first, ties latest m_block first: a total order, so a plain
  // sort (libstdc++'s stable_sort warns under Clang).
  std::sort(mBlockOrder.begin(), mBlockOrder.end(), [&](int64_t a, int64_t b) {
    return weights[a] != weights[b] ? weights[a] > weights[b] : a > b;
  });
}

int64_t TileScheduler::work(int64_t mBlock) const {
  KvBlockRange range =
      kvBlockRange(shape.bounds ? *shape.bounds : KeyBounds::band(shape.band),
                   mBlock * shape.rows, shape.rows, shape.gqaRatio,
                   shape.blockN, shape.seqQ, shape.seqK);
  return std::max<int64_t>(0, range.end - range.begin);
}

Task TileScheduler::taskAt(int64_t index) const {
  Task task;
  if (order == Order::Static) {
    // m_block fastest: neighbouring CTAs share K/V of one head.
    task.mBlock = index % mBlocks;
    task.headGroup = (index / mBlocks) % shape.headGroups;
    task.batch = index / (mBlocks * shape.headGroups);
    return task;
  }
  // Section by section (pairs whose K and V fit the L2), every (batch, head
  // group) of the section for one m_block together: equal work, so a wave of
  // CTAs finishes together.
  int64_t pairs = shape.batch * shape.headGroups;
  int64_t width = l2SectionPairs(shape.l2Keys, shape.seqK, pairs);
  int64_t section = index / (width * mBlocks);
  int64_t within = index % (width * mBlocks);
  int64_t first = section * width;
  int64_t inSection = std::min(width, pairs - first);
  int64_t pair = first + within % inSection;
  task.mBlock = mBlockOrder[within / inSection];
  task.headGroup = pair % shape.headGroups;
  task.batch = pair / shape.headGroups;
  return task;
}

int64_t mlir::fa4::l2SectionPairs(int64_t l2Keys, int64_t seqK, int64_t pairs) {
  if (l2Keys <= 0 || pairs <= 1)
    return std::max<int64_t>(pairs, 1);
  int64_t fit = std::max<int64_t>(1, l2Keys / std::max<int64_t>(seqK, 1));
  int64_t power = 1;
  while (power <= fit / 2)
    power *= 2;
  return std::min(power, pairs);
}

int64_t mlir::fa4::snakePosition(int64_t round, int64_t cta, int64_t gridSize,
                                 int64_t tasks) {
  int64_t start = round * gridSize;
  bool whole = start + gridSize <= tasks;
  return round % 2 == 1 && whole ? start + gridSize - 1 - cta : start + cta;
}

std::vector<Task> mlir::fa4::tasksOfCta(const TileScheduler &scheduler,
                                        int64_t cta, int64_t gridSize,
                                        bool snake) {
  std::vector<Task> tasks;
  for (int64_t index = cta, round = 0; index < scheduler.numTasks();
       index += gridSize, ++round)
    tasks.push_back(scheduler.taskAt(
        snake ? snakePosition(round, cta, gridSize, scheduler.numTasks())
              : index));
  return tasks;
}
