//===- TileScheduler.h - which CTA takes which task, in what order -*- C++ -*-===//
//
// Plain C++ shared by the level-C op `fa4.task_coords`, the simulator and the
// unit tests: the tasks (batch, head group, m_block) of one launch and the order a
// persistent CTA walks them in.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_TILESCHEDULER_H
#define FA4_SUPPORT_TILESCHEDULER_H

#include "fa4/Support/AttentionMath.h"

#include <cstdint>
#include <vector>

namespace mlir::fa4 {

struct Task {
  int64_t batch = 0;
  int64_t headGroup = 0;
  int64_t mBlock = 0;
};

struct TaskGridShape {
  int64_t batch = 1;
  int64_t headGroups = 1;
  int64_t gqaRatio = 1;
  /// Packed rows per task (two Q tiles).
  int64_t rows = 256;
  int64_t blockN = 128;
  int64_t seqQ = 1;
  int64_t seqK = 1;
  MaskBand band;
  /// When set, the keys each query sees (the attribute mask and a
  /// mask_mod's bounds together), used instead of `band`.
  std::optional<KeyBounds> bounds;
  /// LPT: the keys of one head group's K and V the L2 holds for the order
  /// (fa4.task_coords's l2_keys; 0: one section of every pair).
  int64_t l2Keys = 0;
};

/// The sm_count of a per-task grid (fa4c --grid=per-task): a persistent
/// grid's cap no launch reaches (2^31 - 1, the largest grid x-dimension),
/// so that min(sm_count, tasks) CTAs is a CTA per task. The task loop runs
/// once per CTA and the hardware hands the CTAs, in order, to the SMs as
/// they free up: a dynamic LPT schedule where the order is heaviest first.
inline constexpr int64_t kPerTaskSmCount = (int64_t(1) << 31) - 1;

/// The L2 bytes of K and V a per-task grid's sections take by default:
/// FA4's schedulers budget 50 MiB on Hopper and Blackwell alike (the H100's
/// and H200's L2 is 50 MB).
inline constexpr int64_t kDefaultL2SectionBytes = int64_t(50) << 20;

/// The pairs of one LPT section: the largest power of two <= l2Keys / seqK
/// (at least 1), at most `pairs`; `pairs` when l2Keys is 0.
int64_t l2SectionPairs(int64_t l2Keys, int64_t seqK, int64_t pairs);

class TileScheduler {
public:
  enum class Order { Static, Lpt };

  TileScheduler(const TaskGridShape &shape, Order order);

  int64_t numMBlocks() const { return mBlocks; }
  Order getOrder() const { return order; }
  int64_t numTasks() const { return shape.batch * shape.headGroups * mBlocks; }
  /// The task at position `index` of the order, 0 <= index < numTasks().
  Task taskAt(int64_t index) const;
  /// KV blocks a task of this m_block visits: the work LPT sorts by.
  int64_t work(int64_t mBlock) const;

private:
  TaskGridShape shape;
  Order order;
  int64_t mBlocks;
  /// LPT: m_blocks heaviest first (ties: the later m_block first).
  std::vector<int64_t> mBlockOrder;
};

/// The position CTA `cta` takes in round `round` of a persistent grid of
/// `gridSize` CTAs over `tasks` positions, dealt in a snake (what
/// fa4-tile-scheduler emits for a heaviest-first order): a whole odd round
/// goes to the CTAs in reverse, every other round in order. Past the end
/// (the last round's CTAs that have none) it is >= `tasks`.
int64_t snakePosition(int64_t round, int64_t cta, int64_t gridSize,
                      int64_t tasks);

/// The tasks CTA `cta` of a persistent grid of `gridSize` CTAs takes, in
/// order: positions cta, cta + gridSize, ..., or with `snake` (what
/// fa4-tile-scheduler does with an Lpt order on Hopper) snakePosition's.
std::vector<Task> tasksOfCta(const TileScheduler &scheduler, int64_t cta,
                             int64_t gridSize, bool snake = false);

} // namespace mlir::fa4

#endif // FA4_SUPPORT_TILESCHEDULER_H
