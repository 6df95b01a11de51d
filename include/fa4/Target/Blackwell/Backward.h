//===- Backward.h - the backward's Blackwell schedule ------------*- C++ -*-===//
//
// fa4-assign-warp-roles' second entry: a function holding the backward tile
// program (fa4.backward_spec) to its level-C schedule on sm_100a
// (lib/Target/Blackwell/AssignBackwardRoles.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TARGET_BLACKWELL_BACKWARD_H
#define FA4_TARGET_BLACKWELL_BACKWARD_H

#include "mlir/Support/LLVM.h"

namespace mlir {
namespace func {
class FuncOp;
} // namespace func

namespace fa4::blackwell {

/// Replaces the backward tile program of `func` with its Blackwell
/// schedule: fa4.prepare_backward, the warp-specialized main kernel and
/// fa4.finish_dq. Failure, after an error naming `pass`, for a variant the
/// schedule does not run.
LogicalResult scheduleBackward(func::FuncOp func, StringRef pass);

} // namespace fa4::blackwell
} // namespace mlir

#endif // FA4_TARGET_BLACKWELL_BACKWARD_H
