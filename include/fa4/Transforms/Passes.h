//===- Passes.h - fa4 passes and pipelines ----------------------*- C++ -*-===//

#ifndef FA4_TRANSFORMS_PASSES_H
#define FA4_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "fa4/Support/Toggle.h"
#include "fa4/Target/Target.h"


namespace mlir {
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace mlir::fa4 {

#define GEN_PASS_DECL
#include "fa4/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fa4/Transforms/Passes.h.inc"

} // namespace mlir::fa4

#endif // FA4_TRANSFORMS_PASSES_H
