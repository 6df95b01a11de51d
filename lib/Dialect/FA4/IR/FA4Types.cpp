//===- FA4Types.cpp - level C's memory types ------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Target/Blackwell/Chip.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace mlir::fa4;

LogicalResult SmemType::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t rows, int64_t cols, Type elementType,
                               int64_t stages) {
  if (rows <= 0 || cols <= 0)
    return emitError() << "smem tile must be non-empty, got [" << rows << ", "
                       << cols << "]";
  if (!elementType.isIntOrFloat())
    return emitError() << "smem element type must be an integer or float, got "
                       << elementType;
  if (stages <= 0)
    return emitError() << "smem ring needs at least one stage, got " << stages;
  return success();
}

LogicalResult TmemType::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t lanes, int64_t cols, Type elementType) {
  if (lanes != blackwell::kTmemLanes)
    return emitError() << "tmem buffers span all " << blackwell::kTmemLanes
                       << " lanes, got " << lanes;
  // f32 accumulators, and the probabilities the value MMA reads from TMEM:
  // 16-bit, or FP8's e4m3 (four to a column).
  if (!elementType.isF32() && !elementType.isF16() && !elementType.isBF16() &&
      !isa<Float8E4M3FNType>(elementType))
    return emitError()
           << "tmem element type must be f32, f16, bf16 or f8E4M3FN, got "
           << elementType;
  int64_t bits = cols * elementType.getIntOrFloatBitWidth();
  if (cols <= 0 || bits % 32 != 0)
    return emitError() << "tmem buffer of " << cols << " " << elementType
                       << " elements does not fill whole 32-bit columns";
  return success();
}

LogicalResult MBarrierType::verify(function_ref<InFlightDiagnostic()> emitError,
                                   BarrierKind kind, int64_t stages) {
  if (stages <= 0)
    return emitError() << "an mbarrier array needs at least one stage, got "
                       << stages;
  return success();
}
