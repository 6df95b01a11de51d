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
/// softmax, the normalization, the softcap or the score_mod. Blackwell's
/// schedule and lowering, which do not build FP8 yet, refuse such a
/// function.
bool holdsFp8Pieces(Operation *func);
/// Whether the schedule of `func` runs as CTA pairs (Blackwell's
/// `cta_pair`) without a causal mask, a window, a mask_mod or a block mask
/// on any key block range: FA4's 2-CTA kernel, what two-cta=auto picks. Its
/// softmax and correction have the registers for the pair's own choices
/// (a larger exp2 share, wider rescale chunks); a masked pair's do not.
bool runsAsDensePairs(Operation *func);
/// Whether `func` holds a score_mod region (fa4.score_mod) anywhere.
bool holdsScoreMod(Operation *func);
/// The rules an FP8 program (level B or C) keeps beyond each op's own:
/// one prob_shift for every softmax and normalization (the sums carry the
/// shift the LSE takes off); at level C, an 8-bit shared-memory tile is one
/// 128-byte swizzle line a row (128 columns), and an 8-bit V stage (the
/// value MMA's, V transposed) is filled by transposed loads only (without
/// rows to clear), which fill nothing else. Errors on the offending op.
LogicalResult verifyFp8Program(Operation *func);
} // namespace mlir::fa4

#endif // FA4_DIALECT_FA4_IR_FA4OPS_H
