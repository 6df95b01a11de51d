//===- Wing.cpp - the Hopper family's schedule steps ----------------------===//
//
// The FA3-style schedule on sm_90a is one step: the warpgroup roles size
// their own K/V ring, keep S and O in registers and rescale O where it is
// held, so the pipeline, TMEM and correction steps add nothing.
//
//===----------------------------------------------------------------------===//

#include "fa4/Target/Hopper/Passes.h"
#include "fa4/Target/Wing.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;
using namespace mlir::fa4;

void mlir::fa4::hopper::addScheduleStep(StringRef name, OpPassManager &pm,
                                        const ScheduleOptions &options) {
  if (name != step::kRoles)
    return;
  FA4HopperWarpgroupRolesOptions roles;
  roles.kvStages = options.kvStages;
  roles.overlap = options.overlap;
  roles.pingpong = options.pingpong;
  pm.addNestedPass<func::FuncOp>(createFA4HopperWarpgroupRoles(roles));
}
