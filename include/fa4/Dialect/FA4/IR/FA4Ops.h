//===- FA4Ops.h - fa4 operations --------------------------------*- C++ -*-===//

#ifndef FA4_DIALECT_FA4_IR_FA4OPS_H
#define FA4_DIALECT_FA4_IR_FA4OPS_H

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Dialect/FA4/IR/FA4Traits.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "fa4/Dialect/FA4/IR/FA4Ops.h.inc"

namespace mlir::fa4 {
/// Whether the function `func` holds FP8's pieces anywhere: e4m3 among its
/// arguments' element types, descale tables in its fa4.spec,
/// fa4.load_descale, or the run-time factors and prob_shift of the
/// softmax, the normalization, the softcap or the score_mod. The schedules
/// and fa4-to-nvvm, which do not build FP8 yet, refuse such a function.
bool holdsFp8Pieces(Operation *func);
} // namespace mlir::fa4

#endif // FA4_DIALECT_FA4_IR_FA4OPS_H
