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
  // Every (batch, head group) of one m_block together: equal work, so a wave of
  // CTAs finishes together.
  int64_t heads = shape.batch * shape.headGroups;
  task.mBlock = mBlockOrder[index / heads];
  task.headGroup = (index % heads) % shape.headGroups;
  task.batch = (index % heads) / shape.headGroups;
  return task;
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
