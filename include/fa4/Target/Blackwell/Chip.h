//===- Chip.h - the Blackwell limits the schedule is sized against -*- C++ -*-===//

#ifndef FA4_TARGET_BLACKWELL_CHIP_H
#define FA4_TARGET_BLACKWELL_CHIP_H

#include "fa4/Target/Target.h"

#include <cstdint>

namespace mlir::fa4::blackwell {

/// The chip whose facts the Blackwell schedule is sized against.
inline constexpr const target::ChipInfo &kChip = target::info(target::Chip::Sm100a);

/// Every Blackwell chip has kChip's limits (tensor memory, registers,
/// shared memory, tiles a task), so the schedule sized against them fits
/// each; a chip that differs needs its limits threaded through instead.
constexpr bool blackwellChipsShareLimits() {
  for (const target::ChipInfo &row : target::kChipTable)
    if (row.family == target::Family::Blackwell &&
        (row.tmemColumns != kChip.tmemColumns ||
         row.registersPerSm != kChip.registersPerSm ||
         row.smemBytesPerCta != kChip.smemBytesPerCta ||
         row.qTilesPerTask != kChip.qTilesPerTask))
      return false;
  return true;
}
static_assert(blackwellChipsShareLimits(),
              "a Blackwell chip whose limits differ from sm_100a's");

/// 32-bit columns of tensor memory per SM (128 lanes each).
constexpr int64_t kTmemColumns = kChip.tmemColumns;
constexpr int64_t kTmemLanes = 128;
/// An MMA whose B operand is MN-major under the 128-byte swizzle reads whole
/// swizzle atoms along N, a 128-byte line of B's elements (64 of 16 bits,
/// 128 of 8), as NVIDIA's kernels always do: N, and so the accumulator's
/// TMEM footprint, is a multiple of the atom.
constexpr int64_t kMmaAtomColumns = 64;
inline int64_t accumulatorColumns(int64_t columns, int64_t bElementBits = 16) {
  int64_t atom = kMmaAtomColumns * 16 / bElementBits;
  return (columns + atom - 1) / atom * atom;
}
/// 32-bit registers per SM, shared by every resident thread.
constexpr int64_t kRegistersPerSm = kChip.registersPerSm;
/// Registers per thread at a kernel's entry with one CTA per SM: the
/// register file split over the threads, in ptxas's unit of 8 (128 of 512,
/// 168 of 384). `setmaxnreg` only moves registers within this share of the
/// CTA, so role budgets must sum to at most this times the threads (the
/// same on sm_90a, whose register file is the same size).
inline int64_t registersAtLaunch(int64_t threads) {
  return threads > 0 ? kRegistersPerSm / threads / 8 * 8 : 0;
}
/// `setmaxnreg` accepts multiples of 8 in this range.
constexpr int64_t kMinRegistersPerThread = 24;
constexpr int64_t kMaxRegistersPerThread = 256;
/// Dynamic shared memory one CTA may use.
constexpr int64_t kSmemBytesPerCta = kChip.smemBytesPerCta;
constexpr int64_t kWarpsPerCta = 16;
constexpr int64_t kThreadsPerWarp = 32;

} // namespace mlir::fa4::blackwell

#endif // FA4_TARGET_BLACKWELL_CHIP_H
