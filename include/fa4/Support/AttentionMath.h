//===- AttentionMath.h - index and mask arithmetic of the tile program ----===//
//
// Plain C++ (no MLIR): the arithmetic that the tile program, its lowerings and
// the simulator share, each piece unit-tested on its own.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_ATTENTIONMATH_H
#define FA4_SUPPORT_ATTENTIONMATH_H

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace mlir::fa4 {

/// Sequence lengths stay below this (runtime::checkShapes): the kernel adds
/// key offsets below 2^24 to 32-bit positions, which then never wrap, and a
/// window side at or past it reaches every key, as an open side does.
constexpr int64_t kSequenceLimit = (int64_t(1) << 31) - (int64_t(1) << 25);

/// The head dims the backward is built for, one for Q, K and V: the op's
/// verifier and the runtime's manifest check both hold to these.
inline constexpr int64_t kBackwardHeadDims[] = {32, 64, 96, 128};

/// The visible band of keys around the (bottom-right aligned) diagonal: query
/// position i sees key j when `i + off - left <= j <= i + off + right` with
/// `off = seqK - seqQ`; a bound of -1 leaves that side open. No mask is
/// (-1, -1), causal is (-1, 0).
struct MaskBand {
  int64_t left = -1;
  int64_t right = -1;
};

/// A half-open range of key positions or of KV block indices.
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool empty() const { return end <= begin; }
};

/// A function of the query position q that bounds the keys q may see. Every
/// form is non-decreasing in q, which is what lets the first and the last row
/// of a tile bound every row between them:
///   Diagonal  q + offset (+ seqK - seqQ when aligned to the bottom-right);
///   Chunk     floor(q / chunk) * chunk + offset (the chunk q belongs to);
///   Constant  offset;
///   Min, Max  of the operands.
struct KeyBound {
  enum class Kind { Diagonal, Chunk, Constant, Min, Max };
  Kind kind = Kind::Constant;
  int64_t offset = 0;
  int64_t chunk = 1;
  bool bottomRight = false;
  std::vector<KeyBound> operands;

  static KeyBound diagonal(int64_t offset, bool bottomRight = false);
  static KeyBound chunkStart(int64_t chunk, int64_t offset);
  static KeyBound constant(int64_t offset);
  static KeyBound min(KeyBound a, KeyBound b);
  static KeyBound max(KeyBound a, KeyBound b);

  int64_t evaluate(int64_t queryPos, int64_t seqQ, int64_t seqK) const;
  /// The first query position q >= 0 with evaluate(q) >= target (the bound
  /// never falls, so every later q reaches it too); kNever when none does.
  int64_t firstReaching(int64_t target, int64_t seqQ, int64_t seqK) const;
  static constexpr int64_t kNever = int64_t(1) << 62;
  bool operator==(const KeyBound &other) const;
  bool operator!=(const KeyBound &other) const { return !(*this == other); }
};

/// The keys a query position sees as one interval [lower(q), upper(q)] (both
/// inclusive; an absent bound leaves that side open), clamped to [0, seqK).
/// Attribute masks (causal, window) and the affine part of a mask_mod region
/// both come down to this; it is what block ranges and boundary masks read.
struct KeyBounds {
  std::optional<KeyBound> lower, upper;

  /// The band around the bottom-right aligned diagonal.
  static KeyBounds band(MaskBand band);
  /// Keys both bounds admit.
  KeyBounds intersect(const KeyBounds &other) const;
  bool unbounded() const { return !lower && !upper; }
  bool operator==(const KeyBounds &other) const {
    return lower == other.lower && upper == other.upper;
  }
};

/// The keys query position `queryPos` may attend to, clamped to [0, seqK).
IndexRange visibleKeys(const KeyBounds &bounds, int64_t queryPos, int64_t seqQ,
                       int64_t seqK);
IndexRange visibleKeys(MaskBand band, int64_t queryPos, int64_t seqQ,
                       int64_t seqK);

/// GQA packing: how many of the query heads that share a K/V head ride in
/// one tile, a *head group*. The group's heads are a dimension of the Q/O
/// TMA box and every tile (and Hopper's 64-row halves) must hold whole
/// positions of each, so the count is a power of two: the largest dividing
/// the ratio, at most kMaxGqaPacking (8 positions per 128-row tile). A ratio
/// of 3, 5 or 7 runs unpacked (groups of one head); 6, 12 or 24 packs 2, 4
/// or 8 heads; the ratio / packing groups of a K/V head are tasks of their
/// own that read the same K/V.
constexpr int64_t kMaxGqaPacking = 16;
inline int64_t gqaPacking(int64_t ratio) {
  if (ratio <= 0)
    return 1;
  int64_t packing = ratio & -ratio;
  return packing < kMaxGqaPacking ? packing : kMaxGqaPacking;
}

/// Split-KV (flash-decoding): each task's KV blocks cut into `splits`
/// parts, each a task of its own, merged by the last part to finish. The
/// parts meet in a workspace of i32 words, per tile of packed rows
/// (`tiles` of them, tile `(batch · head_groups + group) · ceil(seq_q ·
/// packing / 128) + packed_row / 128`), each tile `rows` rows: 128, or
/// seq_q · packing where that is less (decode: 4 rows for one query of 4
/// packed heads), row `packed_row % 128` of its tile:
///   - arrival counters `[tiles][rows][kSplitSlots]` at word 0: one per
///     thread that holds a row's elements (Hopper's quad shares a row, a
///     Blackwell thread holds one alone), each counting the parts that
///     thread has written; zero before a launch and after it;
///   - the parts' LSEs `[splits][tiles][rows][kSplitSlots]` (f32);
///   - the parts' normalized O `[splits][tiles][rows][head_dim]` (f32).
constexpr int64_t kMaxSplits = 128;

/// The largest softcap: the kernel's tanh (on ex2.approx and rcp.approx) is
/// accurate to about 2^-22 absolute, which the cap multiplies into the
/// score. A score_mod written as a larger cap runs as a region instead.
constexpr float kMaxSoftcap = 1024.0f;
constexpr int64_t kSplitSlots = 4;
struct SplitWorkspaceLayout {
  int64_t tiles = 0, rows = 128, splits = 1, headDim = 0;
  int64_t lseWord() const { return tiles * rows * kSplitSlots; }
  int64_t outWord() const { return lseWord() * (1 + splits); }
  int64_t words() const { return outWord() + tiles * rows * splits * headDim; }
};
/// The layout for `batch` sequences of `seqQ` queries, `headGroups` head
/// groups of `packing` query heads.
inline SplitWorkspaceLayout splitWorkspaceLayout(int64_t batch,
                                                 int64_t headGroups,
                                                 int64_t seqQ, int64_t packing,
                                                 int64_t splits,
                                                 int64_t headDim) {
  int64_t packedRows = seqQ * packing;
  return {batch * headGroups * ((packedRows + 127) / 128),
          packedRows < 128 ? packedRows : 128, splits, headDim};
}

/// Packed-row arithmetic of grouped-query attention: the `ratio` query heads
/// of a head group (gqaPacking of them) ride in one tile, packed row `r`
/// being query position `r / ratio` of the group's head `r % ratio`.
struct PackedRow {
  int64_t seqPos;
  int64_t headInGroup;
};
/// Varlen: a sequence's rows in a packed tensor of `total` rows, from its
/// cumulative-lengths entries `begin = cu[b]` and `end = cu[b + 1]`, clamped
/// so that no row outside the tensor is read (fa4.sequence_span's rule,
/// the kernel's and the simulator's).
struct SequenceSpan {
  int64_t offset = 0, length = 0;
};
inline SequenceSpan sequenceSpan(double begin, double end, int64_t total) {
  auto clamp = [&](double value, int64_t low) -> int64_t {
    return value <= double(low)     ? low
           : value >= double(total) ? total
                                    : int64_t(value);
  };
  int64_t offset = clamp(begin, 0);
  return {offset, clamp(end, offset) - offset};
}

/// Varlen's task grid, per head group: a slot per task of `rows` packed
/// rows, sequence b's slots beginning at varlenSlot(cu[b], b) (its entry
/// clamped to [0, total]) — at least its tasks, at most one more (empty)
/// — and varlenSlot(total, batch) slots in all. The grid needs no longest
/// sequence, and no slot is spent on another sequence's length.
inline int64_t varlenSlot(int64_t entry, int64_t b, int64_t total,
                          int64_t ratio, int64_t rows) {
  int64_t clamped = entry < 0 ? 0 : entry > total ? total : entry;
  return clamped * ratio / rows + b;
}

/// The task at position `task` of a varlen grid of `headGroups` head
/// groups and `batch` sequences, `entry(b)` reading cu_seqlens_q[b]: the
/// positions walk the slots last to first (a sequence's last tiles, the
/// heaviest under a causal mask, first), head group by head group, so that
/// a sequence's tiles of one head group are consecutive (their K/V shared
/// in L2 by neighbouring CTAs). Its sequence is the last whose first slot
/// is at most the task's slot (a binary search over the bits of batch);
/// a slot before the first sequence's gets m_block `slots`, past every row.
struct VarlenTask {
  int64_t batch, headGroup, mBlock;
};
template <typename Entry>
VarlenTask varlenTaskAt(int64_t task, int64_t batch, int64_t total,
                        int64_t ratio, int64_t rows, int64_t headGroups,
                        Entry entry) {
  int64_t slots = varlenSlot(total, batch, total, ratio, rows);
  int64_t reversed = slots * headGroups - 1 - task;
  int64_t slot = reversed % slots;
  int64_t b = 0;
  for (int bit = 30; bit >= 0; --bit) {
    int64_t candidate = b + (int64_t(1) << bit);
    if (candidate < batch &&
        varlenSlot(entry(candidate), candidate, total, ratio, rows) <= slot)
      b = candidate;
  }
  int64_t first = varlenSlot(entry(b), b, total, ratio, rows);
  return {b, reversed / slots, first <= slot ? slot - first : slots};
}

inline PackedRow unpackRow(int64_t row, int64_t ratio) {
  return {row / ratio, row % ratio};
}
inline int64_t packRow(PackedRow row, int64_t ratio) {
  return row.seqPos * ratio + row.headInGroup;
}

/// The query positions of the packed rows [rowBegin, rowBegin + rows) that
/// lie inside the sequence: [rowBegin / ratio, last + 1), `last` the last
/// row's position clamped to seq_q - 1 (empty past the sequence).
inline IndexRange taskPositions(int64_t rowBegin, int64_t rows,
                                int64_t gqaRatio, int64_t seqQ) {
  int64_t last = (rowBegin + rows - 1) / gqaRatio;
  return {rowBegin / gqaRatio, (last < seqQ - 1 ? last : seqQ - 1) + 1};
}

/// The KV blocks visited by the packed rows [rowBegin, rowBegin + rows):
/// `[begin, end)` holds every block any row can see; `[fullBegin, fullEnd)`,
/// inside it, the blocks that every row sees whole (no mask needed).
struct KvBlockRange {
  int64_t begin = 0;
  int64_t fullBegin = 0;
  int64_t fullEnd = 0;
  int64_t end = 0;
};
/// `exact`: the bounds are the whole predicate. Otherwise a predicate
/// narrower than the bounds runs per element, and no block is whole.
KvBlockRange kvBlockRange(const KeyBounds &bounds, int64_t rowBegin,
                          int64_t rows, int64_t gqaRatio, int64_t blockN,
                          int64_t seqQ, int64_t seqK, bool exact = true);
KvBlockRange kvBlockRange(MaskBand band, int64_t rowBegin, int64_t rows,
                          int64_t gqaRatio, int64_t blockN, int64_t seqQ,
                          int64_t seqK);

/// The backward's transpose of kvBlockRange: the blocks of `rows` packed
/// query rows that visit the K/V block holding key `col` (a multiple of
/// `blockN`), `[begin, end)`, and inside it `[fullBegin, fullEnd)` those
/// that see it whole — exactly the query blocks whose kvBlockRange holds
/// the K/V block (whole: in its full range). Where those blocks are not
/// contiguous (a bound that is not monotone), the hull is returned and no
/// block is called whole, which visits more but masks every one.
KvBlockRange queryBlockRange(const KeyBounds &bounds, int64_t col,
                             int64_t blockN, int64_t rows, int64_t gqaRatio,
                             int64_t seqQ, int64_t seqK, bool exact = true);

/// A block mask (fa4.attention's `block_mask` extra) gives, per batch, query
/// head and block of kBlockMaskQueries query positions, the KV blocks of
/// kBlockMaskKeys keys its queries may see: `[begin, end)`, and inside it
/// `[fullBegin, fullEnd)` where every query sees every key, so the mask
/// need not run. The memref is `[batch or 1, q_heads or 1, ceil(seq_q /
/// 128), 4]` i32, the four numbers in this order.
inline constexpr int64_t kBlockMaskQueries = 128;
inline constexpr int64_t kBlockMaskKeys = 128;
struct BlockMaskEntry {
  int64_t begin = 0, fullBegin = 0, fullEnd = 0, end = 0;
};
/// One query block's entry from what its queries see of each KV block:
/// `seen[kb]` some key, `whole[kb]` every key (below seq_k) for every query.
/// `[begin, end)` is the hull of the seen blocks, `[fullBegin, fullEnd)` the
/// first run of whole ones (a range can hold one run); nothing seen is all 0.
BlockMaskEntry blockMaskEntry(const std::vector<bool> &seen,
                              const std::vector<bool> &whole);
/// Narrows `analysed` (the range the mask's analysis gives a task: packed
/// rows [rowBegin, rowBegin + rows)) by the block mask's entries for the
/// task's query blocks and heads: `entry(queryBlock, headInGroup)`, where
/// the task covers `headsInGroup` query heads of the block mask (1 when the
/// mask has one head for all). Visited blocks are those both allow (the
/// hull of the entries'); whole blocks are those every entry calls whole
/// and `wholeByAttribute` (the range of the attribute mask alone, which the
/// block mask does not describe) does too.
KvBlockRange narrowByBlockMask(
    const KvBlockRange &analysed, const KvBlockRange &wholeByAttribute,
    int64_t rowBegin, int64_t rows, int64_t gqaRatio, int64_t seqQ,
    int64_t headsInGroup,
    const std::function<BlockMaskEntry(int64_t, int64_t)> &entry);

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t floorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/// Round-to-nearest-even conversions between f32 and the 16-bit input types.
uint16_t floatToHalfBits(float value);
float halfBitsToFloat(uint16_t bits);
uint16_t floatToBFloat16Bits(float value);
float bfloat16BitsToFloat(uint16_t bits);
inline float roundToHalf(float v) { return halfBitsToFloat(floatToHalfBits(v)); }
inline float roundToBFloat16(float v) {
  return bfloat16BitsToFloat(floatToBFloat16Bits(v));
}

} // namespace mlir::fa4

#endif // FA4_SUPPORT_ATTENTIONMATH_H
