//===- Wing.h - what the shared pipeline asks of a chip family ---*- C++ -*-===//
//
// A family of chips (fa4/Target/Target.h's Family) is a wing: its own
// level-C schedule passes (fa4/Target/<family>/Passes.td), sized by its
// ScheduleConfig.h against its chip's row. The shared pipeline names the
// schedule's steps; each wing adds its passes for the steps it has and
// nothing for the others, so the pipeline does not branch on the chip
// (lib/Pipeline/Pipeline.cpp keeps one row per family).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TARGET_WING_H
#define FA4_TARGET_WING_H

#include "fa4/Support/Toggle.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace mlir::fa4 {

/// The pipeline's options a schedule reads.
struct ScheduleOptions {
  /// K/V stages (0: as many as shared memory holds).
  int64_t kvStages = 0;
  /// Hopper: the softmax/MMA overlap and the consumers' ping-pong.
  Toggle overlap = Toggle::Auto;
  Toggle pingpong = Toggle::Auto;
  /// Blackwell: CTA pairs (cta_group::2).
  Toggle twoCta = Toggle::Auto;
};

/// The schedule's steps, as `--stop-after` names them: the warp (or
/// warpgroup) roles, the K/V ring, the tensor-memory allocation and the
/// correction. The steps between them (barriers, the tile scheduler) are
/// shared.
namespace step {
inline constexpr llvm::StringLiteral kRoles = "warp-roles";
inline constexpr llvm::StringLiteral kPipeline = "pipeline";
inline constexpr llvm::StringLiteral kTmem = "tmem";
inline constexpr llvm::StringLiteral kCorrection = "correction";
} // namespace step

/// A wing's entry point: adds its passes for `step` to `pm` (nested on
/// each function), or nothing when the family has no such step.
using AddScheduleStep = void (*)(llvm::StringRef step, OpPassManager &pm,
                                 const ScheduleOptions &options);

namespace blackwell {
void addScheduleStep(llvm::StringRef step, OpPassManager &pm,
                     const ScheduleOptions &options);
} // namespace blackwell
namespace hopper {
void addScheduleStep(llvm::StringRef step, OpPassManager &pm,
                     const ScheduleOptions &options);
} // namespace hopper

} // namespace mlir::fa4

#endif // FA4_TARGET_WING_H
