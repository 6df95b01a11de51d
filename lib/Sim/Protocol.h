//===- Protocol.h - level C on the CPU: roles, mbarriers, async ops -*- C++ -*-===//
//
// Runs one CTA of a level-C kernel: each role its own thread of control, one
// running at a time in an order drawn from a seed; TMA copies and tensor-core
// ops complete at random later points, or as late as they may (tensor-core
// ops in issue order per issuing thread). Tracks the happens-before order that barriers create with
// vector clocks and reports accesses to SMEM/TMEM that it does not order,
// barrier misuse and deadlocks.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_SIM_PROTOCOL_H
#define FA4_LIB_SIM_PROTOCOL_H

#include "Interpreter.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::fa4 {
class WarpSpecializeOp;
} // namespace mlir::fa4

namespace mlir::fa4::sim {

struct ProtocolReport {
  /// Empty without a deadlock; otherwise one line per blocked role.
  std::vector<std::string> deadlock;
  std::vector<std::string> hazards;
  int64_t hazardCount = 0;
  std::vector<std::string> misuse;
  std::map<std::string, int64_t> mmasIssued;
  int64_t oRescalesDone = 0;
  int64_t oRescalesSkipped = 0;
  bool clean() const {
    return deadlock.empty() && hazardCount == 0 && misuse.empty();
  }
  void addHazard(std::string text);
  void addMisuse(std::string text);
};

/// Runs `op` for one CTA with the values `parent` has bound; every role gets
/// a copy of them. With `lateCompletions`, asynchronous work completes only
/// when no role can run — the last moment the hardware may take, where a
/// missing wait shows; otherwise at random points. Returns false with `error`
/// when an op cannot be run.
bool runCta(Interpreter &parent, WarpSpecializeOp op, uint64_t scheduleSeed,
            bool lateCompletions, ProtocolReport &report,
            InterpreterStats &stats, std::string &error);

/// Level C at function scope, run once per CTA of the grid (CTA 0 first):
/// the buffers and barriers are the CTA's (its run sets them up), the
/// warp-specialize op is one CTA's run (runCta), and the backward's
/// grid-wide steps run once per launch: fa4.prepare_backward in the first
/// CTA's run (before any CTA's warp-specialize op), fa4.finish_dq in the
/// last one's (after every CTA's). The grid is min(sm_count, tasks), the
/// tasks `numTasks` where given, else the interpreter's (fa4.task_count's).
class LaunchHook : public OpHook {
public:
  LaunchHook(ProtocolReport &report, InterpreterStats &stats, uint64_t seed,
             bool lateCompletions, std::optional<int64_t> numTasks = {})
      : report(report), stats(stats), seed(seed),
        lateCompletions(lateCompletions), numTasks(numTasks) {}

  bool execute(Interpreter &interpreter, Operation *op,
               std::string &error) override;

  int64_t ctaId = 0;
  int64_t gridSize = 1;

private:
  ProtocolReport &report;
  InterpreterStats &stats;
  uint64_t seed;
  bool lateCompletions;
  std::optional<int64_t> numTasks;
};

} // namespace mlir::fa4::sim

#endif // FA4_LIB_SIM_PROTOCOL_H
