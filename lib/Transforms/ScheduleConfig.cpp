//===- ScheduleConfig.cpp - the Blackwell schedule's configuration --------===//

#include "fa4/Transforms/ScheduleConfig.h"
#include "fa4/Support/Blackwell.h"

using namespace mlir::fa4;

llvm::ArrayRef<RoleSpec> ScheduleConfig::roles() {
  // Softmax works on rows of S and needs the most; correction moves
  // 16-column chunks; the single-thread issuers need little, the MMA warp a
  // little more (its ring counters and descriptors: ptxas spills it below
  // 72), paid for by the idle warp's minimum.
  // 256 x 192 + 128 x 80 + 32 x (72 + 48 + 48 + 24) = 65536.
  static const RoleSpec kRoles[] = {
      {role::kSoftmax0, 0, 4, 192},  {role::kSoftmax1, 4, 4, 192},
      {role::kCorrection, 8, 4, 80}, {role::kMma, 12, 1, 72},
      {role::kEpilogue, 13, 1, 48},  {role::kLoad, 14, 1, 48},
      {role::kIdle, 15, 1, 24},
  };
  return kRoles;
}

int64_t ScheduleConfig::kvStages() const {
  return (blackwell::kSmemBytesPerCta - fixedSmemBytes()) / tileBytes();
}
