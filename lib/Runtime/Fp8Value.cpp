//===- Fp8Value.cpp - V in the layout sm_90a's FP8 kernels read -----------===//

#include "fa4/Runtime/Fp8Value.h"

#include "fa4/Support/Error.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace mlir::fa4::runtime {

/// A 128-bit figure in decimal (the reach of sizes and strides may pass
/// 64 bits).
static std::string decimal(__int128 value) {
  if (value == 0)
    return "0";
  bool negative = value < 0;
  unsigned __int128 magnitude =
      negative ? -(unsigned __int128)value : (unsigned __int128)value;
  std::string digits;
  for (; magnitude; magnitude /= 10)
    digits.insert(digits.begin(), char('0' + int(magnitude % 10)));
  return (negative ? "-" : "") + digits;
}

std::vector<int64_t> vtSizes(llvm::ArrayRef<int64_t> valueSizes) {
  if (valueSizes.size() != 4)
    return {};
  return {valueSizes[0], valueSizes[2], valueSizes[3],
          vtPaddedKeys(valueSizes[1])};
}

llvm::Error prepareFp8Value(const uint8_t *value, size_t valueBytes,
                            llvm::ArrayRef<int64_t> sizes,
                            llvm::ArrayRef<int64_t> strides, uint8_t *vt,
                            size_t vtBytes) {
  if (sizes.size() != 4 || strides.size() != 4)
    return makeError("v: expected [batch, seq_k, kv_heads, v_head_dim] with "
                     "four strides");
  if (!value || !vt)
    return makeError(std::string(value ? "vt" : "v") + ": a null pointer");
  // Sizes below 2^31 and strides below 2^40 keep every offset below in
  // 128 bits' reach and the vt product below 2^64.
  for (int64_t size : sizes)
    if (size <= 0 || size >= (int64_t(1) << 31))
      return makeError("v: sizes must be 1 to 2^31 - 1");
  for (int64_t stride : strides)
    if (stride <= -(int64_t(1) << 40) || stride >= (int64_t(1) << 40))
      return makeError("v: strides must lie within ±2^40 elements");
  // The bytes the strides reach, [lowest, highest], inside the value's.
  __int128 lowest = 0, highest = 0;
  for (size_t i = 0; i < 4; ++i) {
    __int128 span = (__int128)(sizes[i] - 1) * strides[i];
    (span < 0 ? lowest : highest) += span;
  }
  if (lowest < 0 || highest >= (__int128)valueBytes)
    return makeError("v: its sizes and strides reach bytes [" +
                     decimal(lowest) + ", " + decimal(highest) +
                     "] outside the " + std::to_string(valueBytes) +
                     " bytes given");
  std::vector<int64_t> out = vtSizes(sizes);
  unsigned __int128 needed = (unsigned __int128)out[0] * out[1] * out[2] * out[3];
  if (needed > vtBytes)
    return makeError("vt: needs " + decimal((__int128)needed) +
                     " bytes ([batch, kv_heads, v_head_dim, seq_k_padded] = [" +
                     std::to_string(out[0]) + ", " + std::to_string(out[1]) +
                     ", " + std::to_string(out[2]) + ", " +
                     std::to_string(out[3]) + "]), got " +
                     std::to_string(vtBytes));
  // The layout is written to a buffer of its own: over V's bytes it would
  // read what it wrote.
  auto at = [](const void *p) { return (unsigned __int128)(uintptr_t)p; };
  if (at(vt) < at(value) + (unsigned __int128)highest + 1 &&
      at(value) < at(vt) + needed)
    return makeError("vt: its " + decimal((__int128)needed) +
                     " bytes overlap the bytes of v it is made from; the "
                     "layout needs a buffer of its own");
  int64_t seqK = sizes[1], padded = out[3];
  uint8_t *row = vt;
  for (int64_t b = 0; b < sizes[0]; ++b)
    for (int64_t h = 0; h < sizes[2]; ++h)
      for (int64_t d = 0; d < sizes[3]; ++d, row += padded) {
        const uint8_t *column = value + b * strides[0] + h * strides[2] + d * strides[3];
        for (int64_t p = 0; p < padded; ++p) {
          int64_t key = vtKeyAt(p);
          // +0.0: a padding key's weight is zero, and 0 · NaN would not be.
          row[p] = key < seqK ? column[key * strides[1]] : 0;
        }
      }
  return llvm::Error::success();
}

} // namespace mlir::fa4::runtime
