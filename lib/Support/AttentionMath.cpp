//===- AttentionMath.cpp - index and mask arithmetic ----------------------===//

#include "fa4/Support/AttentionMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mlir::fa4 {

IndexRange visibleKeys(MaskBand band, int64_t queryPos, int64_t seqQ,
                       int64_t seqK) {
  // Bottom-right alignment: the last query sits on the last key.
  int64_t diagonal = queryPos + seqK - seqQ;
  int64_t begin = band.left < 0 ? 0 : std::max<int64_t>(0, diagonal - band.left);
  int64_t end =
      band.right < 0 ? seqK : std::min<int64_t>(seqK, diagonal + band.right + 1);
  return {begin, std::max(begin, end)};
}

KvBlockRange kvBlockRange(MaskBand band, int64_t rowBegin, int64_t rows,
                          int64_t gqaRatio, int64_t blockN, int64_t seqQ,
                          int64_t seqK) {
  int64_t firstPos = rowBegin / gqaRatio;
  int64_t lastPos = std::min(seqQ - 1, (rowBegin + rows - 1) / gqaRatio);
  if (seqK <= 0 || firstPos > lastPos)
    return {};
  // Both ends of the visible band move right (never left) as the query
  // position grows, so the first and the last row bound every other row.
  IndexRange first = visibleKeys(band, firstPos, seqQ, seqK);
  IndexRange last = visibleKeys(band, lastPos, seqQ, seqK);
  if (last.end <= first.begin)
    return {};
  KvBlockRange range;
  range.begin = first.begin / blockN;
  range.end = ceilDiv(last.end, blockN);
  // A block is whole for every row when it starts at or after the largest
  // band start and ends at or before the smallest band end. A row that sees
  // nothing has start == end, which leaves no block whole.
  range.fullBegin = std::clamp(ceilDiv(last.begin, blockN), range.begin, range.end);
  range.fullEnd = std::clamp(first.end / blockN, range.fullBegin, range.end);
  return range;
}

static uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

static float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t floatToHalfBits(float value) {
  uint32_t bits = bitsOf(value);
  uint16_t sign = (bits >> 16) & 0x8000;
  uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude >= 0x7f800000) // inf stays inf, NaN stays a quiet NaN
    return sign | 0x7c00 | (magnitude > 0x7f800000 ? 0x200 : 0);
  if (magnitude >= 0x477ff000) // 65520 and up round past the largest half
    return sign | 0x7c00;
  if (magnitude < 0x38800000) {
    // Below 2^-14 the half is subnormal, a multiple of 2^-24; the scaling is
    // exact, and nearbyint rounds to nearest even.
    float scaled = floatOf(magnitude) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t exponent = (magnitude >> 23) - 127 + 15;
  uint32_t mantissa = magnitude & 0x7fffff;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t dropped = mantissa & 0x1fff;
  if (dropped > 0x1000 || (dropped == 0x1000 && (half & 1)))
    ++half; // a carry into the exponent is the correct rounding
  return sign | static_cast<uint16_t>(half);
}

float halfBitsToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) / 16777216.0f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f)
    return floatOf(sign | 0x7f800000 | (mantissa << 13));
  return floatOf(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t floatToBFloat16Bits(float value) {
  uint32_t bits = bitsOf(value);
  if ((bits & 0x7fffffff) > 0x7f800000)
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t roundingBias = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

float bfloat16BitsToFloat(uint16_t bits) {
  return floatOf(static_cast<uint32_t>(bits) << 16);
}

} // namespace mlir::fa4
