//===- Backward.h - the backward's Hopper schedule ---------------*- C++ -*-===//
//
// fa4-hopper-warpgroup-roles' second entry: a function holding the backward
// tile program (fa4.backward_spec) to its level-C schedule
// (lib/Target/Hopper/AssignBackwardRoles.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TARGET_HOPPER_BACKWARD_H
#define FA4_TARGET_HOPPER_BACKWARD_H

#include "mlir/Support/LLVM.h"

namespace mlir {
namespace func {
class FuncOp;
} // namespace func

namespace fa4::hopper {

/// Replaces the backward tile program of `func` with its Hopper schedule:
/// fa4.prepare_backward, the warp-specialized main kernel and
/// fa4.finish_dq. Failure, after an error naming `pass`, for a variant the
/// schedule does not run.
LogicalResult scheduleBackward(func::FuncOp func, StringRef pass);

} // namespace fa4::hopper
} // namespace mlir

#endif // FA4_TARGET_HOPPER_BACKWARD_H
