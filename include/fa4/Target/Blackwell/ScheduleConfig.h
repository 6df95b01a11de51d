//===- ScheduleConfig.h - the Blackwell schedule's configuration -*- C++ -*-===//
//
// Decided once, from the head dim and element type: the warp roles and their
// register budgets, the stage counts that fit the shared-memory budget, and
// the TMEM layout. The level-C passes read it; the unit tests pin it.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TARGET_BLACKWELL_SCHEDULECONFIG_H
#define FA4_TARGET_BLACKWELL_SCHEDULECONFIG_H

#include "fa4/Transforms/RoleSpec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace mlir::fa4 {

/// Role names, as the IR and the simulator's reports spell them.
namespace role {
constexpr llvm::StringLiteral kSoftmax0 = "softmax0";
constexpr llvm::StringLiteral kSoftmax1 = "softmax1";
constexpr llvm::StringLiteral kCorrection = "correction";
constexpr llvm::StringLiteral kMma = "mma";
constexpr llvm::StringLiteral kEpilogue = "epilogue";
constexpr llvm::StringLiteral kLoad = "load";
constexpr llvm::StringLiteral kIdle = "idle";
/// The backward's: the softmax gradient (Pᵀ, dSᵀ, then dK and dV out) and
/// dQ's reduction into the f32 accumulator.
constexpr llvm::StringLiteral kGrad = "grad";
constexpr llvm::StringLiteral kDq = "dq";
} // namespace role

struct ScheduleConfig {
  /// Q tiles in flight: two, so one tile's softmax runs under the other's
  /// MMAs (FA4's); one where two tiles' S and O outgrow TMEM (head dim
  /// 256), whose S is then double-buffered over KV blocks instead.
  static constexpr int64_t kQStages = 2;
  /// The Q tiles a task computes at these head dims: two up to 192, one
  /// past it (two Q tiles' S and O would take 2 x 128 + 2 x 256 = 768 of
  /// 512 TMEM columns at V's 256, and two 64 KB Q stages leave the K/V ring
  /// one item at Q's 256). target::defaultQTilesPerTask reads it.
  static constexpr int64_t qTilesFor(int64_t headDim, int64_t valueHeadDim) {
    return headDim > 192 || valueHeadDim > 192 ? 1 : kQStages;
  }
  /// Columns of O the correction role rescales per TMEM round trip (one
  /// tcgen05.ld and one tcgen05.wait::ld each, which ptxas turns into a
  /// NOP): 16 where the correction's 88 registers hold a task's bounds
  /// beside the chunk; 32 in a dense CTA pair (runsAsDensePairs: FA4's
  /// 2-CTA kernel), whose rescale of a task's two tiles then takes 176
  /// instructions against 200 at 16 (FA4's: 185). At 32 the causal and
  /// window kernels at head dims 96 and 128, one CTA or two, spill 4 bytes.
  static constexpr int64_t kRescaleChunk = 16;
  static constexpr int64_t kPairRescaleChunk = 32;
  /// Columns of O the final normalization moves per round trip.
  static constexpr int64_t kNormalizeChunk = 16;
  /// Shared memory kept for the mbarriers.
  static constexpr int64_t kBarrierBytes = 1024;

  /// Q and K's head dim, and V and O's.
  int64_t headDim = 128;
  int64_t valueHeadDim = 128;
  int64_t elementBytes = 2;
  /// O's element (FP8's Q, K and V are one byte, its O two).
  int64_t outElementBytes = 2;
  /// Q tiles a task (and Q stages, statistics buffers, O accumulators): 1
  /// or 2.
  int64_t qTiles = kQStages;
  /// CTA pairs (cta_group::2): each CTA holds half of every K/V item.
  bool ctaPair = false;

  /// The FA4 cast: 16 warps, 512 threads, 64 K registers exactly.
  static llvm::ArrayRef<RoleSpec> roles();
  /// The cast of a schedule of `qTiles` Q tiles a task: roles() for two;
  /// for one, 12 warps (one softmax warpgroup, correction, and the
  /// single-warp roles).
  static llvm::ArrayRef<RoleSpec> roles(int64_t qTiles);

  /// The backward's cast (lib/Target/Blackwell/AssignBackwardRoles.cpp):
  /// 12 warps, 384 threads.
  static llvm::ArrayRef<RoleSpec> backwardRoles();
  /// Packed query rows per backward step (the N of Sᵀ, the M of dQ) and the
  /// columns of Sᵀ and dPᵀ the gradient warps take per TMEM round trip.
  static constexpr int64_t kBackwardStep = 128;
  static constexpr int64_t kGradChunk = 32;

  /// One [128, cols] tile, its rows padded to whole 128-byte swizzle lines
  /// (head dim 96 takes the room of 128).
  int64_t tileBytes(int64_t cols) const { return tileBytes(cols, elementBytes); }
  static int64_t tileBytes(int64_t cols, int64_t bytes) {
    return 128 * ((cols * bytes + 127) / 128 * 128);
  }
  /// A K/V ring item in a CTA's shared memory: K and V share the ring, so
  /// an item holds the wider; a pair's CTAs hold half an item each.
  int64_t kvItemBytes() const {
    int64_t item = tileBytes(headDim > valueHeadDim ? headDim : valueHeadDim);
    return ctaPair ? item / 2 : item;
  }
  /// Row statistics handed from a softmax role to correction: [2, 128] f32.
  static constexpr int64_t kStatsBytes = 2 * 128 * 4;
  /// Everything but the K/V ring with `oStages` O staging stages: Q stages,
  /// O staging, statistics, barriers.
  int64_t fixedSmemBytes(int64_t oStages) const {
    return qTiles * tileBytes(headDim) +
           oStages * tileBytes(valueHeadDim, outElementBytes) +
           qTiles * kStatsBytes + kBarrierBytes;
  }
  /// O staging stages: one per Q tile, unless that leaves the K/V ring
  /// fewer than two stages (head dims (192, 128): 96 KB of Q, whose two O
  /// tiles then go out through one stage, the second tile's epilogue
  /// waiting for the first one's store); none where even one stage would
  /// (head dim 256: 64 KB of Q and two 64 KB K/V stages leave 33 KB, and O
  /// is 64 KB), and the correction warps then store O from registers.
  int64_t oStages() const;
  int64_t fixedSmemBytes() const { return fixedSmemBytes(oStages()); }
  /// As many K/V stages as the rest of the 227 KB holds (3 for head dim 128
  /// in 16-bit types, 2 for (192, 128)).
  int64_t kvStages() const;
  int64_t smemBytes() const {
    return fixedSmemBytes() + kvStages() * kvItemBytes();
  }

  /// TMEM columns: S0, S1 (128 f32 each), then O0, O1 (V's head dim each).
  int64_t scoreColumns() const { return 128; }
  int64_t accColumns() const { return valueHeadDim; }

  /// `outElementBytes` 0: O's element is the inputs' (FP8 passes 2).
  /// `qTiles` 0: qTilesFor's at these head dims.
  static ScheduleConfig get(int64_t headDim, int64_t elementBytes,
                            int64_t valueHeadDim = 0,
                            int64_t outElementBytes = 0, int64_t qTiles = 0) {
    ScheduleConfig config;
    config.headDim = headDim;
    config.valueHeadDim = valueHeadDim > 0 ? valueHeadDim : headDim;
    config.elementBytes = elementBytes;
    config.outElementBytes =
        outElementBytes > 0 ? outElementBytes : elementBytes;
    config.qTiles =
        qTiles > 0 ? qTiles : qTilesFor(headDim, config.valueHeadDim);
    return config;
  }
};

} // namespace mlir::fa4

#endif // FA4_TARGET_BLACKWELL_SCHEDULECONFIG_H
