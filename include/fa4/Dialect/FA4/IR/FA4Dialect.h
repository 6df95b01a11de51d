//===- FA4Dialect.h - the fa4 dialect and its attributes --------*- C++ -*-===//

#ifndef FA4_DIALECT_FA4_IR_FA4DIALECT_H
#define FA4_DIALECT_FA4_IR_FA4DIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "fa4/Dialect/FA4/IR/FA4OpsDialect.h.inc"

#include "fa4/Dialect/FA4/IR/FA4Enums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "fa4/Dialect/FA4/IR/FA4Attrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "fa4/Dialect/FA4/IR/FA4Types.h.inc"

#endif // FA4_DIALECT_FA4_IR_FA4DIALECT_H
