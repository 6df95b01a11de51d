//===- Verify.h - checks fa4.attention and #fa4.spec share -----*- C++ -*-===//
//
// The rules of a variant that both the entry op and the spec a tiled kernel
// carries must keep: one definition, so that level B cannot hold a variant
// level A refuses. Private to the dialect library.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_DIALECT_FA4_IR_VERIFY_H
#define FA4_LIB_DIALECT_FA4_IR_VERIFY_H

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/TypeRange.h"

#include <initializer_list>
#include <optional>
#include <string>

namespace mlir::fa4::detail {
using EmitError = llvm::function_ref<InFlightDiagnostic()>;

/// Window bounds: each -1 (unbounded) or in [0, 2^31); set only with mask =
/// window, and then not both unbounded.
LogicalResult verifyWindow(EmitError emitError, MaskKind mask, int64_t left,
                           int64_t right);

/// The resolved scale (positive, finite, and finite times log2(e)) and the
/// softcap (0, or positive up to the kernel's limit and large enough that
/// 2·log2(e)·scale / softcap is a finite f32).
LogicalResult verifyScaleAndSoftcap(EmitError emitError, float scale,
                                    float softcap);

/// A seqused_k table: a rank-1 i32 memref of `batch` entries (either may be
/// dynamic).
LogicalResult verifySeqUsedKType(EmitError emitError, MemRefType table,
                                 int64_t batch);
/// A split-KV workspace: a rank-1 i32 memref (its size is checked at
/// launch, against the problem's).
LogicalResult verifySplitWorkspaceType(EmitError emitError,
                                       MemRefType workspace);

/// FA4Ops.cpp's checks, shared with the backward ops (FA4BackwardOps.cpp).
/// A score_mod (`scoreMod`) or mask_mod region's block, body and yield;
/// `extras` null accepts any trailing memrefs.
LogicalResult verifyModRegionOf(Operation *op, Region &region, StringRef name,
                                bool scoreMod, std::optional<TypeRange> extras);
/// A static tile of `rank` holding f32 (`wantF32`) or f16/bf16.
LogicalResult verifyTileType(Operation *op, StringRef name, Type type,
                             int64_t rank, bool wantF32);
/// A `[batch, seq, heads, head_dim]` memref read or written as `tile` rows
/// packing `gqaRatio` heads.
LogicalResult verifyTileAccessOf(Operation *op, Value memref, Value tile,
                                 int64_t gqaRatio);
/// An attention tensor operand: rank 4, static heads and head dim, strides
/// TMA expresses.
LogicalResult verifyTensorOperandOf(Operation *op, StringRef name, Value value);
/// The extras: row-major memrefs of known element types, each once.
LogicalResult verifyExtrasOf(Operation *op, OperandRange extras);
/// The scale and softcap (verifyScaleAndSoftcap), and not a softcap beside
/// a score_mod, with errors on `op`.
LogicalResult verifyScoring(Operation *op, float scale, float softcap,
                            bool hasScoreMod);
/// Q's heads (below 2^31) a multiple of K/V's.
LogicalResult verifyHeads(EmitError emitError, int64_t qHeads,
                          int64_t kvHeads);
/// Each position of `lists` names a memref argument of the function `op`
/// (a FunctionOpInterface); the error names `attribute`.
LogicalResult verifyMemrefPositions(
    Operation *op, StringRef attribute,
    std::initializer_list<ArrayRef<int64_t>> lists);
/// A shape as messages print it: [?, 128].
std::string shapeText(ArrayRef<int64_t> shape);
} // namespace mlir::fa4::detail

#endif // FA4_LIB_DIALECT_FA4_IR_VERIFY_H
