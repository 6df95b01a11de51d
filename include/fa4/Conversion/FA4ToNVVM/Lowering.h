//===- Lowering.h - level C to NVVM, shared by the concern files -*- C++ -*-===//
//
// The level-C function is re-emitted op by op into an llvm.func kernel, each
// value of level C mapped to its per-thread value: a tile held by a
// warpgroup (tensor<128xNxT>) becomes the thread's row (vector<NxT>), a row
// vector (tensor<128xT>) the thread's element, a shared-memory buffer or
// mbarrier array its base pointer, a TMEM buffer its first column.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_CONVERSION_FA4TONVVM_LOWERING_H
#define FA4_CONVERSION_FA4TONVVM_LOWERING_H

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Target.h"
#include "fa4/Transforms/MaskAnalysis.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"

#include <array>

namespace mlir::fa4::nvvm {

/// Shared-memory tiles are laid out as TMA writes them: boxes of 64 columns
/// of 16-bit elements, one 128-byte swizzle line per row, box after box.
constexpr int64_t kBoxColumns = 64;
constexpr int64_t kSwizzleLineBytes = 128;
/// Bytes from one 8-row group of a 128-byte-swizzled tile to the next.
constexpr uint32_t kSwizzleAtomBytes = 1024;
/// K elements per wgmma of 16-bit inputs.
constexpr int64_t kWgmmaK = 16;
/// Marks the tcgen05 fences lowerBarrier puts at every wait and arrive of a
/// role that touches tensor memory: placeTensorFences may move them.
constexpr const char *kMovableFence = "fa4.movable_fence";
/// Moves the marked fences of a lowered role (`roleBlock`, structured control
/// flow) to where the paths through it need them (Fences.cpp says how).
void placeTensorFences(Block &roleBlock);

/// Bytes from one box of `type`'s tile to the next: its rows' lines.
inline int64_t boxBytes(SmemType type) {
  return type.getRows() * kSwizzleLineBytes;
}
/// Columns of one box of `type`'s tile: a 128-byte line of its elements
/// (64 of 16 bits, 32 of f32).
inline int64_t boxColumns(SmemType type) {
  return kSwizzleLineBytes * 8 / type.getElementType().getIntOrFloatBitWidth();
}
/// Bytes of one stage of a level-C buffer in this CTA's shared memory
/// (half an item of a CTA pair's split ring, fa4.smem_alloc's pair_half).
inline int64_t ctaStageBytes(Value buffer) {
  if (auto alloc = buffer.getDefiningOp<SmemAllocOp>())
    return alloc.getCtaStageBytes();
  return cast<SmemType>(buffer.getType()).getStageBytes();
}
/// Whether a level-C buffer is a CTA pair's split ring.
inline bool isPairHalf(Value buffer) {
  auto alloc = buffer.getDefiningOp<SmemAllocOp>();
  return alloc && alloc.getPairHalf();
}

/// A thread's vector of `elements` (one type, at least one).
Value vectorOf(OpBuilder &b, Location loc, ArrayRef<Value> elements);

class Lowering;

/// The narrow interface between the shared lowering and a chip family's:
/// how a level-C tile maps onto a thread's registers, and the ops the
/// family lowers its own way. Everything else (structure, the prologue and
/// role dispatch, the scheduler, barriers, TMA, shared memory, the row
/// math both families share, the mods) is lowered once, in the shared
/// files. One implementation per family, in its folder (Blackwell/,
/// Hopper/); a new family is a class there and a case of `familyLowering`.
class FamilyLowering {
public:
  virtual ~FamilyLowering() = default;
  virtual target::Family family() const = 0;
  /// The per-thread type of a tile held by a warpgroup (rank 2) or of a
  /// row vector (rank 1).
  virtual Type convertTile(RankedTensorType tile) const = 0;
  /// Whether the family has packed f32 arithmetic (sm_100's add/sub/mul/
  /// fma.f32x2, from vector<2xf32> ops): the backward's pointwise chain
  /// then works on adjacent pairs of a thread's elements.
  virtual bool packsF32() const = 0;
  /// Lowers `op` when the family lowers it its own way (its tensor-core
  /// and tensor-memory ops, and the row ops whose thread layout differs);
  /// std::nullopt leaves it to the shared lowering.
  virtual std::optional<LogicalResult> lowerOwn(Lowering &lowering,
                                                Operation *op) const = 0;

  // The thread's rows, for the row ops lowered once (normalization, LSE
  // store): how a thread holds the rows of a tile, not what is computed on
  // them.
  /// The thread's rows of the tile (index values, from the tile's first).
  virtual SmallVector<Value, 2> threadRows(Lowering &lowering) const = 0;
  /// An i1 that holds on the one thread that writes its rows' scalars out,
  /// where several threads share a row; a null Value where each row is one
  /// thread's.
  virtual Value rowWriter(Lowering &lowering) const = 0;
  /// The scalar of each of the thread's rows in a row vector, and back.
  virtual SmallVector<Value, 2> rowScalars(Lowering &lowering,
                                           Value rowVector) const = 0;
  virtual Value rowVector(Lowering &lowering, ArrayRef<Value> rows) const = 0;
  /// The row's total of a per-thread partial sum, over the threads that
  /// share the row.
  virtual Value rowTotal(Lowering &lowering, Value partial) const = 0;
  /// A value of each of the thread's rows, spread over `tile` (a per-thread
  /// tile vector) element by element.
  virtual Value spreadRows(Lowering &lowering, ArrayRef<Value> rows,
                           VectorType tile) const = 0;

  /// Elements [first, first + length) of a thread's tile vector of
  /// `elements`: side by side in its row `half` (an index into threadRows),
  /// from column `column` (an index value) on.
  struct ElementRun {
    unsigned half;
    int64_t first, length;
    Value column;
  };
  /// The thread's elements of a tile vector as runs, in order, for the
  /// global stores and loads of split-KV (at most 4 elements a run).
  virtual SmallVector<ElementRun> elementRuns(Lowering &lowering,
                                              int64_t elements) const = 0;
  /// Which of the threads that share the thread's rows it is (0 to
  /// kSplitSlots - 1): a split-KV workspace slot per such thread.
  virtual Value rowShareSlot(Lowering &lowering) const = 0;

  // The backward's transposed tiles (rows keys, columns packed query rows;
  // Backward.cpp): a vector along the columns (the LSE, delta) holds one
  // value per column the thread has.
  /// The tile columns the thread holds of a tile `columns` wide (index
  /// values, from the tile's first), in the order its column vectors hold
  /// them.
  virtual SmallVector<Value> threadColumns(Lowering &lowering,
                                           int64_t columns) const = 0;
  /// Element `element` of a thread's tile vector: its index in the
  /// thread's column vector, and in threadRows.
  virtual int64_t columnSlot(int64_t element) const = 0;
  virtual unsigned rowSlot(int64_t element) const = 0;
};

/// The lowering of `family`'s schedules.
const FamilyLowering &familyLowering(target::Family family);
/// Each family's, in its folder.
const FamilyLowering &blackwellLowering();
const FamilyLowering &hopperLowering();

/// What the whole kernel shares: decided once, before any role is lowered.
struct KernelState {
  /// Base of the dynamic shared memory.
  Value smem;
  /// Byte offset of every shared-memory buffer and mbarrier array.
  llvm::DenseMap<Operation *, int64_t> smemOffset;
  int64_t tmemSlotOffset = 0;
  /// The loader's own mbarrier (count 1) through which a V copy with rows
  /// to clear completes (fa4.tma_load's clear_from), -1 when none has.
  int64_t clearBarrierOffset = -1;
  int64_t smemBytes = 0;
  int64_t tmemColumns = 0;
  /// The TMEM base address, loaded once after the allocation.
  Value tmemBase;
  Value threadId;
  /// Kernel parameters standing for the level-C function's memrefs.
  llvm::DenseMap<Value, Value> tensorMaps;
  llvm::DenseMap<Value, Value> globalPointers;
  Value batch, seqQ, seqK;
  Value q, k, v, out, lse;
  /// An extra the mod regions read: its global pointer and its sizes (index
  /// values; the dynamic ones are kernel parameters).
  struct Extra {
    Value pointer;
    SmallVector<Value> sizes;
  };
  llvm::DenseMap<Value, Extra> extras;
  /// Split-KV kernels write O row by row: its address and its strides in
  /// elements (batch, sequence, head), kernel parameters.
  Value outPointer;
  Value outStrides[3];
  /// The backward's tensors written by address (dK, dV): their strides in
  /// elements (batch, sequence, head), kernel parameters; the address is
  /// in globalPointers.
  llvm::DenseMap<Value, std::array<Value, 3>> strides;
  double exp2EmulationFraction = 0.0;
  /// CTA pairs (fa4.warp_specialize's cta_pair): the kernel runs as
  /// clusters of two; the even CTA's MMA warp issues the pair's MMAs.
  bool ctaPair = false;
  /// The pair's barriers (their fa4.mbarrier_alloc ops): those the MMA
  /// warp waits on in its task loop, which the even CTA's copy of holds
  /// for both CTAs (its arrival count doubled), each CTA arriving on it
  /// through its shared::cluster address.
  llvm::DenseSet<Operation *> pairBarriers;
  /// The barriers both CTAs' copies of which count both CTAs' arrivals:
  /// those the MMA warp waits on after its task loop (the TMEM release:
  /// the pair frees TMEM only once neither CTA's warps touch it, PTX ISA
  /// tcgen05 "Issue Granularity"). Each arrival is made on both copies.
  llvm::DenseSet<Operation *> mirroredBarriers;
  /// The lowering of the schedule's chip family: Blackwell's (tiles in
  /// TMEM, a row per thread; Blackwell/) or Hopper's (tiles in registers in
  /// wgmma's fragment layout; Hopper/).
  const FamilyLowering *family = nullptr;
};

/// Re-emits level-C ops as per-thread code at a builder's insertion point.
class Lowering {
public:
  Lowering(OpBuilder &builder, KernelState &kernel)
      : b(builder), kernel(kernel) {}

  LogicalResult lowerBlock(Block &block);
  LogicalResult lowerOp(Operation *op);

  /// The per-thread type of a level-C type.
  Type convertType(Type type);

  IRMapping mapping;

private:
  friend struct RoleScope;
  friend class BlackwellLowering;
  friend class HopperLowering;

  // Helpers shared by the concern files.
  Location loc() const { return currentLoc; }
  Value i32(int64_t value);
  Value i64(int64_t value);
  Value index(int64_t value);
  Value f32(float value);
  Value toI32(Value value);
  Value toIndex(Value value);
  Value lookup(Value value) {
    if (!lazyTruncations.empty())
      materializeTruncation(value);
    return mapping.lookup(value);
  }
  /// Hopper's P is converted to the input type where it is first used, not
  /// where the softmax computes it: in the pipelined loop that is after the
  /// wait for the value MMA that reads the previous P, whose registers the
  /// new P then takes (FlashAttention-3's order). With `previous`, the P a
  /// loop carried in, each packed word is written over the previous one's
  /// register (see Warpgroup.cpp).
  void materializeTruncation(Value value, Value previous = Value());
  /// `base` plus `bytes` in shared memory.
  Value smemAt(Value base, Value bytes);
  /// The 32-bit shared address of a pointer.
  Value smemAddress(Value pointer);
  /// A row vector of `count` elements (a multiple of 32) in a single-warp
  /// role: element i lives in lane i mod 32; the lane's i-th slot holds
  /// element lane + 32·i. Returns the lane's element positions.
  SmallVector<Value> laneStrided(int64_t count);
  /// Runs `body` on the role's elected thread only (see `roleElected`).
  /// A paged K/V tile: its pages gathered through the block table.
  LogicalResult lowerPagedLoad(TmaLoadOp load, Value blockTable, SmemType type,
                               function_ref<void(int64_t, ValueRange)> copy,
                               function_ref<void()> then = nullptr);
  /// Whether a TMA copy with rows to clear (fa4.tma_load's clear_from) must
  /// clear some: clear_from below the tile's rows.
  Value clearsRows(TmaLoadOp load);
  /// The elected loader's end of such a copy: wait for it on the loader's
  /// own barrier (`state` its arrival), zero the rows from clear_from,
  /// fence them for the async proxy and arrive on the load's barrier.
  void clearLoadedRows(TmaLoadOp load, Value stage, Value state);
  void ifElected(function_ref<void()> body);
  /// This thread's row of a warpgroup tile (0..127) as an index.
  Value rowInWarpgroup();
  /// The lane field of a TMEM address for this thread's warp.
  Value tmemLaneField();
  /// `value` again, through an opaque move at the current point (constants
  /// and values of other types as they are).
  Value rematerializeAtRoleEntry(Value value);
  /// A 32-bit special register constant for the CTA's life
  /// (`%cluster_ctarank`): a pure read, which LLVM hoists out of loops.
  Value specialRegister(StringRef name);
  /// The TMEM base with this warp's lane field, warp-uniform, once per role.
  Value roleTmemBase();
  /// The TMEM address of column `column` (i32) of a buffer for this thread.
  Value tmemAddress(Value bufferColumn, Value column, int64_t elementBits);
  /// One PTX instruction as inline assembly: `instruction $0, $1, ...;`
  /// with a result of `type` and the operands, each an f32 ("f"), an i64
  /// ("l") or an i32 ("r"); any other type is a bug of the caller.
  Value inlinePtx(StringRef instruction, Type type, ValueRange operands);
  /// An f32 PTX instruction `name $0, $1;` (ex2.approx, lg2.approx).
  Value approximate(StringRef instruction, Value x);
  Value ex2(Value x) { return approximate("ex2.approx.ftz.f32", x); }
  Value lg2(Value x) { return approximate("lg2.approx.ftz.f32", x); }
  /// max·scale_log2 rounded toward +inf: the exponents s·scale_log2 - it,
  /// one FMA each, are then at most 0 for every s <= max, however large the
  /// product (rounded to nearest, its error reaches 2^(e-24) for a product
  /// of 2^e and the exponent of the max itself may come out positive: P
  /// above 1, past fp16's range for a finite-minimum mask's -1e9).
  Value scaledMax(Value max, float scaleLog2, Value factor = Value());
  /// scale_log2 as an f32 value: the constant, times `factor` when given.
  Value scaleLog2Value(float scaleLog2, Value factor);
  /// tanh(x·scale) = 1 - 2 / (2^(2·scale·x·log2 e) + 1) on MUFU.EX2 and
  /// MUFU.RCP (a full-precision division costs a dozen instructions more per
  /// score); saturates to ±1.
  Value tanh(Value x, float scale = 1.0f);
  /// Waits for this thread's tcgen05.ld and returns the loaded words, so
  /// that no use of them can be scheduled before the wait.
  Value waitForTmemLoad(Value raw);
  /// The same for several loads with one wait: their words, in order.
  SmallVector<Value> waitForTmemLoads(ArrayRef<Value> raws);
  /// Whether `loop` updates tensor memory in place chunk by chunk (the
  /// correction's rescale of O): its body holds only side-effect-free ops
  /// and TMEM loads and stores of one buffer at the induction variable, each
  /// at most a step of columns wide, so no trip reads what another stored.
  /// Its stores then share one tcgen05.wait::st after the loop.
  static bool storesWaitAfterLoop(scf::ForOp loop);
  /// A tcgen05 fence at a synchronization (`::after_thread_sync` after a
  /// wait, else `::before_thread_sync` before an arrive), in a role that
  /// touches tensor memory, marked movable (kMovableFence).
  void movableTensorFence(bool afterWait);
  Value barrierSlot(Value barrier, Value count);
  /// Ring item `count` (a level-C index) of a ring of `stages`: its stage,
  /// count mod stages, and its round, count / stages (lowered indices).
  /// Where `count` is x + c with x a multiple of some k dividing the stage
  /// count and c < k (a loader's K at 2·i and V at 2·i + 1), both come from
  /// x alone, which the items then share: one division for the pair.
  Value ringStage(Value count, int64_t stages);
  Value ringRound(Value count, int64_t stages);
  /// The stage of ring item `count` (a level-C index) of the shared-memory
  /// buffer `buffer` (a level-C value).
  Value smemStage(Value buffer, Value count);
  /// `copy` once per box of `type`'s tile (its byte offset and the box's
  /// TMA coordinates, columns from `firstColumn`), on the elected thread,
  /// then `then`.
  void forEachBox(SmemType type, Value head, Value row, Value batch,
                  int64_t ratio, function_ref<void(int64_t, ValueRange)> copy,
                  function_ref<void()> then = nullptr,
                  int64_t firstColumn = 0);

  // Generic structure.
  LogicalResult lowerFor(Operation *op);
  LogicalResult lowerIf(Operation *op);
  LogicalResult lowerConstant(arith::ConstantOp op);
  LogicalResult lowerWarpSpecialize(WarpSpecializeOp op);
  LogicalResult lowerRole(RoleOp role);
  // The role's entry: its live-ins re-made after setmaxnreg, its issuing
  // thread elected, its tensor maps prefetched.
  void rematerializeRoleLiveIns();
  void electRoleIssuer();
  void prefetchRoleTensorMaps();
  /// `exit;`, as inline assembly: the thread leaves the kernel here (in a
  /// kernel of CTA pairs after a cluster barrier: no CTA's shared memory
  /// ends while its peer may still reach it).
  void emitExit(bool clusterBarrier = true);
  /// CTA pairs: whether `barrier` (a level-C mbarrier array) is the pair's,
  /// and the shared::cluster address (i32) of slot `count` of the even
  /// CTA's copy of it.
  bool isPairBarrier(Value barrier) const;
  bool isMirroredBarrier(Value barrier) const;
  Value leaderBarrierSlot(Value barrier, Value count);
  /// The shared::cluster address (i32) of slot `count` of CTA `rank`'s
  /// copy of `barrier` (an i32 rank; the even CTA's without one).
  Value clusterBarrierSlot(Value barrier, Value count, Value rank);
  /// The semantics of an arrival on a peer CTA's (or the pair's) barrier:
  /// Lowering::remoteArrive says why `.release.cta`.
  static constexpr const char *kRemoteArriveSem = ".release.cta";
  /// mbarrier.arrive (kRemoteArriveSem) on a shared::cluster address,
  /// `count` arrivals.
  void remoteArrive(Value address, int64_t count);
  /// This CTA's rank in its pair (%cluster_ctarank), as an index.
  Value ctaRank();
  LogicalResult lowerScheduler(Operation *op);
  LogicalResult lowerKvBlockRange(KvBlockRangeOp range);
  /// AttentionMath's queryBlockRange on index values: the query blocks
  /// scanned, each block's key range by emitKvBlockRange.
  LogicalResult lowerQBlockRange(QBlockRangeOp range);
  LogicalResult lowerTaskCoords(TaskCoordsOp coords);
  /// Varlen's grid (AttentionMath.h's varlenTaskAt, varlenSlot).
  LogicalResult lowerVarlenTaskCoords(TaskCoordsOp coords);
  Value emitVarlenSlot(Value entry, Value b, Value total, int64_t ratio,
                       int64_t rows);
  /// The KV blocks the task of m_block `m` visits, its work in the LPT
  /// order.
  Value emitTaskWork(TaskCoordsOp coords, Value m);
  /// The m_blocks whose work exceeds `threshold`.
  Value emitCountAbove(TaskCoordsOp coords, Value mBlocks, Value threshold);
  /// The m_block of LPT rank `rank` when the work is not monotone in it.
  Value emitLptMBlock(TaskCoordsOp coords, Value mBlocks, Value rank);

  // Barriers and copies (Memory.cpp).
  LogicalResult lowerBarrier(Operation *op);
  LogicalResult lowerTma(Operation *op);
  LogicalResult lowerSmem(Operation *op);

  // Tensor memory and the tensor core (TensorCore.cpp).
  LogicalResult lowerTmem(Operation *op);
  LogicalResult lowerMma(Operation *op);

  // Row arithmetic of the softmax and correction roles (RowMath.cpp).
  LogicalResult lowerRowMath(Operation *op);
  /// The softcap of a tile already in registers, element by element (the
  /// Hopper fragments, the backward's TMEM chunks).
  LogicalResult lowerElementwiseSoftcap(SoftcapOp softcap);
  LogicalResult lowerOnlineSoftmax(OnlineSoftmaxOp op);
  // The softmax's steps, in the order it takes them.
  /// This thread's row of S from TMEM, `chunks` loads of 32 columns and one
  /// wait, as f32.
  SmallVector<Value> loadScoreRow(Value scoresColumn, int64_t chunks);
  /// cap·tanh(s·scale/cap) on each score.
  void applySoftcap(SoftcapOp softcap, MutableArrayRef<Value> s);
  LogicalResult applyScoreMod(ScoreModOp scoreMod, MutableArrayRef<Value> s);
  LogicalResult applyDeferredMask(MaskOp mask, Value condition,
                                  MutableArrayRef<Value> s);
  /// The scores with the keys `mask` hides at -inf: the band's keys by bit
  /// mask, the rest of a mask_mod per score.
  FailureOr<SmallVector<Value>> maskScores(MaskOp mask, ArrayRef<Value> s);
  /// The scores outside keys [low, high) of the tile (`lowRel`, `highRel`
  /// relative to its first; no `lowRel`: from 0) at `minusInfinity`.
  SmallVector<Value> maskScoresToKeys(ArrayRef<Value> s, Value lowRel,
                                      Value highRel, Value minusInfinity);
  Value rowMaxTree(ArrayRef<Value> s, Value rowMax);
  /// The row max after a block whose largest score is `candidate`, the
  /// factor that rescales the row's sum and O, and the max·scale_log2 the
  /// exponents subtract.
  struct RowMaxUpdate {
    Value newMax, accScale, maxScaled;
  };
  /// `factor` (FP8's descales, a run-time f32; null without) multiplies
  /// `scaleLog2`.
  RowMaxUpdate updateRowMax(Value candidate, Value rowMax, float scaleLog2,
                            float threshold, Value factor = Value());
  /// O's factor 1/sum and the LSE of a row whose softmax ended at `rowMax`
  /// with the sum `rowSum` (over the whole row); `guardPoison` when some
  /// exponentials were computed by the software exp2, whose saturation
  /// drops NaN (the guard carries a NaN max into O and the LSE).
  struct RowNormalization {
    Value inverse, lse;
  };
  /// (`factor` as updateRowMax's; the sum's probabilities lifted by
  /// 2^`shift`, which the LSE takes off.)
  RowNormalization normalizeRow(Value rowMax, Value rowSum, float scaleLog2,
                                bool guardPoison, Value factor = Value(),
                                int64_t shift = 0);
  LogicalResult lowerNormalize(NormalizeOp normalize);
  LogicalResult lowerLseStore(StoreLseTileOp store);
  /// `lse` at [batch, head, position] of the LSE parameter `dest` (its heads
  /// static), no bounds check.
  void storeLseElement(Value dest, Value batch, Value head, Value position,
                       Value lse);

  // Split-KV (Split.cpp): a part's O to the workspace, the merge.
  LogicalResult lowerSplit(Operation *op);
  /// Varlen (Split.cpp, beside the merge's store of O): a tile's
  /// thread-held elements stored by address into its sequence's rows.
  LogicalResult lowerDirectStore(StoreOTileOp store);
  /// The thread's elements of `values` (a per-thread tile vector) in its
  /// row `half`, stored run by run at `address(run's column, i64)`.
  void storeRuns(Value values, unsigned half,
                 function_ref<Value(Value)> address);
  /// O's element `column` (i64 sums) of query `position` and head `head`
  /// in batch `batch`, by the kernel's O pointer and strides.
  Value outElementAddress(Value batch, Value position, Value head,
                          Value column);
  /// Where the thread's rows of a split op's tile lie in the workspace.
  struct SplitRows {
    /// Per thread row: inside the sequence, its query position and head,
    /// and its workspace row slot (tile · 128 + row in tile), i64.
    SmallVector<Value, 2> valid, position, head, slot;
    /// Tiles of the problem, and the rows of each (min(128, seq_q ·
    /// packing)), i64.
    Value tiles, tileRows;
    Value workspace;
  };
  FailureOr<SplitRows> splitRows(Operation *op, Value out, Value workspace,
                                 Value batch, Value head, Value row,
                                 int64_t ratio);
  /// The address of f32 word `word` (i64) of the workspace.
  Value workspaceWord(Value workspace, Value word);
  /// An index value widened to i64, and i64 sums and products: the
  /// workspace's words.
  Value wide(Value index);
  Value add64(Value x, Value y);
  Value mul64(Value x, Value y);
  /// cap·tanh(s·scale/cap) of one score.
  Value softcapScore(SoftcapOp softcap, Value score);
  /// 2^(s·c - maxScaled) of the row, as vector<2xf32> pairs, with c =
  /// scale_log2, times FP8's run-time `factor` when there is one.
  SmallVector<Value> rowExponentials(ArrayRef<Value> s, Value maxScaled,
                                     float scaleLog2, Value factor = Value());
  /// The software exp2 (RowMath.cpp). Whether unit `unit` (a pair on
  /// sm_100a, one exponential on sm_90a) of a row's `units` is one of the
  /// `emulated` it computes.
  static bool isEmulatedExp2(int64_t unit, int64_t emulated, int64_t units);
  /// A row's saturation offset, (127 - maxScaled) / 256 rounded down.
  Value exp2SatOffset(Value maxScaled);
  /// z = sat((s·c - maxScaled + 127) / 256) of one score (`scaleOver256`
  /// is c / 256, `satOffset` exp2SatOffset's).
  Value saturatedExponent(Value score, Value satOffset, Value scaleOver256);
  /// 2^x from z on the FMA pipe, for an f32 or a vector<2xf32> pair.
  Value softwareExp2(Value z);
  void storeProbabilities(ArrayRef<Value> probs, Type probElement,
                          TmemStoreOp store);
  Value rowSumTree(ArrayRef<Value> probs);
  /// AttentionMath's taskPositions on index values: the first and the last
  /// query position of the packed rows from `rowBegin`.
  std::pair<Value, Value> emitTaskPositions(Value rowBegin, Value seqQ,
                                            int64_t ratio, int64_t rows);
  /// AttentionMath's kvBlockRange on index values: begin, full_begin,
  /// full_end, end of the task whose packed rows start at `rowBegin`.
  SmallVector<Value, 4> emitKvBlockRange(Value rowBegin, Value seqQ, Value seqK,
                                         int64_t gqaRatio, int64_t rows,
                                         int64_t blockN,
                                         const MaskModBounds &bounds);
  /// AttentionMath's narrowByBlockMask: `analysed` narrowed by the entries
  /// of `table` (a block-mask extra) for the task's query blocks and heads.
  FailureOr<SmallVector<Value, 4>>
  emitBlockMaskNarrowing(KvBlockRangeOp range, ArrayRef<Value> analysed);

  // Hopper's register tiles and warpgroup MMAs (Hopper/Warpgroup.cpp).
  LogicalResult lowerWarpgroup(Operation *op);
  LogicalResult lowerWarpgroupScoreMma(WarpgroupScoreMmaOp mma);
  LogicalResult lowerWarpgroupValueMma(WarpgroupValueMmaOp mma);
  LogicalResult lowerWarpgroupWait(WarpgroupWaitOp wait);
  // The row ops on fragment tiles (each thread two rows, a quad per row).
  LogicalResult lowerFragmentMask(MaskOp mask);
  LogicalResult lowerFragmentScoreMod(ScoreModOp scoreMod);
  LogicalResult lowerFragmentSoftmax(OnlineSoftmaxOp softmax);
  /// One of the thread's rows (`half`) of the softmax: its max over the
  /// quad after `elements`, moved from `previous` by updateRowMax.
  RowMaxUpdate updateFragmentRowMax(ArrayRef<Value> elements, int64_t half,
                                    Value previous, float scaleLog2,
                                    float threshold, Value factor);
  LogicalResult lowerFragmentCorrection(CorrectionOp correction);
  LogicalResult lowerFragmentSmemStore(SmemStoreOp store);
  LogicalResult lowerFragmentSmemStoreF32(SmemStoreOp store);
  /// The wgmma shared-memory descriptor (`bits` and the address field) of
  /// ring item `count` of `buffer`, `offset` bytes into its stage.
  Value wgmmaStageDescriptor(Value buffer, Value count, int64_t offset,
                             uint64_t bits);
  /// The `count` floats of a wgmma's result struct as a vector.
  Value unpackAccumulators(Value structValue, int64_t count);
  /// One inline-assembly wgmma group (Warpgroup.cpp): fence, `body`'s
  /// MMAs on `accumulators` f32 outputs ("{$0, ...}", wgmmaAccumulators),
  /// commit, and unless `async` the wait.
  Value emitWarpgroupMma(int64_t accumulators, SmallVector<Value> inputs,
                         StringRef constraintsIn, const std::string &body,
                         bool tied, bool async);
  static std::string wgmmaAccumulators(int64_t count);
  /// The value of row `half` of a row vector (vector<2>), and the row
  /// vector of two rows' values.
  Value rowOfFragment(Value rowVector, int64_t half);
  Value fragmentRowVector(Value first, Value second);
  /// This thread's lane, its first row of a 64-row fragment tile (`half` 0)
  /// or its second (1), and its first column (2·(lane mod 4)), as indices.
  Value fragmentLane();
  Value fragmentRow(int64_t half);
  Value fragmentColumn();
  /// `value` combined over the four threads of the quad that share a row.
  Value quadReduce(Value value, function_ref<Value(Value, Value)> combine);
  /// A fragment tile's per-element vector of its rows' values (vector<2>).
  Value spreadRows(Value rows, int64_t elements);
  /// Stores `lse` (f32) as the LSE of packed row `row` of the tile `store`
  /// writes (`row` from the tile's first); rows past seq_q are skipped.
  LogicalResult emitLseStore(StoreLseTileOp store, Value row, Value lse);

  // The backward's ops on transposed tiles (Backward.cpp, both families):
  // a warpgroup holds Sᵀ (keys × packed rows), so a row vector of the
  // packed rows (the LSE, delta) is held along the tile's columns, one
  // value per column the thread has (FamilyLowering::threadColumns).
  LogicalResult lowerBackward(Operation *op);
  LogicalResult lowerColumnLoad(LoadRowTileOp load);
  LogicalResult lowerTransposedMask(MaskOp mask);
  LogicalResult lowerTransposedScoreMod(ScoreModOp scoreMod);
  LogicalResult lowerTransposedScoreModGrad(ScoreModGradOp grad);
  /// A mod region's leading index arguments (batch, query head, query, key)
  /// for each element of a transposed tile (rows keys from `col`, columns
  /// packed rows from `row`), positions clamped where the region's loads
  /// read by them; `inside`: the element lies within both sequences.
  struct TransposedIndices {
    SmallVector<Value, 4> leading;
    Value inside;
  };
  SmallVector<TransposedIndices>
  transposedIndices(Region &region, unsigned queryArgument, Value batch,
                    Value head, Value row, Value col, int64_t gqaRatio,
                    Value seqQ, Value seqK, int64_t tileColumns,
                    int64_t elements);
  LogicalResult lowerTransposedProbs(ProbsFromLseOp probs);
  LogicalResult lowerTransposedSoftmaxGrad(SoftmaxGradOp grad);
  LogicalResult lowerFragmentSoftcapGrad(SoftcapGradOp grad);
  LogicalResult lowerFragmentConvert(ConvertTileOp convert);
  LogicalResult lowerWarpgroupTransposedMma(WarpgroupTransposedMmaOp mma);
  LogicalResult lowerAccumulateDq(AccumulateDqOp accumulate);
  LogicalResult lowerKvStore(StoreKvTileOp store);
  /// Element i of a fragment tile vector: its index in the thread's column
  /// vector (Hopper: element k of the column vector<N/4> is column
  /// 8·(k/2) + 2·(lane mod 4) + k mod 2).
  static int64_t fragmentColumnOf(int64_t element) {
    return 2 * (element / 4) + element % 2;
  }
  /// f32 pairs packed to 16-bit `element` (cvt.rn.{f16,bf16}x2.f32), a
  /// vector of `values`' length.
  Value packHalves(Value values, Type element);

  // Key bounds and the score_mod / mask_mod regions (Mods.cpp).
  /// KeyBound::evaluate on index values, or on i64 ones when `wide`.
  Value emitKeyBound(const KeyBound &bound, Value position, Value seqQ,
                     Value seqK, bool wide);
  /// KeyBound::firstReaching on index values (computed in 64 bits).
  Value emitFirstReaching(const KeyBound &bound, Value target, Value seqQ,
                          Value seqK);
  Value emitFirstReaching64(const KeyBound &bound, Value target, Value seqQ,
                            Value seqK);
  /// The visible keys [begin, end) of query position `position` (computed
  /// in 64 bits where a bound's offset is 2^24 or more).
  Value emitKeyEdges(Value position, const KeyBounds &bounds, Value seqQ,
                     Value seqK, Value &end);
  /// `op` of a mod region rebuilt on i64 in place of index when it is an
  /// index constant or a cast to or from index; null otherwise.
  Value emitWideIndexOp(Operation &op, IRMapping &local);
  /// Whether a load of an extra in the region is indexed by a value that
  /// depends on block argument `argument`: positions passed for it must then
  /// be clamped into the sequence.
  static bool loadsIndexedBy(Region &region, unsigned argument);
  /// What a mod region sees of this thread's row (packed row `packed` of
  /// K/V head `head`): the query position and query head, and the key of a
  /// column. A position a load of the region is indexed by is clamped into
  /// its sequence, so that the padding rows and keys read in bounds.
  struct RowPositions {
    Value query, queryHead;
    /// seq_k - 1 when keys are clamped, else null.
    Value lastKey;
    Value key(OpBuilder &b, Location loc, Value firstKey, int64_t column) const;
  };
  /// `queryArgument`: the region's q_idx argument (kv_idx follows it).
  RowPositions emitRowPositions(Region &region, unsigned queryArgument,
                                Value packed, Value head, int64_t gqaRatio,
                                Value seqQ, Value seqK);
  /// A mod region inlined at the insertion point: its leading arguments bound
  /// to `leading`, its extras' loads read through the kernel's pointers.
  FailureOr<Value> emitModRegion(Operation *owner, Region &region,
                                 ArrayRef<Value> leading,
                                 ValueRange extraOperands);

  OpBuilder &b;
  KernelState &kernel;
  Location currentLoc = UnknownLoc();

  /// The role being lowered.
  RoleOp role;
  Value roleThread;
  Value warpTmemBase;
  /// Shared-memory tiles written since the last arrival, for a TMA store to
  /// read: the next arrival fences them into the async proxy first.
  bool stagedForAsyncProxy = false;
  /// A single-warp role's lanes wrote shared memory since the last
  /// arrival: the next arrival (the elected thread's, for all of them)
  /// comes after the warp meets (bar.warp.sync).
  bool laneStoresPending = false;
  /// The role's one elected thread; in an issuing role it alone waits and
  /// arrives.
  Value roleElected;
  bool onlyElectedWaits = false;
  bool roleUsesTensorMemory = false;

  /// S tiles whose load is deferred into the fused softmax: the value of a
  /// full-width tmem_load and what was applied to it since.
  struct DeferredScores {
    Value scoresColumn;
    SoftcapOp softcap;
    ScoreModOp scoreMod;
    MaskOp mask;
    Value maskCondition;
  };
  llvm::DenseMap<Value, DeferredScores> deferred;
  /// Hopper: P in f32, to be converted on first use (materializeTruncation).
  struct LazyTruncation {
    Value wide;
    VectorType type;
  };
  llvm::DenseMap<Value, LazyTruncation> lazyTruncations;
  /// The FP8 case of materializeTruncation: probabilities packed into
  /// wgmma's 8-bit A fragment.
  void materializeFp8Truncation(Value value, LazyTruncation lazy,
                                Value previous);
  /// Probabilities the fused softmax already wrote to TMEM.
  llvm::DenseSet<Value> probsInTmem;
};

} // namespace mlir::fa4::nvvm

#endif // FA4_CONVERSION_FA4TONVVM_LOWERING_H
