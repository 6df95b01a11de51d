//===- ScheduleConfig.cpp - the Blackwell schedule's configuration --------===//

#include "fa4/Transforms/ScheduleConfig.h"
#include "fa4/Support/Blackwell.h"

using namespace mlir::fa4;

llvm::ArrayRef<RoleSpec> ScheduleConfig::roles() {
  // Softmax holds a 128-column row of S in registers and needs the most;
  // correction moves 16-column chunks; the single-thread issuers need little.
  // 256 x 192 + 128 x 80 + 128 x 48 = 65536.
  static const RoleSpec kRoles[] = {
      {role::kSoftmax0, 0, 4, 192},  {role::kSoftmax1, 4, 4, 192},
      {role::kCorrection, 8, 4, 80}, {role::kMma, 12, 1, 48},
      {role::kEpilogue, 13, 1, 48},  {role::kLoad, 14, 1, 48},
      {role::kIdle, 15, 1, 48},
  };
  return kRoles;
}

int64_t ScheduleConfig::kvStages() const {
  return (blackwell::kSmemBytesPerCta - fixedSmemBytes()) / tileBytes();
}
