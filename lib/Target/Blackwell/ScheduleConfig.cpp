//===- ScheduleConfig.cpp - the Blackwell schedule's configuration --------===//

#include "fa4/Target/Blackwell/ScheduleConfig.h"
#include "fa4/Target/Blackwell/Chip.h"

using namespace mlir::fa4;

llvm::ArrayRef<RoleSpec> ScheduleConfig::roles() {
  // setmaxnreg applies to a whole warpgroup, so the four single-warp roles
  // of warps 12-15 share one budget. The numbers are what ptxas needs to
  // compile every variant without a spill, re-derived for the softmax that
  // keeps a whole S row (128 registers) live: softmax fits in 176 (FA4
  // gives it 192, but then warpgroup 3 gets 48, where the MMA warp's ring
  // counters and descriptors spill, and correction 80, where its windowed
  // LPT decode spills); 88 for correction, 72 for warpgroup 3.
  // 256 x 176 + 128 x 88 + 128 x 72 = 65536.
  static const RoleSpec kRoles[] = {
      {role::kSoftmax0, 0, 4, 176},  {role::kSoftmax1, 4, 4, 176},
      {role::kCorrection, 8, 4, 88}, {role::kMma, 12, 1, 72},
      {role::kEpilogue, 13, 1, 72},  {role::kLoad, 14, 1, 72},
      {role::kIdle, 15, 1, 72},
  };
  return kRoles;
}

llvm::ArrayRef<RoleSpec> ScheduleConfig::roles(int64_t qTiles) {
  if (qTiles != 1)
    return roles();
  // One Q tile: one softmax warpgroup, correction, and warpgroup 2's
  // single-warp roles; 384 threads start with 168 registers (64 512). With
  // one softmax warpgroup it can have 256: at 240 or 248 the
  // relative-position score_mod and paged decode spilled 4-60 bytes at
  // head dim 256 (CUDA 13's ptxas), at 256 nothing but two prologue values
  // of the block-mask example, stored and reloaded once across setmaxnreg.
  // Correction normalizes O in 16-column chunks and stores them from
  // registers at head dim 256.
  // 128 x 256 + 128 x 160 + 128 x 72 = 62 464.
  static const RoleSpec kOneTile[] = {
      {role::kSoftmax0, 0, 4, 256},  {role::kCorrection, 4, 4, 160},
      {role::kMma, 8, 1, 72},        {role::kEpilogue, 9, 1, 72},
      {role::kLoad, 10, 1, 72},      {role::kIdle, 11, 1, 72},
  };
  return kOneTile;
}

llvm::ArrayRef<RoleSpec> ScheduleConfig::backwardRoles() {
  // The TMEM lanes a warp reaches are fixed by its rank in its warpgroup,
  // so each role that reads an accumulator row by row is a whole warpgroup:
  // grad (one key row per thread) and dq (one packed query row per
  // thread). Warpgroup 2 holds the single-warp roles. 384 threads start
  // with 168 registers each (64 512): 128 x 232 + 128 x 136 + 128 x 136,
  // the split at which ptxas spills nothing in 88 of 90 variants of
  // a matrix (head dims, dtypes, masks, softcap, GQA 1/4/8, the
  // deterministic order); the dq warps hold 32 columns of dQ at a time.
  static const RoleSpec kRoles[] = {
      {role::kGrad, 0, 4, 232}, {role::kDq, 4, 4, 136},
      {role::kMma, 8, 1, 136},  {role::kLoad, 9, 1, 136},
      {role::kIdle, 10, 2, 136},
  };
  return kRoles;
}

int64_t ScheduleConfig::oStages() const {
  for (int64_t stages = qTiles; stages > 0; --stages)
    if (blackwell::kSmemBytesPerCta - fixedSmemBytes(stages) >=
        2 * kvItemBytes())
      return stages;
  return 0;
}

int64_t ScheduleConfig::kvStages() const {
  int64_t ring = blackwell::kSmemBytesPerCta - fixedSmemBytes();
  return ring > 0 ? ring / kvItemBytes() : 0;
}
