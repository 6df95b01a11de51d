//===- Passes.h - fa4 conversions -------------------------------*- C++ -*-===//

#ifndef FA4_CONVERSION_PASSES_H
#define FA4_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"
#include "fa4/Target/Target.h"

namespace mlir {
class ModuleOp;
namespace LLVM {
class LLVMDialect;
} // namespace LLVM
namespace NVVM {
class NVVMDialect;
} // namespace NVVM
namespace gpu {
class GPUDialect;
} // namespace gpu
namespace vector {
class VectorDialect;
} // namespace vector
namespace scf {
class SCFDialect;
} // namespace scf
namespace arith {
class ArithDialect;
} // namespace arith
} // namespace mlir

namespace mlir::fa4 {

#define GEN_PASS_DECL
#include "fa4/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fa4/Conversion/Passes.h.inc"

} // namespace mlir::fa4

#endif // FA4_CONVERSION_PASSES_H
