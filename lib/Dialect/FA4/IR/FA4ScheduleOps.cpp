//===- FA4ScheduleOps.cpp - level C verifiers -----------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "Verify.h"
#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Support/AttentionMath.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::fa4;

static int64_t rank(Type type) { return cast<RankedTensorType>(type).getRank(); }
static int64_t dim(Type type, unsigned index) {
  return cast<ShapedType>(type).getDimSize(index);
}

//===----------------------------------------------------------------------===//
// Roles
//===----------------------------------------------------------------------===//

int64_t WarpSpecializeOp::getNumThreads() {
  int64_t threads = 0;
  for (auto role : getRoles().front().getOps<RoleOp>())
    threads += role.getNumThreads();
  return threads;
}

LogicalResult WarpSpecializeOp::verifyRegions() {
  // One chip family's schedule: its ops name the family they exist on.
  Operation *familyOps[2] = {};
  WalkResult mixed = walk([&](Operation *op) {
    std::optional<target::Family> family = familyOnly(op);
    if (!family)
      return WalkResult::advance();
    Operation *&first = familyOps[*family == target::Family::Blackwell ? 0 : 1];
    if (!first)
      first = op;
    return familyOps[0] && familyOps[1] ? WalkResult::interrupt()
                                        : WalkResult::advance();
  });
  if (mixed.wasInterrupted()) {
    InFlightDiagnostic diag =
        emitOpError() << "mixes Blackwell's ops (tensor memory, tcgen05: '"
                      << familyOps[0]->getName() << "') with Hopper's (wgmma: '"
                      << familyOps[1]->getName()
                      << "'); a schedule is one chip family's";
    diag.attachNote(familyOps[0]->getLoc()) << "the Blackwell op";
    diag.attachNote(familyOps[1]->getLoc()) << "the Hopper op";
    return diag;
  }
  if (getCtaPair() && familyOps[1])
    return emitOpError() << "runs as CTA pairs (cta_pair) but holds Hopper's '"
                         << familyOps[1]->getName()
                         << "': CTA pairs are Blackwell's (tcgen05.mma "
                            "cta_group::2)";
  uint32_t warpsTaken = 0;
  int64_t registers = 0;
  // setmaxnreg is collective over a warpgroup: its four warps move to one
  // budget together.
  RoleOp warpgroupRole[blackwell::kWarpsPerCta / 4] = {};
  for (Operation &op : getRoles().front()) {
    auto role = dyn_cast<RoleOp>(op);
    if (!role)
      return emitOpError() << "may only hold fa4.role ops, found '"
                           << op.getName() << "'";
    // Each role has checked that its warps lie inside the CTA.
    int64_t first = role.getFirstWarpAttr().getInt();
    for (int64_t warp = first; warp < first + role.getNumWarpsAttr().getInt();
         ++warp) {
      if (warpsTaken & (1u << warp))
        return role.emitOpError() << "warp " << warp
                                  << " already belongs to another role";
      warpsTaken |= 1u << warp;
      RoleOp &other = warpgroupRole[warp / 4];
      if (other && other.getRegisters() != role.getRegisters())
        return role.emitOpError()
               << "asks for " << role.getRegisters() << " registers but shares "
               << "warpgroup " << warp / 4 << " with '" << other.getName()
               << "', which asks for " << other.getRegisters()
               << " (setmaxnreg sets one budget per warpgroup)";
      other = role;
    }
    registers += role.getRegisters() * role.getNumThreads();
  }
  for (int64_t group = 0; group < blackwell::kWarpsPerCta / 4; ++group) {
    uint32_t mask = 0xfu << (4 * group);
    if ((warpsTaken & mask) != 0 && (warpsTaken & mask) != mask)
      return emitOpError() << "warpgroup " << group
                           << " is only partly assigned to roles; every warp "
                              "of it must take part in setmaxnreg (give the "
                              "rest an empty role)";
  }
  // setmaxnreg moves registers within what the CTA got at launch: budgets
  // past that make an increase wait forever.
  int64_t threads = getNumThreads();
  int64_t pool = blackwell::registersAtLaunch(threads) * threads;
  if (registers > pool) {
    InFlightDiagnostic diag = emitOpError()
                              << "register budgets need " << registers
                              << " registers, more than the " << pool
                              << " its " << threads
                              << " threads hold at launch (";
    llvm::interleaveComma(getRoles().front().getOps<RoleOp>(), diag,
                          [&](RoleOp role) {
                            diag << role.getName() << ": "
                                 << role.getNumThreads() << " threads x "
                                 << role.getRegisters();
                          });
    diag << ")";
    return diag;
  }
  return success();
}

LogicalResult RoleOp::verify() {
  // The attributes are signless 64-bit: read them signed, so that a
  // negative or huge value is refused here and not used as an index.
  int64_t first = getFirstWarpAttr().getInt();
  int64_t count = getNumWarpsAttr().getInt();
  if (first < 0 || count <= 0 || first >= blackwell::kWarpsPerCta ||
      count > blackwell::kWarpsPerCta - first)
    return emitOpError() << "needs warps inside the CTA's "
                         << blackwell::kWarpsPerCta << ", got warps(" << first
                         << ", " << count << ")";
  int64_t registers = getRegisters();
  if (registers < blackwell::kMinRegistersPerThread ||
      registers > blackwell::kMaxRegistersPerThread || registers % 8 != 0)
    return emitOpError() << "register budget " << registers
                         << " is not a multiple of 8 in ["
                         << blackwell::kMinRegistersPerThread << ", "
                         << blackwell::kMaxRegistersPerThread
                         << "] (what setmaxnreg accepts)";
  return success();
}

//===----------------------------------------------------------------------===//
// Memories
//===----------------------------------------------------------------------===//

LogicalResult TmemAllocOp::verify() {
  TmemType type = getBuffer().getType();
  if (!type.getElementType().isF32())
    return emitOpError() << "allocates f32 accumulators; reinterpret with "
                            "fa4.tmem_view for "
                         << type.getElementType();
  if (std::optional<int64_t> offset = getColumnOffset()) {
    if (*offset < 0 || *offset + type.getColumns() > blackwell::kTmemColumns)
      return emitOpError() << "columns [" << *offset << ", "
                           << *offset + type.getColumns()
                           << ") are outside TMEM's "
                           << blackwell::kTmemColumns << " columns";
  }
  return success();
}

LogicalResult TmemViewOp::verify() {
  TmemType source = getSource().getType(), view = getView().getType();
  if (view.getColumns() > source.getColumns())
    return emitOpError() << "view spans " << view.getColumns()
                         << " columns, more than its source's "
                         << source.getColumns();
  return success();
}

LogicalResult MBarrierArriveOp::verify() {
  if (!getOperation()->getParentOfType<RoleOp>())
    return emitOpError() << "arrives for its role's threads, so it must be "
                            "inside an fa4.role";
  return success();
}

//===----------------------------------------------------------------------===//
// Copies and tensor-core ops
//===----------------------------------------------------------------------===//

/// A TMA tile of `tensor` in `buffer`, of the tensor's element type: every
/// column of its rows, or, for a `part` (a reduction's), columns from
/// `column` on.
static LogicalResult verifyTmaTile(Operation *op, MemRefType tensor,
                                   SmemType buffer, int64_t gqaRatio,
                                   bool part = false, int64_t column = 0,
                                   bool narrower = false) {
  // The box is gqa_ratio heads by rows / gqa_ratio positions: whole
  // positions of each head (gqaPacking's powers of two).
  if (gqaRatio > kMaxGqaPacking || (gqaRatio & (gqaRatio - 1)) != 0 ||
      buffer.getRows() % gqaRatio != 0)
    return op->emitOpError() << "packs gqa_ratio = " << gqaRatio
                             << " heads in a tile of " << buffer.getRows()
                             << " rows; expected a power of two of at most "
                             << kMaxGqaPacking << " dividing the rows";
  if (tensor.getRank() != 4)
    return op->emitOpError() << "expects a [batch, seq, heads, head_dim] "
                                "memref, got rank "
                             << tensor.getRank();
  if (buffer.getElementType() != tensor.getElementType())
    return op->emitOpError() << "buffer element type "
                             << buffer.getElementType()
                             << " does not match the tensor's "
                             << tensor.getElementType();
  // A load may fill the first columns of a wider item (a static head dim:
  // the copy's boxes and bytes are the tensor's).
  bool fits = narrower && !tensor.isDynamicDim(3) &&
              tensor.getDimSize(3) > 0 &&
              tensor.getDimSize(3) < buffer.getCols();
  if (!part && buffer.getCols() != tensor.getDimSize(3) && !fits)
    return op->emitOpError() << "buffer tile has " << buffer.getCols()
                             << " columns, the tensor's head dim is "
                             << tensor.getDimSize(3)
                             << (narrower ? " (a load's tensor may be "
                                            "narrower, not wider)"
                                          : "");
  if (part && tensor.isDynamicDim(3))
    return op->emitOpError() << "adds part of the columns of a tensor whose "
                                "head dim is dynamic; a reduction needs it "
                                "static";
  if (part && (column > tensor.getDimSize(3) ||
               buffer.getCols() > tensor.getDimSize(3) - column))
    return op->emitOpError() << "buffer tile's " << buffer.getCols()
                             << " columns from column " << column
                             << " run past the tensor's head dim "
                             << tensor.getDimSize(3);
  return success();
}

LogicalResult TmaLoadOp::verify() {
  if (static_cast<bool>(getBarrier()) != static_cast<bool>(getBarrierCount()))
    return emitOpError() << "needs both a barrier and its count, or neither";
  if (getBlockTable()) {
    // Pages of at least 8 rows keep every page's 128-byte swizzle in step
    // with the tile's; a page smaller than the tile divides it, a larger
    // one is whole tiles (no tile crosses a page).
    int64_t page = cast<MemRefType>(getSource().getType()).getDimSize(1);
    int64_t rows = getBuffer().getType().getRows();
    if (ShapedType::isDynamic(page) || page < 16 || (page & (page - 1)) != 0 ||
        getGqaRatio() != 1 || (page < rows ? rows % page : page % rows) != 0)
      return emitOpError() << "gathers a paged cache: expected a static page "
                              "size, a power of two of at least 16 that the "
                              "tile's rows divide or are whole pages of, and "
                              "gqa_ratio 1";
  }
  if (getTransposed()) {
    // V transposed: [head_dim, keys] stages of 8-bit elements, dense.
    auto tensor = cast<MemRefType>(getSource().getType());
    SmemType buffer = getBuffer().getType();
    if (tensor.getRank() != 4 || getBlockTable() || getGqaRatio() != 1 ||
        buffer.getElementType().getIntOrFloatBitWidth() != 8 ||
        buffer.getElementType() != tensor.getElementType() ||
        tensor.isDynamicDim(3) || buffer.getRows() != tensor.getDimSize(3))
      return emitOpError()
             << "loads a transposed tile: expected a dense [batch, seq, "
                "heads, head_dim] memref of 8-bit elements, gqa_ratio 1, and "
                "a [head_dim, keys] buffer of its element type, got "
             << tensor << " into " << buffer;
    return success();
  }
  return verifyTmaTile(getOperation(), cast<MemRefType>(getSource().getType()),
                       getBuffer().getType(), getGqaRatio(), /*part=*/false,
                       /*column=*/0, /*narrower=*/true);
}

SmemType TmaLoadOp::getTileType() {
  SmemType buffer = getBuffer().getType();
  if (getTransposed())
    return buffer;
  auto tensor = cast<MemRefType>(getSource().getType());
  if (tensor.getRank() != 4 || tensor.isDynamicDim(3) ||
      tensor.getDimSize(3) <= 0 || tensor.getDimSize(3) >= buffer.getCols())
    return buffer;
  return SmemType::get(getContext(), buffer.getRows(), tensor.getDimSize(3),
                       buffer.getElementType(), buffer.getStages());
}

LogicalResult TmaStoreOp::verify() {
  SmemType buffer = getBuffer().getType();
  if (getReduce() && !buffer.getElementType().isF32())
    return emitOpError() << "reduces (adds) " << buffer.getElementType()
                         << " elements; a reduction adds f32 only";
  if (getColumn() != 0 && !getReduce())
    return emitOpError() << "stores from column " << getColumn()
                         << "; only a reduction stores part of the columns";
  // A box row is 128 bytes (the swizzle's span), 32 f32 columns: a
  // reduction's part starts on one.
  constexpr int64_t kF32BoxColumns = 32;
  if (getReduce() && (getColumn() % kF32BoxColumns != 0 ||
                      buffer.getCols() % kF32BoxColumns != 0))
    return emitOpError() << "reduces " << buffer.getCols()
                         << " columns from column " << getColumn()
                         << "; a reduction's part starts and ends on whole "
                            "boxes of "
                         << kF32BoxColumns << " columns";
  return verifyTmaTile(getOperation(), cast<MemRefType>(getDest().getType()),
                       buffer, getGqaRatio(), getReduce(), getColumn());
}

/// The forward's MMA inputs: f16, bf16, or FP8's e4m3 (wgmma's e4m3 kind,
/// tcgen05's kind::f8f6f4).
static bool isForwardMmaInput(Type type) {
  return type.isF16() || type.isBF16() || isa<Float8E4M3FNType>(type);
}

LogicalResult ScoreMmaAsyncOp::verify() {
  SmemType q = getQuery().getType(), k = getKey().getType();
  TmemType s = getScores().getType();
  if (q.getElementType() != k.getElementType() ||
      !isForwardMmaInput(q.getElementType()))
    return emitOpError()
           << "query and key must both hold f16, bf16 or f8E4M3FN, got "
           << q.getElementType() << " and " << k.getElementType();
  if (!s.getElementType().isF32())
    return emitOpError() << "scores accumulate in f32, got "
                         << s.getElementType();
  if (q.getCols() != k.getCols())
    return emitOpError() << "query head dim " << q.getCols()
                         << " does not match key head dim " << k.getCols();
  if (q.getRows() != s.getLanes() || k.getRows() != s.getCols())
    return emitOpError() << "scores must be [" << q.getRows() << ", "
                         << k.getRows() << "], got [" << s.getLanes() << ", "
                         << s.getCols() << "]";
  return success();
}

/// Rows of one Hopper warpgroup MMA (wgmma's M).
static constexpr int64_t kWarpgroupRows = 64;

/// An async warpgroup MMA's result is in flight until its wait: nothing
/// else may read it.
static LogicalResult checkAsyncUses(Operation *op, bool async) {
  if (!async)
    return success();
  for (Operation *user : op->getResult(0).getUsers())
    if (!isa<WarpgroupWaitOp>(user))
      return op->emitOpError() << "is async, so only fa4.wgmma_wait may use "
                                  "its result, not '"
                               << user->getName() << "'";
  return success();
}

LogicalResult WarpgroupScoreMmaOp::verify() {
  SmemType q = getQuery().getType(), k = getKey().getType();
  auto s = cast<RankedTensorType>(getScores().getType());
  if (q.getElementType() != k.getElementType() ||
      !isForwardMmaInput(q.getElementType()))
    return emitOpError()
           << "query and key must both hold f16, bf16 or f8E4M3FN, got "
           << q.getElementType() << " and " << k.getElementType();
  if (q.getCols() != k.getCols())
    return emitOpError() << "query head dim " << q.getCols()
                         << " does not match key head dim " << k.getCols();
  if (s.getRank() != 2 || !s.getElementType().isF32() ||
      s.getDimSize(0) != kWarpgroupRows || s.getDimSize(1) != k.getRows())
    return emitOpError() << "scores must be tensor<" << kWarpgroupRows << "x"
                         << k.getRows() << "xf32>, got " << s;
  int64_t offset = getRowOffset();
  if (offset < 0 || offset % kWarpgroupRows != 0 ||
      offset + kWarpgroupRows > q.getRows())
    return emitOpError() << "rows " << offset << " to "
                         << offset + kWarpgroupRows - 1
                         << " are not a 64-row block of the " << q.getRows()
                         << "-row query buffer";
  return checkAsyncUses(*this, getAsync());
}

LogicalResult WarpgroupValueMmaOp::verify() {
  auto p = cast<RankedTensorType>(getProbs().getType());
  auto o = cast<RankedTensorType>(getAcc().getType());
  SmemType v = getValue().getType();
  if (p.getRank() != 2 || o.getRank() != 2)
    return emitOpError() << "probs and acc must be 2-D tiles";
  if (p.getElementType() != v.getElementType())
    return emitOpError() << "probs element type " << p.getElementType()
                         << " does not match value's " << v.getElementType();
  if (!o.getElementType().isF32())
    return emitOpError() << "acc accumulates in f32, got " << o.getElementType();
  // An 8-bit V stage is V transposed: [head_dim, keys].
  bool kMajor = v.getElementType().getIntOrFloatBitWidth() == 8;
  int64_t keys = kMajor ? v.getCols() : v.getRows();
  int64_t dim = kMajor ? v.getRows() : v.getCols();
  if (p.getDimSize(0) != kWarpgroupRows || o.getDimSize(0) != kWarpgroupRows ||
      p.getDimSize(1) != keys || o.getDimSize(1) != dim)
    return emitOpError() << "shapes do not chain: probs " << p << " x value ["
                         << keys << ", " << dim << "]"
                         << (kMajor ? " (transposed: 8-bit V stages are "
                                      "[head_dim, keys])"
                                    : "")
                         << " into " << o << " (" << kWarpgroupRows
                         << " rows per warpgroup)";
  if (getResult().getType() != o)
    return emitOpError() << "result must have the accumulator's type " << o;
  return checkAsyncUses(*this, getAsync());
}

LogicalResult WarpgroupTransposedMmaOp::verify() {
  SmemType a = getLhs().getType(), b = getRhs().getType();
  auto result = cast<RankedTensorType>(getResult().getType());
  if (a.getElementType() != b.getElementType() ||
      !(a.getElementType().isF16() || a.getElementType().isBF16()))
    return emitOpError() << "lhs and rhs must both hold f16 or bf16, got "
                         << a.getElementType() << " and " << b.getElementType();
  if (a.getCols() != kWarpgroupRows)
    return emitOpError() << "lhs must be [K, " << kWarpgroupRows
                         << "] (its transpose is the warpgroup's rows), got ["
                         << a.getRows() << ", " << a.getCols() << "]";
  int64_t contraction = a.getRows();
  if (Value next = getLhsNext()) {
    auto nextType = cast<SmemType>(next.getType());
    if (!getLhsNextCount())
      return emitOpError() << "continues its lhs into another stage without "
                              "that stage's ring count";
    if (nextType.getElementType() != a.getElementType() ||
        nextType.getCols() != a.getCols())
      return emitOpError() << "continues its lhs into a stage of another "
                              "element type or width";
    contraction += nextType.getRows();
  }
  int64_t offset = getRowOffset();
  if (offset < 0 || offset % kWarpgroupRows != 0 ||
      offset + contraction > b.getRows())
    return emitOpError() << "rows " << offset << " to "
                         << offset + contraction - 1 << " are not a block of "
                         << contraction << " rows at a multiple of "
                         << kWarpgroupRows << " in the " << b.getRows()
                         << "-row rhs";
  int64_t column = getColumnOffset();
  if (column < 0 || column % 64 != 0 || column >= b.getCols())
    return emitOpError() << "column_offset " << column
                         << " is not a multiple of 64 inside the rhs's "
                         << b.getCols() << " columns";
  int64_t width = std::min<int64_t>(b.getCols() - column, 256);
  if (result.getRank() != 2 || !result.getElementType().isF32() ||
      result.getDimSize(0) != kWarpgroupRows || result.getDimSize(1) < 8 ||
      result.getDimSize(1) % 8 != 0 || result.getDimSize(1) > width)
    return emitOpError() << "result must be tensor<" << kWarpgroupRows
                         << "xNxf32> with N a multiple of 8 up to " << width
                         << " (the rhs's columns from " << column
                         << "), got " << result;
  return checkAsyncUses(*this, getAsync());
}

LogicalResult WarpgroupWaitOp::verify() {
  Operation *def = getPendingValue().getDefiningOp();
  bool async = false;
  if (auto score = dyn_cast_or_null<WarpgroupScoreMmaOp>(def))
    async = score.getAsync();
  if (auto value = dyn_cast_or_null<WarpgroupValueMmaOp>(def))
    async = value.getAsync();
  if (auto transposed = dyn_cast_or_null<WarpgroupTransposedMmaOp>(def))
    async = transposed.getAsync();
  if (!async)
    return emitOpError() << "waits for a value that no async fa4.wgmma_score, "
                            "fa4.wgmma_value or fa4.wgmma_transposed computes";
  if (def->getBlock() != getOperation()->getBlock())
    return emitOpError() << "must be in the block of the MMA it waits for";
  // The MMAs complete in issue order: the one waited for is done once at
  // most as many are left as were issued after it.
  int64_t issuedAfter = 0;
  for (Operation *op = def->getNextNode(); op && op != getOperation();
       op = op->getNextNode()) {
    auto isAsync = [](Operation *other) {
      if (auto score = dyn_cast<WarpgroupScoreMmaOp>(other))
        return score.getAsync();
      if (auto value = dyn_cast<WarpgroupValueMmaOp>(other))
        return value.getAsync();
      if (auto transposed = dyn_cast<WarpgroupTransposedMmaOp>(other))
        return transposed.getAsync();
      return false;
    };
    issuedAfter += isAsync(op);
  }
  if (static_cast<int64_t>(getPending()) > issuedAfter)
    return emitOpError() << "leaves " << getPending()
                         << " MMAs pending, but only " << issuedAfter
                         << " were issued after the one it waits for: that "
                            "one may still be running";
  return success();
}

/// A named barrier counts whole warps, and its role's threads are among
/// them.
static LogicalResult verifyNamedBarrier(Operation *op, int64_t count) {
  if (count % 32 != 0)
    return op->emitOpError() << "counts " << count
                             << " threads; a named barrier counts whole "
                                "warps (a multiple of 32)";
  if (auto role = op->getParentOfType<RoleOp>();
      role && role.getNumThreads() > count)
    return op->emitOpError() << "counts " << count << " threads, fewer than "
                             << "the " << role.getNumThreads()
                             << " of its role '" << role.getName() << "'";
  return success();
}

LogicalResult NamedBarrierSyncOp::verify() {
  return verifyNamedBarrier(*this, getCount());
}

LogicalResult NamedBarrierArriveOp::verify() {
  return verifyNamedBarrier(*this, getCount());
}

LogicalResult ValueMmaAsyncOp::verify() {
  TmemType p = getProbs().getType(), o = getAcc().getType();
  SmemType v = getValue().getType();
  if (p.getElementType() != v.getElementType())
    return emitOpError() << "probs element type " << p.getElementType()
                         << " does not match value's " << v.getElementType();
  if (!o.getElementType().isF32())
    return emitOpError() << "acc accumulates in f32, got " << o.getElementType();
  // V may be the first acc columns of a wider ring's items (a K/V ring
  // sized for a wider K).
  if (p.getCols() != v.getRows() || o.getCols() > v.getCols())
    return emitOpError() << "shapes do not chain: probs [" << p.getLanes()
                         << ", " << p.getCols() << "] x value [" << v.getRows()
                         << ", " << v.getCols() << "] -> acc [" << o.getLanes()
                         << ", " << o.getCols() << "]";
  return success();
}

LogicalResult TransposedMmaAsyncOp::verify() {
  SmemType a = getLhs().getType(), bType = getRhs().getType();
  TmemType d = getAcc().getType();
  if (a.getElementType() != bType.getElementType() ||
      !(a.getElementType().isF16() || a.getElementType().isBF16()))
    return emitOpError() << "lhs and rhs must both hold f16 or bf16, got "
                         << a.getElementType() << " and "
                         << bType.getElementType();
  if (!d.getElementType().isF32())
    return emitOpError() << "acc accumulates in f32, got " << d.getElementType();
  if (a.getRows() != bType.getRows() || a.getCols() != d.getLanes() ||
      bType.getCols() != d.getCols())
    return emitOpError() << "shapes do not chain: lhsᵀ [" << a.getCols()
                         << ", " << a.getRows() << "] x rhs ["
                         << bType.getRows() << ", " << bType.getCols()
                         << "] -> acc [" << d.getLanes() << ", "
                         << d.getCols() << "]";
  return success();
}

//===----------------------------------------------------------------------===//
// Register <-> memory
//===----------------------------------------------------------------------===//

static LogicalResult verifyTmemAccess(Operation *op, Type tileType,
                                      TmemType buffer, Value column) {
  if (rank(tileType) != 2 || dim(tileType, 0) != buffer.getLanes())
    return op->emitOpError() << "tile must be [" << buffer.getLanes()
                             << ", N], one row per lane";
  Type element = getElementTypeOrSelf(tileType);
  if (element != buffer.getElementType())
    return op->emitOpError() << "tile element type " << element
                             << " does not match the buffer's "
                             << buffer.getElementType();
  APInt first;
  if (matchPattern(column, m_ConstantInt(&first)) &&
      (first.getSExtValue() < 0 ||
       first.getSExtValue() + dim(tileType, 1) > buffer.getCols()))
    return op->emitOpError() << "columns [" << first.getSExtValue() << ", "
                             << first.getSExtValue() + dim(tileType, 1)
                             << ") are outside the buffer's "
                             << buffer.getCols();
  return success();
}

LogicalResult TmemLoadOp::verify() {
  return verifyTmemAccess(getOperation(), getResult().getType(),
                          getBuffer().getType(), getColumn());
}

LogicalResult TmemStoreOp::verify() {
  return verifyTmemAccess(getOperation(), getTile().getType(),
                          getBuffer().getType(), getColumn());
}

static LogicalResult verifySmemAccess(Operation *op, Type tileType,
                                      SmemType buffer,
                                      std::optional<int64_t> row,
                                      bool partialColumns = false) {
  auto tensor = cast<RankedTensorType>(tileType);
  if (tensor.getElementType() != buffer.getElementType())
    return op->emitOpError() << "tile element type " << tensor.getElementType()
                             << " does not match the buffer's "
                             << buffer.getElementType();
  if (row) {
    if (*row < 0 || *row >= buffer.getRows())
      return op->emitOpError() << "row " << *row << " is outside the buffer's "
                               << buffer.getRows() << " rows";
    if (tensor.getRank() != 1 || tensor.getDimSize(0) != buffer.getCols())
      return op->emitOpError() << "a row access moves a 1-D tile of "
                               << buffer.getCols() << " elements";
    return success();
  }
  if (tensor.getRank() == 2 && partialColumns &&
      tensor.getDimSize(0) == buffer.getRows() &&
      tensor.getDimSize(1) <= buffer.getCols())
    return success();
  if (tensor.getRank() != 2 || tensor.getDimSize(0) != buffer.getRows() ||
      tensor.getDimSize(1) != buffer.getCols())
    return op->emitOpError() << "tile must be [" << buffer.getRows() << ", "
                             << buffer.getCols() << "] like the buffer's stages";
  return success();
}

LogicalResult SmemStoreOp::verify() {
  if (getColumn() && getRow())
    return emitOpError() << "stores a row or a column range, not both";
  return verifySmemAccess(getOperation(), getTile().getType(),
                          getBuffer().getType(), getRow(),
                          static_cast<bool>(getColumn()));
}

LogicalResult SmemLoadOp::verify() {
  if (getTransposed() && !getRow())
    return emitOpError() << "reads a transposed tile's column vector from a "
                            "row only (transposed needs row)";
  if (getColumn()) {
    int64_t column = static_cast<int64_t>(*getColumn());
    if (!getRow())
      return emitOpError() << "reads part of a row only (column needs row)";
    if (!getTransposed())
      return emitOpError() << "reads part of a row along a transposed tile's "
                              "columns only (column needs transposed)";
    auto tensor = cast<RankedTensorType>(getResult().getType());
    SmemType buffer = getBuffer().getType();
    int64_t cols = buffer.getCols(), rows = buffer.getRows();
    int64_t row = static_cast<int64_t>(*getRow());
    if (tensor.getRank() != 1 || tensor.isDynamicDim(0) ||
        tensor.getDimSize(0) < 1)
      return emitOpError() << "reads part of a row into a 1-D tile of a "
                              "static, positive size, got "
                           << tensor;
    int64_t size = tensor.getDimSize(0);
    if (column < 0 || column >= cols || size > cols - column)
      return emitOpError() << "reads " << size << " elements from column "
                           << column << " of a row of " << cols
                           << " elements";
    if (tensor.getElementType() != buffer.getElementType())
      return emitOpError() << "tile element type " << tensor.getElementType()
                           << " does not match the buffer's "
                           << buffer.getElementType();
    if (row < 0 || row >= rows)
      return emitOpError() << "row " << row << " is outside the buffer's "
                           << rows << " rows";
    return success();
  }
  return verifySmemAccess(getOperation(), getResult().getType(),
                          getBuffer().getType(), getRow());
}

//===----------------------------------------------------------------------===//
// Correction and TMEM allocation
//===----------------------------------------------------------------------===//

static LogicalResult verifyAccumulator(Operation *op, TmemType acc,
                                       ArrayRef<Value> rowVectors) {
  if (!acc.getElementType().isF32())
    return op->emitOpError() << "acc must hold f32, got " << acc.getElementType();
  for (Value row : rowVectors)
    if (dim(row.getType(), 0) != acc.getLanes())
      return op->emitOpError() << "row vectors must have " << acc.getLanes()
                               << " elements, one per lane";
  return success();
}

LogicalResult RescaleOOp::verify() {
  return verifyAccumulator(getOperation(), getAcc().getType(), {getAccScale()});
}

LogicalResult FinalizeOOp::verify() {
  TmemType acc = getAcc().getType();
  if (failed(verifyAccumulator(getOperation(), acc, {getRowMax(), getRowSum()})))
    return failure();
  SmemType staging = getStaging().getType();
  if (staging.getRows() != acc.getLanes() || staging.getCols() != acc.getCols())
    return emitOpError() << "staging tiles must be [" << acc.getLanes() << ", "
                         << acc.getCols() << "] like acc, got ["
                         << staging.getRows() << ", " << staging.getCols()
                         << "]";
  return success();
}

LogicalResult FinalizePartialOOp::verify() {
  TmemType acc = getAcc().getType();
  if (failed(verifyAccumulator(getOperation(), acc, {getRowMax(), getRowSum()})))
    return failure();
  auto out = cast<MemRefType>(getOut().getType());
  if (out.getRank() != 4 || out.getDimSize(3) != acc.getCols())
    return emitOpError() << "O must be [batch, seq, heads, " << acc.getCols()
                         << "] like acc's columns, got " << out;
  return fa4::detail::verifySplitWorkspaceType(
      [this] { return emitOpError(); },
      cast<MemRefType>(getWorkspace().getType()));
}

LogicalResult FinalizeORowsOp::verify() {
  TmemType acc = getAcc().getType();
  if (failed(verifyAccumulator(getOperation(), acc, {getRowMax(), getRowSum()})))
    return failure();
  auto out = cast<MemRefType>(getOut().getType());
  if (out.getRank() != 4 || out.getDimSize(3) != acc.getCols() ||
      !(out.getElementType().isF16() || out.getElementType().isBF16()) ||
      ShapedType::isDynamic(out.getDimSize(2)) ||
      out.getDimSize(2) % getGqaRatio() != 0)
    return emitOpError() << "O must be an f16 or bf16 [batch, seq, heads, "
                         << acc.getCols()
                         << "] memref like acc's columns, with static heads "
                            "that gqa_ratio divides, got "
                         << out;
  // fa4-correction moves it 16 columns at a time.
  if (acc.getCols() % 16 != 0)
    return emitOpError() << "acc's " << acc.getCols()
                         << " columns are not whole 16-column chunks";
  return success();
}

LogicalResult TmemAllocColumnsOp::verify() {
  int64_t columns = getColumns();
  if (columns < 32 || columns > blackwell::kTmemColumns ||
      !llvm::isPowerOf2_64(columns))
    return emitOpError() << "TMEM is allocated in powers of two from 32 to "
                         << blackwell::kTmemColumns << " columns, got "
                         << columns;
  return success();
}
