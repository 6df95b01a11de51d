//===- ScheduleConfig.cpp - the Blackwell schedule's configuration --------===//

#include "fa4/Transforms/ScheduleConfig.h"
#include "fa4/Support/Blackwell.h"

using namespace mlir::fa4;

llvm::ArrayRef<RoleSpec> ScheduleConfig::roles() {
  // Softmax works on rows of S and needs the most; correction moves
  // 16-column chunks; the single-thread issuers need little. The numbers are
  // what ptxas needs to compile every variant without a spill: the MMA warp
  // carries ring counters and descriptors (72), correction and the windowed
  // LPT decode (88), the TMA issuers their task decode and addresses (56);
  // softmax reads S in 32-column chunks and fits in 184.
  // 256 x 184 + 128 x 88 + 32 x (72 + 56 + 56 + 24) = 65024 <= 65536.
  static const RoleSpec kRoles[] = {
      {role::kSoftmax0, 0, 4, 184},  {role::kSoftmax1, 4, 4, 184},
      {role::kCorrection, 8, 4, 88}, {role::kMma, 12, 1, 72},
      {role::kEpilogue, 13, 1, 56},  {role::kLoad, 14, 1, 56},
      {role::kIdle, 15, 1, 24},
  };
  return kRoles;
}

int64_t ScheduleConfig::kvStages() const {
  return (blackwell::kSmemBytesPerCta - fixedSmemBytes()) / tileBytes();
}
