//===- BackwardSchedule.h - what both backward schedules share ---*- C++ -*-===//
//
// The families' level-B -> level-C passes for fa4.attention_backward
// (lib/Target/Hopper/AssignBackwardRoles.cpp,
// lib/Target/Blackwell/AssignBackwardRoles.cpp) build the same three steps
// around different main kernels: fa4.prepare_backward, the warp-specialized
// kernel, fa4.finish_dq. They walk the same tasks (batch, K/V head, 128
// keys), the same steps (each head group's query blocks that see the task's
// keys) and recompute the same pointwise chain on transposed tiles (rows
// keys, columns packed query rows), cloned from the tile program's ops so
// the schedule computes what level B did. Internal to the wings.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TRANSFORMS_BACKWARDSCHEDULE_H
#define FA4_TRANSFORMS_BACKWARDSCHEDULE_H

#include "fa4/Transforms/RoleSpec.h"
#include "fa4/Transforms/TileProgram.h"

#include "mlir/IR/IRMapping.h"

namespace mlir::fa4 {

/// The level-B ops a backward schedule clones: their attributes and
/// regions are the variant's.
struct BackwardTemplates {
  QBlockRangeOp range;
  MaskOp mask;                 // null without a mask
  SoftcapOp softcap;           // null without a softcap
  ScoreModOp scoreMod;         // null without a score_mod
  ProbsFromLseOp probs;
  SoftmaxGradOp softmaxGrad;
  SoftcapGradOp softcapGrad;   // null without a softcap
  ScoreModGradOp scoreModGrad; // null without a score_mod

  /// The templates of `func`'s backward tile program, or failure after an
  /// error naming `pass` (no tile program, already scheduled, Q or K
  /// without static heads and head dim).
  static FailureOr<BackwardTemplates> read(func::FuncOp func, StringRef pass,
                                           StringRef family);
};

/// One role's view of a task: its coordinates and ring counts.
struct BackwardTask {
  Value batch, kvHead, col;
  /// Tasks this CTA took before this one, and query steps before the task's
  /// first.
  Value taskCount, stepBase;
};

class BackwardScheduleBuilder : protected IndexBuilder {
protected:
  /// Steps of `stepRows` packed query rows; `family` names the schedule in
  /// refusals.
  BackwardScheduleBuilder(func::FuncOp func, BackwardSpecAttr spec,
                          BackwardTemplates templates, int64_t stepRows,
                          StringRef family)
      : IndexBuilder(func), spec(spec), t(templates), stepRows(stepRows),
        family(family) {}

  /// One step: its head group, first packed row, query block, the group's
  /// block range and the step's ring item.
  struct Step {
    Value head, row, block;
    QBlockRangeOp range;
    Value item;
  };
  /// The chain's values on one transposed tile: the raw scores, after the
  /// softcap or score_mod, and with the mask applied.
  struct Scores {
    Value raw, scores, visible;
  };

  /// Reads the sizes, checks the packing against the step, builds the
  /// problem's sizes and fa4.prepare_backward at the top of the body.
  LogicalResult begin();
  /// fa4.finish_dq, and the tile program erased.
  void end();

  Value argument(BackwardArgument role) {
    return func.getArgument(spec.getArguments()[role]);
  }
  RankedTensorType tile(int64_t rows, int64_t cols, Type elementType) {
    return RankedTensorType::get({rows, cols}, elementType);
  }
  Value smem(StringRef name, int64_t rows, int64_t cols, Type elementType,
             int64_t stages);

  /// A role's loop over its tasks, carrying the task and step counts;
  /// `body` returns the steps the task took. In the deterministic order
  /// the loop is over (batch, K/V head) pairs, each pair's K/V blocks
  /// walked in ascending order inside.
  scf::ForOp buildTaskLoop(function_ref<Value(BackwardTask &)> body);
  /// For each head group of the task's K/V head and each of its query
  /// blocks that sees the task's keys, ascending: `step`, carrying `init`
  /// (ring items count on from `task.stepBase`). Returns the steps taken,
  /// then the carried values.
  SmallVector<Value>
  forEachStep(const BackwardTask &task, ValueRange init,
              function_ref<SmallVector<Value>(const Step &, ValueRange)> step);

  /// The main kernel's fa4.warp_specialize with one fa4.role per entry of
  /// `roles`, `body` building each role's program at the start of its block.
  void buildRoles(ArrayRef<RoleSpec> roles,
                  function_ref<void(const RoleSpec &, RoleOp)> body);

  /// The loading role's loop over its tasks: per task K and V once (ring
  /// item: the task count), then Q and dO for every step into their
  /// two-stage rings, with TMA, and, with a `stats` ring ([2, stepRows]
  /// f32, two stages), the step's LSE and delta into its rows 0 and 1;
  /// then its tail, every stage acquired once more, so that no hand-off of
  /// the CTA is in flight when it exits.
  void buildLoader(Value k, Value v, Value q, Value dout,
                   Value stats = Value());

  /// Op `op` cloned with `mapping`, transposed, its result `type`.
  Operation *cloneTransposed(Operation *op, IRMapping &mapping, Type type);
  /// The scores of the transposed tile `raw` (keys from `keyBegin`, packed
  /// rows from `rowBegin`) through the softcap or score_mod and the mask,
  /// which only steps straddling the band's edges pay for.
  Scores modScores(Value raw, const BackwardTask &task, const Step &at,
                   Value keyBegin, Value rowBegin);
  /// Pᵀ of the visible scores from the LSE along the columns.
  Value probs(const Scores &scores, Value lse);
  /// dSᵀ = Pᵀ ∘ (dPᵀ − delta), back through the softcap or score_mod.
  Value gradient(const Scores &scores, Value probs, Value dprobs, Value delta,
                 const BackwardTask &task, const Step &at, Value keyBegin,
                 Value rowBegin);

  BackwardSpecAttr spec;
  BackwardTemplates t;
  int64_t stepRows;
  StringRef family;
  Value batches, seqQ, seqK, numTasks, nBlocks;
  int64_t kvHeads = 1, groupsPerKv = 1, packing = 1, headDim = 0;
  Type element;

private:
  /// Maps a mod's place operands: packed rows from `rowBegin`, keys from
  /// `keyBegin`.
  void place(IRMapping &mapping, Value rowOf, Value colOf, Value seqQOf,
             Value seqKOf, Value rowBegin, Value keyBegin);
  SmallVector<Operation *> levelB;
};

} // namespace mlir::fa4

#endif // FA4_TRANSFORMS_BACKWARDSCHEDULE_H
