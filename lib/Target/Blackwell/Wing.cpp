//===- Wing.cpp - the Blackwell family's schedule steps -------------------===//
//
// FA4's schedule on sm_100a: the warp roles, the K/V pipeline, the TMEM
// allocation and the correction, each a step of the shared pipeline.
//
//===----------------------------------------------------------------------===//

#include "fa4/Target/Blackwell/Passes.h"
#include "fa4/Target/Wing.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;
using namespace mlir::fa4;

void mlir::fa4::blackwell::addScheduleStep(StringRef name, OpPassManager &pm,
                                           const ScheduleOptions &options) {
  if (name == step::kRoles) {
    FA4AssignWarpRolesOptions roles;
    roles.twoCta = options.twoCta;
    pm.addNestedPass<func::FuncOp>(createFA4AssignWarpRoles(roles));
  } else if (name == step::kPipeline) {
    FA4PipelineStagesOptions stages;
    stages.kvStages = options.kvStages;
    pm.addNestedPass<func::FuncOp>(createFA4PipelineStages(stages));
  } else if (name == step::kTmem) {
    pm.addNestedPass<func::FuncOp>(createFA4NamedHandoffs());
    pm.addNestedPass<func::FuncOp>(createFA4AllocateTmem());
  } else if (name == step::kCorrection) {
    pm.addNestedPass<func::FuncOp>(createFA4ExpandCorrection());
  }
}
