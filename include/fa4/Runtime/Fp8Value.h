//===- Fp8Value.h - V in the layout sm_90a's FP8 kernels read ---*- C++ -*-===//
//
// An sm_90a FP8 kernel reads V as "vt": [batch, kv_heads, v_head_dim,
// seq_k_padded] e4m3 bytes, keys contiguous, seq_k_padded = 16 · ceil(seq_k /
// 16), the keys of each group of 16 permuted, the padding keys zero. Why:
// FP8 wgmma takes its B operand K-major only (for P·V the keys are K), and
// P's accumulator layout is the 8-bit A fragment's up to a permutation of
// the keys within each 16 — the permutation V's keys take here, so that P
// goes from the accumulator to the A fragment without a shuffle. The layout
// is prepared once by the runtime (or stored so by a KV cache) rather than
// transposed in the kernel, which keeps the kernel's producer one TMA thread
// (docs/FP8.md).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_RUNTIME_FP8VALUE_H
#define FA4_RUNTIME_FP8VALUE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlir::fa4::runtime {

/// Keys per permuted group of the vt layout.
constexpr int64_t kVtKeyGroup = 16;

/// seq_k_padded: the keys of a vt row, seq_k rounded up to whole groups.
inline int64_t vtPaddedKeys(int64_t seqK) {
  return (seqK + kVtKeyGroup - 1) / kVtKeyGroup * kVtKeyGroup;
}

/// The key that position `position` of a vt row holds: within a group,
/// position k = 4t + 2h + e holds key 8h + 2t + e (t, h, e the 8-bit A
/// fragment's thread quad, half and element), i.e. the permutation
/// [0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15].
inline int64_t vtKeyAt(int64_t position) {
  int64_t k = position % kVtKeyGroup;
  int64_t t = k / 4, h = (k / 2) % 2, e = k % 2;
  return position - k + 8 * h + 2 * t + e;
}

/// vt's sizes for V of [batch, seq_k, kv_heads, v_head_dim]: [batch,
/// kv_heads, v_head_dim, seq_k_padded].
std::vector<int64_t> vtSizes(llvm::ArrayRef<int64_t> valueSizes);

/// Writes the dense vt tensor of `value`, an e4m3 V [batch, seq_k, kv_heads,
/// v_head_dim] with `strides` in elements (any signs; the bytes it reaches
/// must lie in [value, value + valueBytes)), into `vt` (vtBytes at least
/// the product of vtSizes): vt[b][h][d][p] = V[b][vtKeyAt(p)][h][d] where
/// that key is below seq_k, else +0.0. An error, and nothing written, for
/// sizes that are not positive, strides that reach outside the value's
/// bytes, or a vt buffer too small.
llvm::Error prepareFp8Value(const uint8_t *value, size_t valueBytes,
                            llvm::ArrayRef<int64_t> sizes,
                            llvm::ArrayRef<int64_t> strides, uint8_t *vt,
                            size_t vtBytes);

} // namespace mlir::fa4::runtime

#endif // FA4_RUNTIME_FP8VALUE_H
