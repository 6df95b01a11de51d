//===- Passes.h - the Blackwell wing's passes -------------------*- C++ -*-===//

#ifndef FA4_TARGET_BLACKWELL_PASSES_H
#define FA4_TARGET_BLACKWELL_PASSES_H

#include "fa4/Support/Toggle.h"
#include "fa4/Target/Target.h"
#include "mlir/Pass/Pass.h"

namespace mlir::fa4 {

#define GEN_PASS_DECL
#include "fa4/Target/Blackwell/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fa4/Target/Blackwell/Passes.h.inc"

} // namespace mlir::fa4

#endif // FA4_TARGET_BLACKWELL_PASSES_H
