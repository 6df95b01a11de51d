//===- AttentionMath.cpp - index and mask arithmetic ----------------------===//

#include "fa4/Support/AttentionMath.h"

#include <limits>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mlir::fa4 {

/// The least (or the greatest) of `value` over a Min/Max node's operands.
template <typename ValueOf>
static int64_t fold(const std::vector<KeyBound> &operands, bool least,
                    ValueOf value) {
  int64_t result = value(operands.front());
  for (const KeyBound &operand : operands)
    result = least ? std::min(result, value(operand))
                   : std::max(result, value(operand));
  return result;
}

KeyBound KeyBound::diagonal(int64_t offset, bool bottomRight) {
  KeyBound bound;
  bound.kind = Kind::Diagonal;
  bound.offset = offset;
  bound.bottomRight = bottomRight;
  return bound;
}

KeyBound KeyBound::chunkStart(int64_t chunk, int64_t offset) {
  KeyBound bound;
  bound.kind = Kind::Chunk;
  bound.chunk = chunk;
  bound.offset = offset;
  return bound;
}

KeyBound KeyBound::constant(int64_t offset) {
  KeyBound bound;
  bound.offset = offset;
  return bound;
}

/// min(a, b) or max(a, b); a bound with itself is itself.
static KeyBound both(KeyBound::Kind kind, KeyBound a, KeyBound b) {
  if (a == b)
    return a;
  KeyBound bound;
  bound.kind = kind;
  bound.operands = {std::move(a), std::move(b)};
  return bound;
}

KeyBound KeyBound::min(KeyBound a, KeyBound b) {
  return both(Kind::Min, std::move(a), std::move(b));
}

KeyBound KeyBound::max(KeyBound a, KeyBound b) {
  return both(Kind::Max, std::move(a), std::move(b));
}

int64_t KeyBound::evaluate(int64_t queryPos, int64_t seqQ, int64_t seqK) const {
  switch (kind) {
  case Kind::Diagonal:
    return queryPos + offset + (bottomRight ? seqK - seqQ : 0);
  case Kind::Chunk:
    return floorDiv(queryPos, chunk) * chunk + offset;
  case Kind::Constant:
    return offset;
  case Kind::Min:
  case Kind::Max:
    return fold(operands, kind == Kind::Min, [&](const KeyBound &operand) {
      return operand.evaluate(queryPos, seqQ, seqK);
    });
  }
  return offset;
}

int64_t KeyBound::firstReaching(int64_t target, int64_t seqQ,
                                int64_t seqK) const {
  switch (kind) {
  case Kind::Diagonal:
    return std::max<int64_t>(0, target - offset - (bottomRight ? seqK - seqQ : 0));
  case Kind::Chunk:
    // floor(q / C)·C >= x  <=>  q >= C·ceil(x / C).
    return std::max<int64_t>(0, -floorDiv(offset - target, chunk) * chunk);
  case Kind::Constant:
    return offset >= target ? 0 : kNever;
  case Kind::Min:
  case Kind::Max:
    // max(a, b) reaches the target when either does, min(a, b) when both do.
    return fold(operands, kind == Kind::Max, [&](const KeyBound &operand) {
      return operand.firstReaching(target, seqQ, seqK);
    });
  }
  return kNever;
}

bool KeyBound::operator==(const KeyBound &other) const {
  if (kind != other.kind || offset != other.offset || operands != other.operands)
    return false;
  if (kind == Kind::Chunk && chunk != other.chunk)
    return false;
  return kind != Kind::Diagonal || bottomRight == other.bottomRight;
}

KeyBounds KeyBounds::band(MaskBand band) {
  KeyBounds bounds;
  if (band.left >= 0)
    bounds.lower = KeyBound::diagonal(-band.left, /*bottomRight=*/true);
  if (band.right >= 0)
    bounds.upper = KeyBound::diagonal(band.right, /*bottomRight=*/true);
  return bounds;
}

KeyBounds KeyBounds::intersect(const KeyBounds &other) const {
  KeyBounds result;
  auto both = [](const std::optional<KeyBound> &a,
                 const std::optional<KeyBound> &b, bool lower) {
    if (!a)
      return b;
    if (!b)
      return a;
    return std::optional<KeyBound>(lower ? KeyBound::max(*a, *b)
                                         : KeyBound::min(*a, *b));
  };
  result.lower = both(lower, other.lower, /*lower=*/true);
  result.upper = both(upper, other.upper, /*lower=*/false);
  return result;
}

IndexRange visibleKeys(const KeyBounds &bounds, int64_t queryPos, int64_t seqQ,
                       int64_t seqK) {
  int64_t begin = 0, end = seqK;
  if (bounds.lower)
    begin = std::max<int64_t>(0, bounds.lower->evaluate(queryPos, seqQ, seqK));
  if (bounds.upper)
    end = std::min<int64_t>(seqK,
                            bounds.upper->evaluate(queryPos, seqQ, seqK) + 1);
  return {begin, std::max(begin, end)};
}

IndexRange visibleKeys(MaskBand band, int64_t queryPos, int64_t seqQ,
                       int64_t seqK) {
  return visibleKeys(KeyBounds::band(band), queryPos, seqQ, seqK);
}

KvBlockRange kvBlockRange(const KeyBounds &bounds, int64_t rowBegin,
                          int64_t rows, int64_t gqaRatio, int64_t blockN,
                          int64_t seqQ, int64_t seqK, bool exact) {
  IndexRange positions = taskPositions(rowBegin, rows, gqaRatio, seqQ);
  int64_t firstPos = positions.begin, lastPos = positions.end - 1;
  if (seqK <= 0 || positions.empty())
    return {};
  // Rows whose keys all lie before key 0 (upper < 0) come first, rows whose
  // keys all lie at or past seq_k (lower >= seq_k) come last: both bounds
  // never fall. Leave them out, so the range is the hull of what the other
  // rows see.
  int64_t seeingFirst = firstPos, seeingLast = lastPos;
  if (bounds.upper)
    seeingFirst = std::max(firstPos, bounds.upper->firstReaching(0, seqQ, seqK));
  if (bounds.lower)
    seeingLast =
        std::min(lastPos, bounds.lower->firstReaching(seqK, seqQ, seqK) - 1);
  if (seeingFirst > seeingLast)
    return {};
  // Both bounds move right (never left) as the query position grows, so the
  // first and the last row bound every other row.
  IndexRange first = visibleKeys(bounds, seeingFirst, seqQ, seqK);
  IndexRange last = visibleKeys(bounds, seeingLast, seqQ, seqK);
  if (last.end <= first.begin)
    return {};
  KvBlockRange range;
  range.begin = first.begin / blockN;
  range.end = ceilDiv(last.end, blockN);
  // A block is whole for every row when it starts at or after the largest
  // start and ends at or before the smallest end. A row that sees nothing
  // has start == end, which leaves no block whole; so do the rows left out.
  bool everyRowSees = seeingFirst == firstPos && seeingLast == lastPos;
  range.fullBegin = std::clamp(ceilDiv(last.begin, blockN), range.begin, range.end);
  range.fullEnd = everyRowSees
                      ? std::clamp(first.end / blockN, range.fullBegin, range.end)
                      : range.fullBegin;
  if (!exact)
    range.fullBegin = range.fullEnd = range.begin;
  return range;
}

KvBlockRange queryBlockRange(const KeyBounds &bounds, int64_t col,
                             int64_t blockN, int64_t rows, int64_t gqaRatio,
                             int64_t seqQ, int64_t seqK, bool exact) {
  int64_t block = col / blockN;
  int64_t queryBlocks = ceilDiv(seqQ * gqaRatio, rows);
  int64_t first = -1, last = -1, firstWhole = -1, lastWhole = -1;
  int64_t visited = 0, whole = 0;
  for (int64_t m = 0; m < queryBlocks; ++m) {
    KvBlockRange keys = kvBlockRange(bounds, m * rows, rows, gqaRatio, blockN,
                                     seqQ, seqK, exact);
    if (block < keys.begin || block >= keys.end)
      continue;
    if (first < 0)
      first = m;
    last = m;
    ++visited;
    if (block >= keys.fullBegin && block < keys.fullEnd) {
      if (firstWhole < 0)
        firstWhole = m;
      lastWhole = m;
      ++whole;
    }
  }
  if (first < 0)
    return {};
  KvBlockRange range{first, first, first, last + 1};
  // Whole blocks form one run inside the visited ones (bounds that never
  // fall as the query grows); otherwise every visited block is masked.
  if (whole > 0 && whole == lastWhole - firstWhole + 1 &&
      visited == last - first + 1) {
    range.fullBegin = firstWhole;
    range.fullEnd = lastWhole + 1;
  }
  return range;
}

BlockMaskEntry blockMaskEntry(const std::vector<bool> &seen,
                              const std::vector<bool> &whole) {
  int64_t blocks = static_cast<int64_t>(seen.size());
  BlockMaskEntry entry;
  int64_t first = 0;
  while (first < blocks && !seen[first])
    ++first;
  if (first == blocks)
    return entry;
  int64_t last = blocks;
  while (!seen[last - 1])
    --last;
  entry.begin = first;
  entry.end = last;
  int64_t fullBegin = 0;
  while (fullBegin < blocks && !(whole[fullBegin] && seen[fullBegin]))
    ++fullBegin;
  int64_t fullEnd = fullBegin;
  while (fullEnd < blocks && whole[fullEnd] && seen[fullEnd])
    ++fullEnd;
  entry.fullBegin = fullBegin < fullEnd ? fullBegin : entry.begin;
  entry.fullEnd = fullBegin < fullEnd ? fullEnd : entry.begin;
  return entry;
}

KvBlockRange narrowByBlockMask(
    const KvBlockRange &analysed, const KvBlockRange &wholeByAttribute,
    int64_t rowBegin, int64_t rows, int64_t gqaRatio, int64_t seqQ,
    int64_t headsInGroup,
    const std::function<BlockMaskEntry(int64_t, int64_t)> &entry) {
  IndexRange positions = taskPositions(rowBegin, rows, gqaRatio, seqQ);
  if (positions.empty() || analysed.begin >= analysed.end)
    return {};
  int64_t begin = std::numeric_limits<int64_t>::max();
  int64_t end = std::numeric_limits<int64_t>::min();
  int64_t fullBegin = std::numeric_limits<int64_t>::min();
  int64_t fullEnd = std::numeric_limits<int64_t>::max();
  for (int64_t block = positions.begin / kBlockMaskQueries;
       block <= (positions.end - 1) / kBlockMaskQueries; ++block)
    for (int64_t head = 0; head < headsInGroup; ++head) {
      BlockMaskEntry e = entry(block, head);
      if (e.begin < e.end) {
        begin = std::min(begin, e.begin);
        end = std::max(end, e.end);
      }
      // An entry that sees nothing has no whole block, nor has the task.
      fullBegin = std::max(fullBegin, e.fullBegin);
      fullEnd = std::min(fullEnd, e.begin < e.end
                                      ? e.fullEnd
                                      : std::numeric_limits<int64_t>::min());
    }
  KvBlockRange range;
  range.begin = std::max(analysed.begin, begin);
  range.end = std::min(analysed.end, end);
  if (range.begin >= range.end)
    return {};
  range.fullBegin = std::clamp(std::max(fullBegin, wholeByAttribute.fullBegin),
                               range.begin, range.end);
  range.fullEnd = std::clamp(std::min(fullEnd, wholeByAttribute.fullEnd),
                             range.fullBegin, range.end);
  return range;
}

KvBlockRange kvBlockRange(MaskBand band, int64_t rowBegin, int64_t rows,
                          int64_t gqaRatio, int64_t blockN, int64_t seqQ,
                          int64_t seqK) {
  return kvBlockRange(KeyBounds::band(band), rowBegin, rows, gqaRatio, blockN,
                      seqQ, seqK);
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
