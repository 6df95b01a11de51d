//===- ModProgram.h - score_mod and mask_mod regions, run per element -*- C++ -*-===//
//
// A region body compiled once into a list of scalar instructions over slots,
// then run for every (score, batch, head, query, key) it is asked about: the
// float64 reference runs it in double (the region's mathematics), the tile
// program's interpreter with every float rounded to its type (the kernel's
// arithmetic). The same region serves both, so the reference checks what the
// user wrote, not a re-implementation of each variant.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_SIM_MODPROGRAM_H
#define FA4_LIB_SIM_MODPROGRAM_H

#include "fa4/Sim/Mods.h"

#include "mlir/IR/Types.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir {
class Region;
class Operation;
} // namespace mlir

namespace mlir::fa4::sim {

/// `value` rounded to a float type as a value of that type holds it (f64
/// as it is).
double roundScalar(Type type, double value);

class ModProgram {
public:
  /// Compiles a score_mod or mask_mod body; fails naming the first op the
  /// simulator cannot run.
  static std::unique_ptr<ModProgram> compile(Region &region,
                                             std::string &error);

  /// Runs the body on its leading arguments (the score as a double, the
  /// indices as integers) with the extras' buffers bound to the trailing
  /// arguments. `rounded`: round each float result to its type.
  bool run(llvm::ArrayRef<double> leading,
           llvm::ArrayRef<const ModBuffer *> extras, bool rounded,
           double &result, std::string &error) const;

  struct Instruction;
  ~ModProgram();

private:
  ModProgram() = default;
  std::vector<Instruction> instructions;
  std::vector<Type> argumentTypes;
  int numSlots = 0;
  int resultSlot = 0;
  bool resultIsFloat = false;
};

} // namespace mlir::fa4::sim

#endif // FA4_LIB_SIM_MODPROGRAM_H
