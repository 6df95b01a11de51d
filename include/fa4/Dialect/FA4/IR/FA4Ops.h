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

#endif // FA4_DIALECT_FA4_IR_FA4OPS_H
