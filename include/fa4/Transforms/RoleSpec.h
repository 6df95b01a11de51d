//===- RoleSpec.h - a role of a level-C schedule ----------------*- C++ -*-===//
//
// What every family's schedule says of each of its roles: its name, its
// warps and the registers `setmaxnreg` gives each of its threads. The
// wings' ScheduleConfig.h list their casts (fa4/Target/<family>/).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TRANSFORMS_ROLESPEC_H
#define FA4_TRANSFORMS_ROLESPEC_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace mlir::fa4 {

struct RoleSpec {
  llvm::StringRef name;
  int64_t firstWarp;
  int64_t numWarps;
  int64_t registers;
};

} // namespace mlir::fa4

#endif // FA4_TRANSFORMS_ROLESPEC_H
