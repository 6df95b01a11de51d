//===- HoistedConstants.h - a program's constants, made once ----*- C++ -*-===//
//
// The constants a tile-program builder needs, made once each and ahead of
// the program it builds, whichever loop asks for them first. Internal to
// lib/Transforms.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_TRANSFORMS_HOISTEDCONSTANTS_H
#define FA4_LIB_TRANSFORMS_HOISTEDCONSTANTS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/bit.h"

namespace mlir::fa4 {

class HoistedConstants {
public:
  /// Constants go before `anchor` (the op the program replaces), so they
  /// precede every op built after them.
  explicit HoistedConstants(Operation *anchor)
      : builder(anchor), loc(anchor->getLoc()) {
    auto zero = arith::ConstantIndexOp::create(builder, loc, 0);
    indices[0] = zero;
    builder.setInsertionPoint(zero);
  }

  Value index(int64_t value) {
    Value &constant = indices[value];
    if (!constant)
      constant = arith::ConstantIndexOp::create(builder, loc, value);
    return constant;
  }
  /// A tensor of `type` filled with `value`.
  Value splat(RankedTensorType type, float value) {
    Value &constant = splats[{type, llvm::bit_cast<uint32_t>(value)}];
    if (!constant)
      constant = arith::ConstantOp::create(builder, loc,
                                           DenseElementsAttr::get(type, value));
    return constant;
  }

private:
  OpBuilder builder;
  Location loc;
  llvm::SmallDenseMap<int64_t, Value> indices;
  llvm::DenseMap<std::pair<Type, uint32_t>, Value> splats;
};

} // namespace mlir::fa4

#endif // FA4_LIB_TRANSFORMS_HOISTEDCONSTANTS_H
