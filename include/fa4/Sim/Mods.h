//===- Mods.h - an attention's score_mod / mask_mod, for a reference -*- C++ -*-===//
//
// The regions of one fa4.attention, compiled to run per element, and the
// extras they read, drawn from a seed. fa4-sim runs them in the tile program
// and hands them to the float64 reference; fa4-emu, which runs PTX, takes
// them from the entry IR the kernel was compiled from (the manifest says
// that there are regions, not what they compute).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SIM_MODS_H
#define FA4_SIM_MODS_H

#include "fa4/Sim/Reference.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class Region;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace mlir::fa4::sim {

class ModProgram;

/// An extra operand's storage: row-major, every element held exactly as a
/// double (integers below 2^53, floats rounded to the element type).
struct ModBuffer {
  llvm::SmallVector<int64_t, 4> shape;
  std::vector<double> data;
  bool integer = false;
  /// The element type's name as MLIR prints it (f32, i32, bf16, ...).
  std::string dtype;
};

/// A seqused_k table for `batch` sequences of up to `seqK` keys, drawn from
/// `seed`: half the batch (at most five) takes the edge cases (no key, one
/// key, all seq_k keys, one short of a 128-key block and one past it, where
/// seq_k has them), the others uniform in [0, seq_k]; shuffled.
std::vector<int64_t> drawKeyCounts(int64_t batch, int64_t seqK, uint64_t seed);

/// The seqused_k table of `problem`'s sequences: drawKeyCounts over seq_k
/// for a dense batch; for a varlen one each count uniform in [0, the
/// sequence's keys].
std::vector<int64_t> drawKeyCountsFor(const Problem &problem, uint64_t seed);

/// FP8's descale table drawn for extra `index` (its `count` entries, f32
/// values in [0.5, 2): a descale is a positive factor, the scale a quantizer
/// chose): what fillExtras draws for it, and fa4-emu for a kernel's tables.
std::vector<double> drawDescales(int64_t count, uint64_t seed, size_t index);

/// Varlen: the lengths of `batch` sequences of at most `longest` rows, drawn
/// from `seed`: from four sequences on half the batch (at most six) takes
/// the edge lengths 0, 1, 127, 128, 129 and `longest` (those not past it),
/// the others (all of two or three) uniform in [0, longest]; the edges
/// rotated by `edgeShift` places among themselves, then shuffled by
/// `order`. drawVarlenBatch shuffles its Q and K lengths alike with K's
/// edges one place on, so that edges meet edges (Q's 0 with K's 1, Q's 1
/// with K's 0: rows without keys) and random lengths random ones.
std::vector<int64_t> drawSequenceLengths(int64_t batch, int64_t longest,
                                         uint64_t seed, uint64_t order,
                                         int64_t edgeShift = 0);

/// Rows of a packed varlen tensor past its last sequence's (no sequence's:
/// a kernel must leave O's there unwritten).
inline constexpr int64_t kVarlenSpareRows = 3;

/// Makes `problem` a varlen batch of `sequences` sequences of at most
/// `longestQ` queries and `longestK` keys (drawn with drawSequenceLengths):
/// its cu_seqlens tables, batch 1 and the packed totals (plus
/// kVarlenSpareRows) as seq_q and seq_k.
void drawVarlenBatch(Problem &problem, int64_t sequences, int64_t longestQ,
                     int64_t longestK, uint64_t seed);

/// The blocks of a paged cache for `batch` sequences of `maxBlocks` pages:
/// every sequence's, and three more that no table entry names.
inline int64_t pagedCacheBlocks(int64_t batch, int64_t maxBlocks) {
  return batch * maxBlocks + 3;
}

/// A block table `[batch, maxBlocks]` for a paged cache of
/// pagedCacheBlocks(batch, maxBlocks) blocks, drawn from `seed`: the
/// sequences' blocks in a random order, and where `keyCounts` (seqused_k)
/// leaves a block wholly past a sequence's keys, an entry out of range
/// (past the cache or negative), which must read as zeros.
std::vector<int64_t> drawBlockTable(int64_t batch, int64_t maxBlocks,
                                    int64_t page,
                                    const std::vector<int64_t> *keyCounts,
                                    uint64_t seed);

/// Scatters dense K or V `[batch, maxBlocks · page, heads, dim]` into a
/// paged cache `[numBlocks, page, heads, dim]` through `table` (`[batch,
/// maxBlocks]`, entries outside [0, numBlocks) skipped).
void scatterPages(const std::vector<float> &dense, const ModBuffer &table,
                  int64_t page, int64_t heads, int64_t dim, int64_t numBlocks,
                  std::vector<float> &cache);

class Mods {
public:
  /// The regions and extras of the attention in `func`: its fa4.attention
  /// (level A, whose extras must be arguments of `func`, directly or through
  /// bufferization.to_buffer / to_tensor) or the tile
  /// program fa4-tile made of it (levels B and C, extras named by
  /// fa4.spec). A function with neither region gives an empty set; an
  /// error says why the regions or extras cannot be run.
  static llvm::Expected<std::unique_ptr<Mods>> fromFunction(func::FuncOp func);
  ~Mods();

  bool empty() const { return !scoreMod && !maskMod; }

  /// Draws each extra for a problem's sizes: floats uniform in [-1, 1),
  /// integers as non-decreasing runs along the last dimension (document
  /// ids); a dynamic dimension takes the largest of batch, seq_q, seq_k and
  /// q_heads, so any of those indices is in bounds.
  llvm::Error fillExtras(const Problem &problem, uint64_t seed);

  /// Replaces extra `index`'s values (fillExtras gave it its shape) with
  /// `values`, row-major: floats rounded to the element type, integers
  /// taken exactly, so a value that is not a whole number is refused.
  llvm::Error setExtra(size_t index, llvm::ArrayRef<float> values);

  /// Points `problem`'s scoreMod and maskMod at the regions, run in double
  /// on the drawn extras. They must outlive the problem's use.
  void attach(Problem &problem);

  /// The first error a region met while the reference ran it (an index out
  /// of an extra's bounds, a division by zero), empty when none: the
  /// reference calls the regions through Problem's callbacks, which have no
  /// error to return, so the message waits here for the caller to ask.
  const std::string &error() const { return runError; }

  /// The extras as the attention takes them (memrefs), and their storage,
  /// in order.
  llvm::ArrayRef<Value> arguments() const { return extraArguments; }
  /// The numbers of the function arguments they are: lowering keeps them, so
  /// they name the extras of the lowered function too.
  llvm::ArrayRef<unsigned> argumentNumbers() const { return extraNumbers; }
  const std::vector<ModBuffer> &buffers() const { return extraBuffers; }
  /// Whether the entry holds a score_mod or a mask_mod region.
  bool hasScoreMod() const { return scoreMod != nullptr; }
  bool hasMaskMod() const { return maskMod != nullptr; }
  /// Which extra is the block mask (fa4.attention's `block_mask`), if any:
  /// fillExtras computes it from the mask_mod, as FlexAttention's
  /// create_block_mask does.
  std::optional<size_t> blockMask() const { return blockMaskIndex; }
  /// Which extra is the seqused_k table, if any: fillExtras draws it with
  /// drawKeyCounts, and attach gives the problem its lengths.
  std::optional<size_t> seqUsedK() const { return seqUsedKIndex; }
  /// Which extra is the block table of a paged cache, if any: fillExtras
  /// draws it (blocks in a seeded random order; the entries of blocks wholly
  /// past a sequence's seqused_k count out of range, which must read as
  /// zeros).
  std::optional<size_t> blockTable() const { return blockTableIndex; }
  /// Which extra is the split-KV workspace, if any: fillExtras sizes it for
  /// the problem and zeroes it (its arrival counters start at zero).
  std::optional<size_t> splitWorkspace() const { return splitWorkspaceIndex; }
  /// Which extras are the varlen cu_seqlens tables, if any: fillExtras
  /// takes them from the problem (drawVarlenBatch).
  std::optional<size_t> cuSeqlensQ() const { return cuSeqlensQIndex; }
  std::optional<size_t> cuSeqlensK() const { return cuSeqlensKIndex; }
  /// Which extras are FP8's descale tables (Q's, K's, V's), if any:
  /// fillExtras draws them in [0.5, 2) (a descale is a positive factor),
  /// and attach gives the problem their values.
  std::optional<size_t> descale(int which) const { return descaleIndex[which]; }

private:
  Mods();
  llvm::Error fillBlockMask(const Problem &problem);
  llvm::Error fillBlockTable(const Problem &problem, uint64_t seed);
  std::optional<size_t> blockMaskIndex, seqUsedKIndex, blockTableIndex,
      splitWorkspaceIndex, cuSeqlensQIndex, cuSeqlensKIndex;
  std::optional<size_t> descaleIndex[3];
  int64_t numSplits = 1;
  std::unique_ptr<ModProgram> scoreMod, maskMod;
  llvm::SmallVector<Value> extraArguments;
  llvm::SmallVector<unsigned> extraNumbers;
  std::vector<ModBuffer> extraBuffers;
  llvm::SmallVector<const ModBuffer *> extraPointers;
  std::string runError;
};

} // namespace mlir::fa4::sim

#endif // FA4_SIM_MODS_H
