//===- InitFA4.h - the dialects fa4's tools load ----------------*- C++ -*-===//

#ifndef FA4_INITFA4_H
#define FA4_INITFA4_H

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"

namespace mlir::fa4 {

/// The dialects of fa4's target-neutral levels (A and B).
inline void registerTileLevelDialects(DialectRegistry &registry) {
  registry.insert<FA4Dialect, arith::ArithDialect, func::FuncDialect,
                  math::MathDialect, memref::MemRefDialect, scf::SCFDialect,
                  tensor::TensorDialect>();
}

} // namespace mlir::fa4

#endif // FA4_INITFA4_H
