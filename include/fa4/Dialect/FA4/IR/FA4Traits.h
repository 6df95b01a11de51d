//===- FA4Traits.h - ops of one chip family ---------------------*- C++ -*-===//
//
// The traits of fa4 ops that exist on one chip family only (ODS
// FA4_BlackwellOnly, FA4_HopperOnly): tensor memory and tcgen05 on
// Blackwell, wgmma on Hopper (fa4/Target/Target.h names the families).
// fa4.warp_specialize's verifier refuses a schedule holding both; the NVVM
// lowering reads a schedule's family from them.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_DIALECT_FA4_IR_FA4TRAITS_H
#define FA4_DIALECT_FA4_IR_FA4TRAITS_H

#include "fa4/Target/Target.h"
#include "mlir/IR/OpDefinition.h"

#include <optional>

namespace mlir::fa4 {

template <typename ConcreteType>
class BlackwellOnly : public OpTrait::TraitBase<ConcreteType, BlackwellOnly> {};

template <typename ConcreteType>
class HopperOnly : public OpTrait::TraitBase<ConcreteType, HopperOnly> {};

/// The family `op` belongs to, or none for an op of every family.
inline std::optional<target::Family> familyOnly(Operation *op) {
  if (op->hasTrait<BlackwellOnly>())
    return target::Family::Blackwell;
  if (op->hasTrait<HopperOnly>())
    return target::Family::Hopper;
  return std::nullopt;
}

} // namespace mlir::fa4

#endif // FA4_DIALECT_FA4_IR_FA4TRAITS_H
