//===- Mods.cpp - an attention's score_mod / mask_mod, for a reference ----===//

#include "fa4/Sim/Mods.h"

#include "Inputs.h"
#include "Interpreter.h"
#include "ModProgram.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <numeric>
#include <random>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::sim;

Mods::Mods() = default;
Mods::~Mods() = default;

llvm::Expected<std::unique_ptr<Mods>> Mods::fromFunction(func::FuncOp func) {
  std::unique_ptr<Mods> mods(new Mods());
  Region *scoreModRegion = nullptr, *maskModRegion = nullptr;
  AttentionOp entry;
  AttentionBackwardOp backwardEntry;
  func.walk([&](Operation *op) {
    if (auto attention = dyn_cast<AttentionOp>(op); attention && !entry)
      entry = attention;
    if (auto backward = dyn_cast<AttentionBackwardOp>(op);
        backward && !backwardEntry)
      backwardEntry = backward;
    // q_block_range carries the mask_mod in the backward's tile program.
    if (auto range = dyn_cast<QBlockRangeOp>(op);
        range && !range.getMaskMod().empty() && !maskModRegion)
      maskModRegion = &range.getMaskMod();
    if (auto scoreMod = dyn_cast<ScoreModOp>(op); scoreMod && !scoreModRegion)
      scoreModRegion = &scoreMod.getBody();
    // kv_block_range carries the mask_mod at levels B and C.
    if (auto range = dyn_cast<KvBlockRangeOp>(op);
        range && !range.getMaskMod().empty() && !maskModRegion)
      maskModRegion = &range.getMaskMod();
  });
  if (entry) {
    if (!entry.getScoreMod().empty())
      scoreModRegion = &entry.getScoreMod();
    if (!entry.getMaskMod().empty())
      maskModRegion = &entry.getMaskMod();
    for (Value extra : entry.getExtras()) {
      BlockArgument argument = entryArgument(extra, func);
      if (!argument)
        return makeError("the extras of fa4.attention must be arguments of @" +
                         func.getName().str() +
                         " (directly or through bufferization.to_buffer)");
      mods->extraArguments.push_back(extra);
      mods->extraNumbers.push_back(argument.getArgNumber());
    }
    if (std::optional<uint64_t> position = entry.getBlockMask())
      mods->blockMaskIndex = *position;
    if (std::optional<uint64_t> position = entry.getSequsedK())
      mods->seqUsedKIndex = *position;
    if (std::optional<uint64_t> position = entry.getBlockTable())
      mods->blockTableIndex = *position;
    if (std::optional<uint64_t> position = entry.getSplitWorkspace()) {
      mods->splitWorkspaceIndex = *position;
      mods->numSplits = static_cast<int64_t>(entry.getNumSplits().value_or(1));
    }
    if (std::optional<uint64_t> position = entry.getCuSeqlensQ())
      mods->cuSeqlensQIndex = *position;
    if (std::optional<uint64_t> position = entry.getCuSeqlensK())
      mods->cuSeqlensKIndex = *position;
    std::optional<uint64_t> descales[] = {
        entry.getQDescale(), entry.getKDescale(), entry.getVDescale()};
    for (auto [which, position] : llvm::enumerate(descales))
      if (position)
        mods->descaleIndex[which] = *position;
  } else if (backwardEntry) {
    // The backward's entry: the same regions and extras, none of the
    // serving tables.
    if (!backwardEntry.getScoreMod().empty())
      scoreModRegion = &backwardEntry.getScoreMod();
    if (!backwardEntry.getMaskMod().empty())
      maskModRegion = &backwardEntry.getMaskMod();
    for (Value extra : backwardEntry.getExtras()) {
      BlockArgument argument = entryArgument(extra, func);
      if (!argument)
        return makeError("the extras of fa4.attention_backward must be "
                         "arguments of @" +
                         func.getName().str());
      mods->extraArguments.push_back(extra);
      mods->extraNumbers.push_back(argument.getArgNumber());
    }
  } else if (BackwardSpecAttr spec = getBackwardSpec(func)) {
    for (int64_t position : spec.getExtras()) {
      mods->extraArguments.push_back(func.getArgument(position));
      mods->extraNumbers.push_back(position);
    }
  } else if (KernelSpecAttr spec = getKernelSpec(func)) {
    // Its positions are memref arguments (fa4.spec's verifier).
    if (std::optional<int64_t> position = spec.getBlockMask())
      mods->blockMaskIndex = *position;
    if (std::optional<int64_t> position = spec.getSequsedK())
      mods->seqUsedKIndex = *position;
    if (std::optional<int64_t> position = spec.getBlockTable())
      mods->blockTableIndex = *position;
    if (std::optional<int64_t> position = spec.getSplitWorkspace()) {
      mods->splitWorkspaceIndex = *position;
      mods->numSplits = spec.getSplits();
    }
    if (std::optional<int64_t> position = spec.getCuSeqlensQ())
      mods->cuSeqlensQIndex = *position;
    if (std::optional<int64_t> position = spec.getCuSeqlensK())
      mods->cuSeqlensKIndex = *position;
    std::optional<int64_t> descales[] = {
        spec.getQDescale(), spec.getKDescale(), spec.getVDescale()};
    for (auto [which, position] : llvm::enumerate(descales))
      if (position)
        mods->descaleIndex[which] = *position;
    for (int64_t position : spec.getExtras()) {
      mods->extraArguments.push_back(func.getArgument(position));
      mods->extraNumbers.push_back(position);
    }
  }
  for (auto [region, program, leading] :
       {std::tuple{scoreModRegion, &mods->scoreMod, 5u},
        std::tuple{maskModRegion, &mods->maskMod, 4u}}) {
    if (!region)
      continue;
    if (region->getNumArguments() != leading + mods->extraArguments.size())
      return makeError("a mod region takes " +
                       std::to_string(region->getNumArguments()) +
                       " arguments, but the attention has " +
                       std::to_string(mods->extraArguments.size()) + " extras");
    std::string error;
    *program = ModProgram::compile(*region, error);
    if (!*program)
      return makeError(error);
  }
  if (mods->blockTableIndex &&
      *mods->blockTableIndex >= mods->extraArguments.size())
    return makeError("the block table is extra #" +
                     std::to_string(*mods->blockTableIndex) + ", but there are " +
                     std::to_string(mods->extraArguments.size()) + " extras");
  if (mods->seqUsedKIndex &&
      *mods->seqUsedKIndex >= mods->extraArguments.size())
    return makeError("the seqused_k table is extra #" +
                     std::to_string(*mods->seqUsedKIndex) + ", but there are " +
                     std::to_string(mods->extraArguments.size()) + " extras");
  if (mods->splitWorkspaceIndex &&
      *mods->splitWorkspaceIndex >= mods->extraArguments.size())
    return makeError("the split-KV workspace is extra #" +
                     std::to_string(*mods->splitWorkspaceIndex) +
                     ", but there are " +
                     std::to_string(mods->extraArguments.size()) + " extras");
  for (std::optional<size_t> table :
       {mods->cuSeqlensQIndex, mods->cuSeqlensKIndex})
    if (table && *table >= mods->extraArguments.size())
      return makeError("a cu_seqlens table is extra #" + std::to_string(*table) +
                       ", but there are " +
                       std::to_string(mods->extraArguments.size()) + " extras");
  for (std::optional<size_t> table : mods->descaleIndex)
    if (table && *table >= mods->extraArguments.size())
      return makeError("a descale table is extra #" + std::to_string(*table) +
                       ", but there are " +
                       std::to_string(mods->extraArguments.size()) + " extras");
  if (mods->blockMaskIndex &&
      *mods->blockMaskIndex >= mods->extraArguments.size())
    return makeError("the block mask is extra #" +
                     std::to_string(*mods->blockMaskIndex) +
                     ", but there are " +
                     std::to_string(mods->extraArguments.size()) + " extras");
  for (Value extra : mods->extraArguments) {
    auto type = cast<MemRefType>(extra.getType());
    ModBuffer buffer;
    buffer.dtype = str(type.getElementType());
    buffer.integer = type.getElementType().isIntOrIndex();
    mods->extraBuffers.push_back(std::move(buffer));
  }
  for (const ModBuffer &buffer : mods->extraBuffers)
    mods->extraPointers.push_back(&buffer);
  return std::move(mods);
}

std::vector<int64_t> mlir::fa4::sim::drawKeyCounts(int64_t batch, int64_t seqK,
                                   uint64_t seed) {
  std::vector<int64_t> edges = {0, 1, seqK};
  if (seqK > 129)
    edges.insert(edges.end(), {127, 129});
  // Half the batch (at most the edges) takes an edge count, so that a batch
  // of one or two still draws counts in between.
  int64_t edged = std::min<int64_t>(edges.size(), batch / 2);
  std::mt19937_64 random(seed * 104729 + 17);
  std::uniform_int_distribution<int64_t> uniform(0, seqK);
  std::vector<int64_t> counts(batch);
  for (int64_t b = 0; b < batch; ++b)
    counts[b] = b < edged ? std::min(edges[b], seqK) : uniform(random);
  // The edge cases at seeded places, not always the first sequences.
  std::shuffle(counts.begin(), counts.end(), random);
  return counts;
}

std::vector<int64_t> mlir::fa4::sim::drawKeyCountsFor(const Problem &p,
                                                      uint64_t seed) {
  if (!p.isVarlen())
    return drawKeyCounts(p.batch, p.seqK, seed);
  // Each sequence's count within its own keys.
  std::vector<int64_t> counts;
  for (int64_t b = 0; b < p.sequences(); ++b)
    counts.push_back(
        drawKeyCounts(1, p.cuSeqlensK[b + 1] - p.cuSeqlensK[b], seed + b)[0]);
  return counts;
}

std::vector<int64_t> mlir::fa4::sim::drawSequenceLengths(int64_t batch,
                                                         int64_t longest,
                                                         uint64_t seed,
                                                         uint64_t order,
                                                         int64_t edgeShift) {
  std::vector<int64_t> edges;
  for (int64_t edge : {int64_t(0), int64_t(1), int64_t(127), int64_t(128),
                       int64_t(129), longest})
    if (edge <= longest && !llvm::is_contained(edges, edge))
      edges.push_back(edge);
  // From four sequences on: with fewer an edge pair would be the empty
  // one, and two sequences the work of one.
  int64_t edged =
      batch < 4 ? 0 : std::min<int64_t>(edges.size(), batch / 2);
  std::mt19937_64 random(seed * 6700417 + 29);
  std::uniform_int_distribution<int64_t> uniform(0, longest);
  std::vector<int64_t> lengths(batch);
  for (int64_t b = 0; b < batch; ++b)
    lengths[b] = b < edged ? edges[(b + edgeShift) % edged] : uniform(random);
  std::mt19937_64 shuffler(order * 40503 + 17);
  std::shuffle(lengths.begin(), lengths.end(), shuffler);
  return lengths;
}

void mlir::fa4::sim::drawVarlenBatch(Problem &p, int64_t sequences,
                                     int64_t longestQ, int64_t longestK,
                                     uint64_t seed) {
  auto cumulative = [](const std::vector<int64_t> &lengths) {
    std::vector<int64_t> table{0};
    for (int64_t length : lengths)
      table.push_back(table.back() + length);
    return table;
  };
  // One order for both: edge lengths meet edge lengths (K's one place on:
  // queries without keys, keys without queries), random ones random ones.
  p.cuSeqlensQ =
      cumulative(drawSequenceLengths(sequences, longestQ, seed, seed));
  p.cuSeqlensK = cumulative(
      drawSequenceLengths(sequences, longestK, seed * 31 + 7, seed, 1));
  p.batch = 1;
  p.seqQ = p.cuSeqlensQ.back() + kVarlenSpareRows;
  p.seqK = p.cuSeqlensK.back() + kVarlenSpareRows;
}

std::vector<double> sim::drawDescales(int64_t count, uint64_t seed,
                                      size_t index) {
  // Seeded per extra as fillExtras seeds the others.
  std::mt19937_64 random(seed * 7919 + index);
  std::uniform_real_distribution<double> uniform(0.5, 2.0);
  std::vector<double> table(count);
  for (double &value : table)
    value = static_cast<float>(uniform(random));
  return table;
}

llvm::Error Mods::fillExtras(const Problem &p, uint64_t seed) {
  int64_t dynamicSize = std::max({p.batch, p.seqQ, p.seqK, p.qHeads});
  for (auto [i, extra] : llvm::enumerate(extraArguments)) {
    auto type = cast<MemRefType>(extra.getType());
    ModBuffer &buffer = extraBuffers[i];
    buffer.shape.clear();
    int64_t count = 1;
    // The block mask's dynamic sizes are batch, q_heads and query blocks.
    bool blockMask = blockMaskIndex && *blockMaskIndex == i;
    bool seqUsed = seqUsedKIndex && *seqUsedKIndex == i;
    bool blockTable = blockTableIndex && *blockTableIndex == i;
    bool workspace = splitWorkspaceIndex && *splitWorkspaceIndex == i;
    const std::vector<int64_t> *cuSeqlens =
        cuSeqlensQIndex && *cuSeqlensQIndex == i   ? &p.cuSeqlensQ
        : cuSeqlensKIndex && *cuSeqlensKIndex == i ? &p.cuSeqlensK
                                                   : nullptr;
    bool descale = llvm::is_contained(descaleIndex, std::optional<size_t>(i));
    int64_t descaleSizes[] = {p.sequences(), p.kvHeads};
    int64_t packing = gqaPacking(p.kvHeads > 0 ? p.qHeads / p.kvHeads : 1);
    SplitWorkspaceLayout layout = splitWorkspaceLayout(
        p.batch, p.qHeads / packing, p.seqQ, packing, numSplits, p.vDim());
    int64_t tableSizes[] = {p.batch,
                            p.pageSize ? ceilDiv(p.seqK, p.pageSize) : 1};
    int64_t blockMaskSizes[] = {p.batch, p.qHeads,
                                ceilDiv(p.seqQ, kBlockMaskQueries), 4};
    for (auto [position, dim] : llvm::enumerate(type.getShape())) {
      int64_t size = !ShapedType::isDynamic(dim) ? dim
                     : blockMask                 ? blockMaskSizes[position]
                     : seqUsed                   ? p.sequences()
                     : cuSeqlens ? static_cast<int64_t>(cuSeqlens->size())
                     : blockTable                ? tableSizes[position]
                     : workspace                 ? layout.words()
                     : descale && position < 2   ? descaleSizes[position]
                                                 : dynamicSize;
      if (size <= 0 || size > (int64_t(1) << 26) / count)
        return makeError(
            std::string(workspace ? "the split-KV workspace " : "an extra ") +
            "of type " + str(type) +
            " would need more than 2^26 elements (or has a zero dimension)" +
            (workspace ? ": simulate fewer parts or a smaller problem" : ""));
      buffer.shape.push_back(size);
      count *= size;
    }
    buffer.data.assign(count, 0.0);
    if (descale && (buffer.shape.size() != 2 ||
                    buffer.shape[0] != p.sequences() ||
                    buffer.shape[1] != p.kvHeads))
      return makeError("the descale table " + str(type) + " is not [" +
                       std::to_string(p.sequences()) + ", " +
                       std::to_string(p.kvHeads) +
                       "] for this run's sequences and K/V heads");
    if (workspace) {
      if (count < layout.words())
        return makeError("the split-KV workspace " + str(type) + " has " +
                         std::to_string(count) + " words; the problem needs " +
                         std::to_string(layout.words()));
      continue; // zero: the counters start there
    }
    if (blockTable)
      continue; // drawn below, after the seqused_k table
    if (cuSeqlens) {
      if (count != static_cast<int64_t>(cuSeqlens->size()))
        return makeError("the cu_seqlens table " + str(type) + " has " +
                         std::to_string(count) + " entries for " +
                         std::to_string(p.sequences()) + " sequences");
      for (auto [b, entry] : llvm::enumerate(*cuSeqlens))
        buffer.data[b] = static_cast<double>(entry);
      continue;
    }
    if (seqUsed) {
      if (count != p.sequences())
        return makeError("the seqused_k table " + str(type) + " has " +
                         std::to_string(count) + " entries for " +
                         std::to_string(p.sequences()) + " sequences");
      std::vector<int64_t> counts = drawKeyCountsFor(p, seed);
      for (int64_t b = 0; b < p.sequences(); ++b)
        buffer.data[b] = static_cast<double>(counts[b]);
      continue;
    }
    // (The verifier holds a descale table to f32.)
    if (descale) {
      buffer.data = drawDescales(count, seed, i);
      continue;
    }
    std::mt19937_64 random(seed * 7919 + i);
    if (!buffer.integer) {
      std::uniform_real_distribution<double> uniform(-1.0, 1.0);
      for (double &value : buffer.data)
        value = roundScalar(type.getElementType(), uniform(random));
      continue;
    }
    // Runs of 1 to len/2 equal ids along the last dimension: a few
    // documents per sequence.
    int64_t row = buffer.shape.empty() ? 1 : buffer.shape.back();
    std::uniform_int_distribution<int64_t> runLength(
        1, std::max<int64_t>(1, row / 2));
    for (int64_t start = 0; start < count; start += row) {
      int64_t id = 0, left = runLength(random);
      for (int64_t j = 0; j < row; ++j) {
        if (left-- == 0) {
          ++id;
          left = runLength(random) - 1;
        }
        buffer.data[start + j] = static_cast<double>(id);
      }
    }
  }
  if (blockTableIndex)
    if (llvm::Error refused = fillBlockTable(p, seed))
      return refused;
  if (blockMaskIndex)
    return fillBlockMask(p);
  return llvm::Error::success();
}

llvm::Error Mods::fillBlockTable(const Problem &p, uint64_t seed) {
  ModBuffer &table = extraBuffers[*blockTableIndex];
  if (!p.pageSize || table.shape.size() != 2 || table.shape[0] != p.batch ||
      table.shape[1] * p.pageSize != p.seqK)
    return makeError("the block table does not fit the paged cache: give a "
                     "seq_k that is a whole number of pages (" +
                     std::to_string(p.pageSize) + " keys each)");
  std::vector<int64_t> counts;
  if (seqUsedKIndex)
    for (double keys : extraBuffers[*seqUsedKIndex].data)
      counts.push_back(static_cast<int64_t>(keys));
  std::vector<int64_t> drawn =
      drawBlockTable(p.batch, table.shape[1], p.pageSize,
                     seqUsedKIndex ? &counts : nullptr, seed);
  for (auto [i, entry] : llvm::enumerate(drawn))
    table.data[i] = static_cast<double>(entry);
  return llvm::Error::success();
}

std::vector<int64_t>
mlir::fa4::sim::drawBlockTable(int64_t batch, int64_t maxBlocks, int64_t page,
                               const std::vector<int64_t> *keyCounts,
                               uint64_t seed) {
  int64_t blocks = pagedCacheBlocks(batch, maxBlocks);
  std::vector<int64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 random(seed * 15485863 + 5);
  std::shuffle(order.begin(), order.end(), random);
  std::vector<int64_t> table(batch * maxBlocks);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < maxBlocks; ++i) {
      // Alternately past the cache and negative.
      bool past = keyCounts && b < static_cast<int64_t>(keyCounts->size()) &&
                  i * page >= (*keyCounts)[b];
      table[b * maxBlocks + i] =
          past ? ((b + i) % 2 ? blocks + b : -1) : order[b * maxBlocks + i];
    }
  return table;
}

void mlir::fa4::sim::scatterPages(const std::vector<float> &dense,
                                  const ModBuffer &table, int64_t page,
                                  int64_t heads, int64_t dim, int64_t numBlocks,
                                  std::vector<float> &cache) {
  int64_t batch = table.shape[0], maxBlocks = table.shape[1];
  int64_t pageElements = page * heads * dim;
  cache.assign(numBlocks * pageElements, 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < maxBlocks; ++i) {
      double entry = table.data[b * maxBlocks + i];
      if (!(entry >= 0.0) || entry >= double(numBlocks))
        continue;
      const float *from =
          &dense[(b * maxBlocks + i) * pageElements];
      std::copy(from, from + pageElements,
                &cache[static_cast<int64_t>(entry) * pageElements]);
    }
}

// As FlexAttention's create_block_mask does: the mask_mod evaluated on every
// (query, key) pair. A broadcast dimension (size 1) takes the union of what
// its batches or heads see, and the intersection of what they see whole.
llvm::Error Mods::fillBlockMask(const Problem &p) {
  ModBuffer &buffer = extraBuffers[*blockMaskIndex];
  if (buffer.shape.size() != 4 || buffer.shape[3] != 4 ||
      (buffer.shape[0] != 1 && buffer.shape[0] != p.batch) ||
      (buffer.shape[1] != 1 && buffer.shape[1] != p.qHeads) ||
      buffer.shape[2] != ceilDiv(p.seqQ, kBlockMaskQueries))
    return makeError("the block mask's sizes do not fit [batch or 1, q_heads "
                     "or 1, ceil(seq_q / 128), 4] for these sizes");
  if (!maskMod)
    return makeError("a block mask needs a mask_mod to describe");
  std::string error; // what a run of the mask_mod met
  int64_t kvBlocks = ceilDiv(p.seqK, kBlockMaskKeys);
  for (int64_t b = 0; b < buffer.shape[0]; ++b)
    for (int64_t h = 0; h < buffer.shape[1]; ++h)
      for (int64_t qb = 0; qb < buffer.shape[2]; ++qb) {
        int64_t firstQuery = qb * kBlockMaskQueries;
        int64_t lastQuery = std::min(p.seqQ, firstQuery + kBlockMaskQueries);
        std::vector<bool> seen(kvBlocks, false), whole(kvBlocks, true);
        for (int64_t kb = 0; kb < kvBlocks; ++kb)
          for (int64_t bb = 0; bb < p.batch; ++bb)
            for (int64_t hh = 0; hh < p.qHeads; ++hh) {
              if ((buffer.shape[0] != 1 && bb != b) ||
                  (buffer.shape[1] != 1 && hh != h))
                continue;
              for (int64_t q = firstQuery; q < lastQuery; ++q)
                for (int64_t k = kb * kBlockMaskKeys;
                     k < std::min(p.seqK, (kb + 1) * kBlockMaskKeys); ++k) {
                  double arguments[] = {double(bb), double(hh), double(q),
                                        double(k)};
                  double result = 1.0;
                  if (!maskMod->run(arguments, extraPointers, /*rounded=*/false,
                                    result, error))
                    return makeError(error);
                  (result != 0.0 ? seen : whole)[kb] = result != 0.0;
                }
            }
        BlockMaskEntry entry = blockMaskEntry(seen, whole);
        double *out = &buffer.data[((b * buffer.shape[1] + h) * buffer.shape[2] + qb) * 4];
        out[0] = double(entry.begin);
        out[1] = double(entry.fullBegin);
        out[2] = double(entry.fullEnd);
        out[3] = double(entry.end);
      }
  return llvm::Error::success();
}

llvm::Error Mods::setExtra(size_t index, llvm::ArrayRef<float> values) {
  ModBuffer &buffer = extraBuffers[index];
  assert(values.size() == buffer.data.size() && "fillExtras sizes the extras");
  Type element =
      cast<MemRefType>(extraArguments[index].getType()).getElementType();
  for (auto [i, value] : llvm::enumerate(values)) {
    // Integers within their type's range (an i1 is 0 or 1).
    unsigned width = element.isIntOrIndex() && !element.isIndex()
                         ? element.getIntOrFloatBitWidth()
                         : 64;
    double limit = width == 1 ? 2.0 : std::ldexp(1.0, int(width) - 1);
    double low = width == 1 ? 0.0 : -limit;
    if (buffer.integer && std::isfinite(value) && std::trunc(value) == value &&
        !(value >= low && value < limit))
      return makeError("element " + std::to_string(i) + " of extra #" +
                       std::to_string(index) + " is " + std::to_string(value) +
                       ", outside the range of its type " + buffer.dtype);
    if (buffer.integer && (!std::isfinite(value) || std::trunc(value) != value))
      return makeError("element " + std::to_string(i) + " of extra #" +
                       std::to_string(index) + " is " + std::to_string(value) +
                       ", not a whole number of its type " + buffer.dtype);
    buffer.data[i] = buffer.integer ? value : roundScalar(element, value);
  }
  return llvm::Error::success();
}

void Mods::attach(Problem &problem) {
  // FP8's descale tables, [sequences, kv_heads] (read from a file, a table
  // of another shape was refused by readExtras' shape check).
  for (auto [index, table] :
       llvm::zip_equal(descaleIndex,
                       std::array<std::vector<double> *, 3>{
                           &problem.qDescale, &problem.kDescale,
                           &problem.vDescale})) {
    table->clear();
    if (!index)
      continue;
    const ModBuffer &buffer = extraBuffers[*index];
    if (static_cast<int64_t>(buffer.data.size()) ==
        problem.sequences() * problem.kvHeads)
      *table = buffer.data;
  }
  // Each sequence's keys, clamped as the kernel clamps them (the table may
  // have been read from a file).
  if (seqUsedKIndex) {
    const ModBuffer &table = extraBuffers[*seqUsedKIndex];
    problem.seqUsedK.clear();
    for (int64_t b = 0; b < problem.sequences(); ++b) {
      double keys = b < static_cast<int64_t>(table.data.size()) ? table.data[b]
                                                                : 0.0;
      problem.seqUsedK.push_back(keys <= 0.0 ? 0
                                 : keys >= double(problem.seqK)
                                     ? problem.seqK
                                     : static_cast<int64_t>(keys));
    }
  }
  // An entry with a score_mod has no softcap attribute (the verifier says
  // so); a softcap the lowering reports then is the region itself, taken
  // down the softcap's path. The reference runs the region, not both.
  if (scoreMod)
    problem.softcap = 0.0;
  if (scoreMod)
    problem.scoreMod = [this](double score, int64_t b, int64_t h, int64_t i,
                              int64_t j) {
      double arguments[] = {score, double(b), double(h), double(i), double(j)};
      double result = score;
      if (runError.empty())
        scoreMod->run(arguments, extraPointers, /*rounded=*/false, result,
                      runError);
      return result;
    };
  if (maskMod)
    problem.maskMod = [this](int64_t b, int64_t h, int64_t i, int64_t j) {
      double arguments[] = {double(b), double(h), double(i), double(j)};
      double result = 1.0;
      if (runError.empty())
        maskMod->run(arguments, extraPointers, /*rounded=*/false, result,
                     runError);
      return result != 0.0;
    };
}
