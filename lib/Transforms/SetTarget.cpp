//===- SetTarget.cpp - record the module's chip ---------------------------===//
//
// The pipeline's first step: `fa4.target` on the module, which every
// chip-dependent pass reads (fa4/Dialect/FA4/IR/FA4Dialect.h).
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4SETTARGET
#include "fa4/Transforms/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {
struct SetTargetPass : public fa4::impl::FA4SetTargetBase<SetTargetPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const target::ChipInfo *chipInfo = target::lookup(chip);
    if (!chipInfo) {
      module.emitError() << "fa4-set-target: "
                         << target::unknownChipMessage(chip);
      return signalPassFailure();
    }
    if (auto named = module->getAttrOfType<TargetAttr>(kTargetAttrName)) {
      if (named.getChip() == chipInfo->chip)
        return;
      module.emitError() << "the module is compiled for "
                         << named.getInfo().name << " (its '"
                         << kTargetAttrName << "') but the target asked for is "
                         << chipInfo->name
                         << "; drop the attribute or compile for "
                         << named.getInfo().name;
      return signalPassFailure();
    }
    module->setAttr(kTargetAttrName,
                    TargetAttr::get(&getContext(), chipInfo->chip));
  }
};
} // namespace
