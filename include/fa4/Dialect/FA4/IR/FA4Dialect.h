//===- FA4Dialect.h - the fa4 dialect and its attributes --------*- C++ -*-===//

#ifndef FA4_DIALECT_FA4_IR_FA4DIALECT_H
#define FA4_DIALECT_FA4_IR_FA4DIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "fa4/Target/Target.h"

#include "fa4/Dialect/FA4/IR/FA4OpsDialect.h.inc"

#include "fa4/Dialect/FA4/IR/FA4Enums.h.inc"

namespace mlir {
class AsmParser;
namespace fa4::detail {
/// The custom parameter parsers of FA4Attrs.td: an f32 (a float literal that
/// f32 holds) and a flag (`true` / `false`).
FailureOr<llvm::APFloat> parseF32Field(AsmParser &parser);
FailureOr<bool> parseBoolField(AsmParser &parser);
} // namespace fa4::detail
} // namespace mlir

#define GET_ATTRDEF_CLASSES
#include "fa4/Dialect/FA4/IR/FA4Attrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "fa4/Dialect/FA4/IR/FA4Types.h.inc"

namespace mlir::fa4 {
/// The module attribute that records the chip: `fa4.target =
/// #fa4.target<sm_100a>`.
inline constexpr llvm::StringLiteral kTargetAttrName = "fa4.target";

/// The function attribute that records a tiled kernel's variant: `fa4.spec =
/// #fa4.spec<...>` (KernelSpecAttr), written by fa4-tile.
inline constexpr llvm::StringLiteral kSpecAttrName = "fa4.spec";

/// The attribute fa4-tile-scheduler writes on fa4.warp_specialize: `fa4.grid =
/// #fa4.grid<...>`.
inline constexpr llvm::StringLiteral kGridAttrName = "fa4.grid";

/// The attribute a schedule puts on a task loop whose positions are
/// ordered by `fa4.task_order = #fa4.task_order<lpt>` (the backward's masked
/// tasks, heaviest first): fa4-tile-scheduler deals them out in a snake.
inline constexpr llvm::StringLiteral kTaskOrderAttrName = "fa4.task_order";

/// The attribute fa4-to-nvvm writes on the kernel's llvm.func: `fa4.launch =
/// #fa4.launch<...>`, the manifest's source.
inline constexpr llvm::StringLiteral kLaunchAttrName = "fa4.launch";
/// The backward's (three kernels, one manifest of kind "backward"): a
/// dictionary on its main kernel's llvm.func (fa4-to-nvvm), the source of
/// its manifest (fa4/Runtime/Backward.h).
inline constexpr llvm::StringLiteral kBackwardLaunchAttrName =
    "fa4.backward_launch";
/// The schedule's mbarriers (an array of #fa4.barrier) and TMEM allocation
/// (#fa4.tmem_layout), on its fa4.warp_specialize.
inline constexpr llvm::StringLiteral kBarriersAttrName = "fa4.barriers";
inline constexpr llvm::StringLiteral kTmemAttrName = "fa4.tmem";

/// `op`'s `fa4.spec`, or null when it has none (a function that is not a
/// tiled kernel).
KernelSpecAttr getKernelSpec(Operation *op);

/// The function attribute that records a tiled backward kernel's variant:
/// `fa4.backward_spec = #fa4.backward_spec<...>`, written by fa4-tile.
inline constexpr llvm::StringLiteral kBackwardSpecAttrName = "fa4.backward_spec";
/// Positions of the backward's tensors among its spec's `arguments`.
enum BackwardArgument {
  kBwdQ, kBwdK, kBwdV, kBwdOut, kBwdDout, kBwdLse, kBwdDq, kBwdDk, kBwdDv,
  kBwdDelta, kBwdDqAccum
};
inline constexpr size_t kBackwardArguments = 11;
/// `op`'s `fa4.backward_spec`, or null when it has none.
BackwardSpecAttr getBackwardSpec(Operation *op);
/// The spec against its function: every position a memref argument, the
/// tensors of one attention's gradients.
LogicalResult verifyBackwardSpecOn(Operation *op, BackwardSpecAttr spec);

/// The tables of `func`'s spec against its ops: every K or V tile load and
/// TMA copy reads through the spec's block table (`pages(...)`) when it has
/// one and never otherwise, and `fa4.sequence_length` reads only the spec's
/// seqused_k table. An error on the first op that disagrees.
LogicalResult verifyTablesAgainstSpec(Operation *func, KernelSpecAttr spec,
                                      Value key, Value value);

/// The chip named by the `fa4.target` of `op`'s module (`op` itself when it
/// is one), or null when no enclosing module names one.
const target::ChipInfo *getModuleTarget(Operation *op);

/// The chip a pass works for: the module's `fa4.target` when it has one,
/// else the table's default. A pass of one family's schedule calls
/// `checkModuleFamily` first, which reports a module that names another
/// family's chip on `op` (naming `pass`) and fails; a module that names no
/// chip passes.
const target::ChipInfo &getTargetOrDefault(Operation *op);
LogicalResult checkModuleFamily(Operation *op, target::Family family,
                                llvm::StringRef pass);
} // namespace mlir::fa4

#endif // FA4_DIALECT_FA4_IR_FA4DIALECT_H
