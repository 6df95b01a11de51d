//===- Kernel.cpp - the kernel, its roles and the scheduler ----------------===//
//
// Level C -> level D, the shared lowering: the helpers every concern uses,
// the prologue and the dispatch of the warps to their roles, the
// structured control flow and the persistent scheduler; the other shared
// concerns live beside it (Memory.cpp, RowMath.cpp, Mods.cpp), what a chip
// family lowers its own way in its wing (FamilyLowering, Lowering.h).
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/ScopeExit.h"
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

Value Lowering::i32(int64_t value) {
  return LLVM::ConstantOp::create(b, loc(), b.getI32Type(),
                                    b.getI32IntegerAttr(value));
}
Value Lowering::i64(int64_t value) {
  return LLVM::ConstantOp::create(b, loc(), b.getI64Type(),
                                    b.getI64IntegerAttr(value));
}
Value Lowering::index(int64_t value) {
  return arith::ConstantIndexOp::create(b, loc(), value);
}
Value Lowering::f32(float value) {
  return arith::ConstantOp::create(b, loc(), b.getF32FloatAttr(value));
}
Value Lowering::toI32(Value value) {
  if (value.getType().isIndex())
    return arith::IndexCastOp::create(b, loc(), b.getI32Type(), value);
  return value;
}
Value Lowering::toIndex(Value value) {
  if (value.getType().isIndex())
    return value;
  return arith::IndexCastOp::create(b, loc(), b.getIndexType(), value);
}
Value Lowering::smemAt(Value base, Value bytes) {
  return LLVM::GEPOp::create(b, loc(), base.getType(), b.getI8Type(), base,
                               ValueRange{toI32(bytes)});
}
Value Lowering::smemAddress(Value pointer) {
  return LLVM::PtrToIntOp::create(b, loc(), b.getI32Type(), pointer);
}
Value mlir::fa4::nvvm::vectorOf(OpBuilder &b, Location loc,
                                ArrayRef<Value> elements) {
  return vector::FromElementsOp::create(
      b, loc,
      VectorType::get({static_cast<int64_t>(elements.size())},
                      elements.front().getType()),
      elements);
}

SmallVector<Value> Lowering::laneStrided(int64_t count) {
  Value lane = arith::RemUIOp::create(b, loc(), roleThread, index(32));
  SmallVector<Value> positions;
  for (int64_t slot = 0; slot * 32 < count; ++slot)
    positions.push_back(arith::AddIOp::create(b, loc(), lane, index(slot * 32)));
  return positions;
}

void Lowering::ifElected(function_ref<void()> body) {
  // In an issuing role the elected thread alone waits, issues and arrives
  // (for all of the role's threads), as in NVIDIA's kernels: the other
  // lanes take part in nothing, so none can find an mbarrier's phase
  // lapped nor arrive for a phase not yet its own. When all lanes waited
  // and one of them issued, they parted under independent thread
  // scheduling: a Hopper producer's issuing lane ran tasks ahead of the
  // others, which then waited on lapped phases after every other warp had
  // exited (a hang on the H200, issue 22).
  auto branch = scf::IfOp::create(b, loc(), roleElected, false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(branch.thenBlock());
  body();
}
Value Lowering::rowInWarpgroup() {
  return arith::RemUIOp::create(b, loc(), roleThread, index(128));
}
Value Lowering::tmemLaneField() {
  // Warp w of the CTA reaches TMEM lanes 32·(w % 4) to 32·(w % 4) + 31 (the
  // hardware's warp index, not the role's); the lane sits in the address's
  // upper 16 bits.
  Value warp = arith::RemUIOp::create(b,
      loc(), arith::DivUIOp::create(b, loc(), toIndex(kernel.threadId), index(32)),
      index(4));
  return toI32(arith::ShLIOp::create(b,
      loc(), arith::MulIOp::create(b, loc(), warp, index(32)), index(16)));
}
Value Lowering::rematerializeAtRoleEntry(Value value) {
  if (!value || matchPattern(value, m_Constant()))
    return value;
  Type type = value.getType();
  bool isIndex = type.isIndex();
  StringRef constraints;
  StringRef text;
  if (type.isInteger(32) || type.isF32()) {
    constraints = "=r,r";
    text = "mov.b32 $0, $1;";
    if (type.isF32())
      constraints = "=f,f";
  } else if (isIndex || type.isInteger(64) ||
             isa<LLVM::LLVMPointerType>(type)) {
    constraints = "=l,l";
    text = "mov.b64 $0, $1;";
  } else {
    return value;
  }
  // Shared-memory pointers are 32 bits wide.
  if (auto pointer = dyn_cast<LLVM::LLVMPointerType>(type);
      pointer && pointer.getAddressSpace() == 3) {
    constraints = "=r,r";
    text = "mov.b32 $0, $1;";
  }
  Value operand = isIndex ? Value(arith::IndexCastOp::create(
                                b, loc(), b.getI64Type(), value))
                          : value;
  Value moved =
      LLVM::InlineAsmOp::create(
          b, loc(), operand.getType(), ValueRange{operand}, text, constraints,
          /*has_side_effects=*/true, false,
          LLVM::tailcallkind::TailCallKind::None,
          LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
          ArrayAttr())
          .getResult(0);
  return isIndex ? Value(arith::IndexCastOp::create(b, loc(), b.getIndexType(),
                                                    moved))
                 : moved;
}

Value Lowering::ctaRank() {
  return toIndex(specialRegister("%cluster_ctarank"));
}

bool Lowering::isPairBarrier(Value barrier) const {
  Operation *alloc = barrier.getDefiningOp();
  return kernel.ctaPair && alloc && kernel.pairBarriers.contains(alloc);
}

bool Lowering::isMirroredBarrier(Value barrier) const {
  Operation *alloc = barrier.getDefiningOp();
  return kernel.ctaPair && alloc && kernel.mirroredBarriers.contains(alloc);
}

Value Lowering::leaderBarrierSlot(Value barrier, Value count) {
  return clusterBarrierSlot(barrier, count, Value());
}

Value Lowering::clusterBarrierSlot(Value barrier, Value count, Value rank) {
  // mapa: CTA `rank`'s copy of this CTA's slot (the even CTA's, an
  // immediate 0, without a rank), as a shared::cluster address (CUTLASS's
  // 2-SM TMA clears the rank bit of its own address to name the even CTA's
  // instead; the ISA defines mapa).
  Value own = smemAddress(barrierSlot(barrier, count));
  SmallVector<Value, 2> operands{own};
  if (rank)
    operands.push_back(rank);
  return LLVM::InlineAsmOp::create(
             b, loc(), b.getI32Type(), operands,
             rank ? "mapa.shared::cluster.u32 $0, $1, $2;"
                  : "mapa.shared::cluster.u32 $0, $1, 0;",
             rank ? "=r,r,r" : "=r,r",
             /*has_side_effects=*/false, false,
             LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
             ArrayAttr())
      .getResult(0);
}

// The scope of the pair's synchronization. What crosses the pair through
// these barriers is never generic-proxy data: a loader's arrival announces
// TMA bytes that complete_tx counts on the barrier itself, a softmax or
// correction arrival orders tensor-memory work (tcgen05.st of P, the rescale
// of O, the last tcgen05.ld before dealloc) through
// tcgen05.fence::before_thread_sync here and ::after_thread_sync after the
// wait, the PTX ISA's ordering for tcgen05 across threads. No release of
// generic writes to the peer is needed, and the PTX ISA leaves which scope
// such a remote arrive takes to the kernel: CUTLASS's 2-SM pipelines
// (ClusterBarrier::arrive with a CTA id) and FA4's 2-CTA kernel arrive with
// the default `.release.cta` and wait with the default `.acquire.cta`, and
// fa4 does the same. Cluster scope is not free: ptxas 13.0 puts a
// MEMBAR.ALL.GPU before every `.release.cluster` arrive (on the softmax's P
// hand-off and the correction's O-empty arrival, per tile) and a
// CCTL.IVALL after every `.acquire.cluster` wait (the MMA warp's).
void Lowering::remoteArrive(Value address, int64_t count) {
  std::string text = std::string("mbarrier.arrive") + kRemoteArriveSem +
                     ".shared::cluster.b64 _, [$0]";
  if (count > 1)
    text += ", " + std::to_string(count);
  LLVM::InlineAsmOp::create(
      b, loc(), TypeRange(), ValueRange{address}, text + ";", "r",
      /*has_side_effects=*/true, false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
}

// The registers read here (%cluster_ctarank, %clusterid.x, %nclusterid.x)
// hold one value for the CTA's life: the read has no side effect, so LLVM
// hoists it out of loops and merges repeats (a pair's load warp read its rank
// for each K and V tile: an S2UR and a shift per copy).
Value Lowering::specialRegister(StringRef name) {
  return LLVM::InlineAsmOp::create(
             b, loc(), b.getI32Type(), ValueRange{},
             ("mov.u32 $0, " + name + ";").str(), "=r",
             /*has_side_effects=*/false, false,
             LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
             ArrayAttr())
      .getResult(0);
}

Value Lowering::roleTmemBase() {
  if (!warpTmemBase) {
    // The TMEM base plus this warp's lane field, computed once per role at
    // its entry and broadcast from lane 0 (as CUTLASS's warp index): ptxas
    // then knows it is warp-uniform and keeps every tcgen05.ld/st address
    // in uniform registers.
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfterValue(roleThread);
    Value base = arith::AddIOp::create(b, loc(), kernel.tmemBase, tmemLaneField());
    warpTmemBase = NVVM::ShflOp::create(b, loc(), b.getI32Type(), i32(-1), base,
                                        i32(0), i32(0x1f), NVVM::ShflKind::idx,
                                        UnitAttr());
  }
  return warpTmemBase;
}
Value Lowering::tmemAddress(Value bufferColumn, Value column,
                            int64_t elementBits) {
  Value columnWords = toI32(column);
  if (elementBits != 32)
    columnWords = arith::DivUIOp::create(b, loc(), columnWords,
                                           i32(32 / elementBits));
  Value address = arith::AddIOp::create(b, loc(), roleTmemBase(), bufferColumn);
  address = arith::AddIOp::create(b, loc(), address, columnWords);
  return LLVM::IntToPtrOp::create(b,
      loc(), LLVM::LLVMPointerType::get(b.getContext(), 6), address);
}
Value Lowering::inlinePtx(StringRef instruction, Type type,
                          ValueRange operands) {
  // The constraint of a value of `type`: an f32, a 32- or a 64-bit word.
  auto constraint = [](Type t) {
    assert((t.isF32() || t.isInteger(64) || t.isInteger(32)) &&
           "inlinePtx takes f32, i64 and i32 values");
    return t.isF32() ? "f" : t.isInteger(64) ? "l" : "r";
  };
  std::string text = instruction.str() + " $0", constraints = "=";
  constraints += constraint(type);
  for (auto [i, operand] : llvm::enumerate(operands)) {
    text += ", $" + std::to_string(i + 1);
    constraints += std::string(",") + constraint(operand.getType());
  }
  return LLVM::InlineAsmOp::create(
             b, loc(), type, operands, text + ";", constraints, false, false,
             LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
             ArrayAttr())
      .getResult(0);
}

Value Lowering::approximate(StringRef instruction, Value x) {
  return inlinePtx(instruction, b.getF32Type(), x);
}

Value Lowering::scaleLog2Value(float scaleLog2, Value factor) {
  return factor ? Value(arith::MulFOp::create(b, loc(), f32(scaleLog2), factor))
                : f32(scaleLog2);
}

Value Lowering::scaledMax(Value max, float scaleLog2, Value factor) {
  return LLVM::InlineAsmOp::create(
             b, loc(), b.getF32Type(),
             ValueRange{max, scaleLog2Value(scaleLog2, factor)},
             "mul.rp.f32 $0, $1, $2;", "=f,f,f", false, false,
             LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
             ArrayAttr())
      .getResult(0);
}

Value Lowering::tanh(Value x, float scale) {
  Value e = arith::AddFOp::create(
      b, loc(),
      ex2(arith::MulFOp::create(b, loc(), x, f32(2.0f * scale * float(M_LOG2E)))),
      f32(1.0f));
  Value twiceReciprocal = arith::MulFOp::create(
      b, loc(), approximate("rcp.approx.ftz.f32", e), f32(2.0f));
  return arith::SubFOp::create(b, loc(), f32(1.0f), twiceReciprocal);
}

SmallVector<Value> Lowering::waitForTmemLoads(ArrayRef<Value> raws) {
  // tcgen05.wait::ld as inline assembly that takes the loaded words and
  // gives them back. With the NVVM wait op, which no value depends on, LLVM
  // is free to schedule a use of a tcgen05.ld destination above the wait,
  // and does (fa4-emu reported it); a use of this op's results cannot move
  // above it. One wait covers every load issued before it.
  SmallVector<Value> inputs;
  for (Value raw : raws) {
    auto vector = dyn_cast<VectorType>(raw.getType());
    if (!vector) {
      inputs.push_back(raw);
      continue;
    }
    for (int64_t i = 0; i < vector.getNumElements(); ++i)
      inputs.push_back(
          vector::ExtractOp::create(b, loc(), raw, ArrayRef<int64_t>{i}));
  }
  int64_t words = inputs.size();
  std::string constraints;
  for (int64_t i = 0; i < words; ++i)
    constraints += "=r,";
  for (int64_t i = 0; i < words; ++i)
    constraints += std::to_string(i) + (i + 1 < words ? "," : "");
  SmallVector<Type> types(words, b.getI32Type());
  auto wait = LLVM::InlineAsmOp::create(b,
      loc(), LLVM::LLVMStructType::getLiteral(b.getContext(), types), inputs,
      "tcgen05.wait::ld.sync.aligned;", constraints, /*has_side_effects=*/true,
      false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
  SmallVector<Value> outputs;
  for (int64_t i = 0; i < words; ++i)
    outputs.push_back(LLVM::ExtractValueOp::create(b, loc(), wait.getResult(0),
                                                     ArrayRef<int64_t>{i}));
  return outputs;
}

Value Lowering::waitForTmemLoad(Value raw) {
  SmallVector<Value> outputs = waitForTmemLoads(raw);
  auto vector = dyn_cast<VectorType>(raw.getType());
  if (!vector)
    return outputs.front();
  return vector::FromElementsOp::create(b, loc(), vector, outputs);
}

Type Lowering::convertType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return type;
  return kernel.family->convertTile(tensor);
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

LogicalResult Lowering::lowerBlock(Block &block) {
  for (Operation &op : block)
    if (failed(lowerOp(&op)))
      return failure();
  return success();
}

LogicalResult Lowering::lowerConstant(arith::ConstantOp op) {
  Type type = convertType(op.getType());
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense) {
    mapping.map(op.getResult(), b.clone(*op)->getResult(0));
    return success();
  }
  if (!dense.isSplat())
    return op.emitOpError() << "fa4-to-nvvm lowers splat tiles only";
  Attribute value = dense.getSplatValue<Attribute>();
  Value lowered;
  if (auto vector = dyn_cast<VectorType>(type))
    lowered = arith::ConstantOp::create(b,
        loc(), DenseElementsAttr::get(vector, value));
  else
    lowered = arith::ConstantOp::create(b, loc(), cast<TypedAttr>(value));
  mapping.map(op.getResult(), lowered);
  return success();
}

bool Lowering::storesWaitAfterLoop(scf::ForOp loop) {
  std::optional<int64_t> step = getConstantIntValue(loop.getStep());
  Value buffer;
  bool stores = false;
  for (Operation &op : loop.getBody()->without_terminator()) {
    Value column, tile, opBuffer;
    if (auto load = dyn_cast<TmemLoadOp>(op)) {
      column = load.getColumn();
      tile = load.getResult();
      opBuffer = load.getBuffer();
    } else if (auto store = dyn_cast<TmemStoreOp>(op)) {
      column = store.getColumn();
      tile = store.getTile();
      opBuffer = store.getBuffer();
      stores = true;
    } else if (op.getNumRegions() == 0 && isMemoryEffectFree(&op)) {
      continue;
    } else {
      return false;
    }
    if (!step || column != loop.getInductionVar() ||
        (buffer && opBuffer != buffer) ||
        cast<ShapedType>(tile.getType()).getDimSize(1) > *step)
      return false;
    buffer = opBuffer;
  }
  return stores;
}

/// Loops and branches are rebuilt with per-thread types; their bodies are
/// lowered into the new regions, which end in the lowered yields.
LogicalResult Lowering::lowerFor(Operation *op) {
  auto loop = cast<scf::ForOp>(op);
  // CTA pairs: the even CTA's MMA warp issues the pair's MMAs; its peer's
  // skips the task loop (it allocates and frees the pair's TMEM with it).
  if (kernel.ctaPair && loop->hasAttr("fa4.task_loop") && role &&
      role.getName() == "mma" && !op->hasAttr("fa4.pair_leader_only")) {
    SmallVector<Type> types;
    SmallVector<Value> inits;
    for (Value init : loop.getInitArgs()) {
      inits.push_back(lookup(init));
      types.push_back(inits.back().getType());
    }
    Value leader = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::eq,
                                         ctaRank(), index(0));
    auto branch = scf::IfOp::create(b, loc(), types, leader, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.elseBlock());
      scf::YieldOp::create(b, loc(), inits);
      b.setInsertionPointToStart(branch.thenBlock());
      op->setAttr("fa4.pair_leader_only", b.getUnitAttr());
      LogicalResult lowered = lowerFor(op);
      op->removeAttr("fa4.pair_leader_only");
      if (failed(lowered))
        return failure();
      SmallVector<Value> results;
      for (Value result : loop.getResults())
        results.push_back(lookup(result));
      scf::YieldOp::create(b, loc(), results);
    }
    for (auto [from, to] : llvm::zip(loop.getResults(), branch.getResults()))
      mapping.map(from, to);
    return success();
  }
  SmallVector<Value> inits;
  for (Value init : loop.getInitArgs())
    inits.push_back(lookup(init));
  auto lowered = scf::ForOp::create(b, loc(), lookup(loop.getLowerBound()),
                                      lookup(loop.getUpperBound()),
                                      lookup(loop.getStep()), inits);
  Block *body = lowered.getBody();
  if (!body->empty())
    body->back().erase();
  mapping.map(loop.getInductionVar(), lowered.getInductionVar());
  for (auto [from, to] :
       llvm::zip(loop.getRegionIterArgs(), lowered.getRegionIterArgs()))
    mapping.map(from, to);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(body);
    if (failed(lowerBlock(*loop.getBody())))
      return failure();
  }
  // A chunked in-place update's stores, waited for once (FA4's correction
  // waits once a rescale): before anything after the loop may hand them on.
  if (storesWaitAfterLoop(loop))
    NVVM::Tcgen05WaitOp::create(b, loc(), NVVM::Tcgen05WaitKind::STORE);
  for (auto [from, to] : llvm::zip(loop.getResults(), lowered.getResults()))
    mapping.map(from, to);
  return success();
}

LogicalResult Lowering::lowerIf(Operation *op) {
  auto branch = cast<scf::IfOp>(op);
  // The straddling-block mask of the softmax: S stays deferred, the mask
  // applies chunk by chunk inside the fused softmax.
  if (branch.getNumResults() == 1 && !branch.getElseRegion().empty()) {
    Block &thenBlock = branch.getThenRegion().front();
    auto yieldThen = cast<scf::YieldOp>(thenBlock.getTerminator());
    auto yieldElse =
        cast<scf::YieldOp>(branch.getElseRegion().front().getTerminator());
    auto mask = yieldThen.getOperand(0).getDefiningOp<MaskOp>();
    if (mask && deferred.count(mask.getScores()) &&
        yieldElse.getOperand(0) == mask.getScores()) {
      for (Operation &inner : thenBlock.without_terminator())
        if (&inner != mask.getOperation() && failed(lowerOp(&inner)))
          return failure();
      DeferredScores scores = deferred.lookup(mask.getScores());
      scores.mask = mask;
      scores.maskCondition = lookup(branch.getCondition());
      deferred[branch.getResult(0)] = scores;
      return success();
    }
  }
  SmallVector<Type> types;
  for (Type type : branch.getResultTypes())
    types.push_back(convertType(type));
  bool hasElse = !branch.getElseRegion().empty();
  auto lowered = scf::IfOp::create(b, loc(), types, lookup(branch.getCondition()),
                                     hasElse);
  for (auto [from, to] : llvm::zip(branch.getRegions(), lowered.getRegions())) {
    if (from->empty())
      continue;
    Block *body = &to->front();
    if (!body->empty())
      body->back().erase();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(body);
    if (failed(lowerBlock(from->front())))
      return failure();
  }
  for (auto [from, to] : llvm::zip(branch.getResults(), lowered.getResults()))
    mapping.map(from, to);
  return success();
}

LogicalResult Lowering::lowerOp(Operation *op) {
  currentLoc = op->getLoc();
  if (auto constant = dyn_cast<arith::ConstantOp>(op))
    return lowerConstant(constant);
  if (isa<scf::ForOp>(op))
    return lowerFor(op);
  if (isa<scf::IfOp>(op))
    return lowerIf(op);
  if (auto yield = dyn_cast<scf::YieldOp>(op)) {
    // A P the loop carries to its next block is converted over the one it
    // carried in (Hopper's pipelined loop).
    if (auto loop = dyn_cast<scf::ForOp>(yield->getParentOp()))
      for (auto [operand, carried] :
           llvm::zip(yield.getOperands(), loop.getRegionIterArgs()))
        if (lazyTruncations.count(operand))
          materializeTruncation(operand, mapping.lookup(carried));
    SmallVector<Value> operands;
    for (Value operand : yield.getOperands())
      operands.push_back(lookup(operand));
    scf::YieldOp::create(b, loc(), operands);
    return success();
  }
  if (isa<arith::ArithDialect>(op->getDialect())) {
    b.clone(*op, mapping);
    return success();
  }
  if (isa<func::ReturnOp>(op)) {
    LLVM::ReturnOp::create(b, loc(), ValueRange());
    return success();
  }
  if (auto dim = dyn_cast<memref::DimOp>(op)) {
    std::optional<int64_t> axis = dim.getConstantIndex();
    auto type = cast<MemRefType>(dim.getSource().getType());
    if (!axis)
      return dim.emitOpError() << "fa4-to-nvvm needs a constant dimension";
    Value value;
    auto extra = kernel.extras.find(dim.getSource());
    if (!type.isDynamicDim(*axis)) {
      value = index(type.getDimSize(*axis));
    } else if (extra != kernel.extras.end()) {
      // An extra's sizes (a block table's max_blocks, say) are its own.
      if (*axis < 0 || *axis >= static_cast<int64_t>(extra->second.sizes.size()))
        return dim.emitOpError() << "asks for dimension " << *axis
                                 << " of an extra of rank "
                                 << extra->second.sizes.size();
      value = extra->second.sizes[*axis];
    } else if (*axis < 0 || *axis > 1) {
      return dim.emitOpError() << "asks for a dynamic dimension " << *axis
                               << " of a tensor: only batch and sequence "
                                  "lengths are the kernel's parameters";
    } else if (*axis == 0) {
      value = toIndex(kernel.batch);
    } else {
      Value source = dim.getSource();
      bool keys = source == kernel.k || source == kernel.v;
      value = toIndex(keys ? kernel.seqK : kernel.seqQ);
    }
    mapping.map(dim.getResult(), value);
    return success();
  }
  if (auto specialize = dyn_cast<WarpSpecializeOp>(op))
    return lowerWarpSpecialize(specialize);
  // The ops the schedule's family lowers its own way.
  if (std::optional<LogicalResult> own = kernel.family->lowerOwn(*this, op))
    return *own;

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<SmemAllocOp, MBarrierAllocOp>([&](Operation *alloc) -> LogicalResult {
        mapping.map(alloc->getResult(0),
                    smemAt(kernel.smem, i32(kernel.smemOffset.lookup(alloc))));
        return success();
      })
      .Case<TaskCountOp, TaskCoordsOp, CtaIdOp, CtaRankOp, GridSizeOp,
            KvBlockRangeOp, SequenceLengthOp, SequenceSpanOp>(
          [&](Operation *scheduler) { return lowerScheduler(scheduler); })
      .Case([&](QBlockRangeOp range) { return lowerQBlockRange(range); })
      // The backward's grid-wide steps are kernels of their own
      // (FA4ToNVVM.cpp's convertBackward): nothing in the main one.
      .Case<PrepareBackwardOp, FinishDqOp>(
          [](Operation *) { return success(); })
      .Case<MBarrierWaitOp, MBarrierArriveOp, MBarrierExpectTxOp, MmaCommitOp,
            NamedBarrierSyncOp, NamedBarrierArriveOp>(
          [&](Operation *barrier) { return lowerBarrier(barrier); })
      .Case<TmaLoadOp, TmaStoreOp, TmaStoreWaitOp>(
          [&](Operation *tma) { return lowerTma(tma); })
      .Case<SmemLoadOp, SmemStoreOp>(
          [&](Operation *smem) { return lowerSmem(smem); })
      .Case([&](LoadDescaleOp load) -> LogicalResult {
        // FP8's descale: entry [batch, head] of a row-major f32 table, one
        // global load per task and thread.
        auto extra = kernel.extras.find(load.getTable());
        if (extra == kernel.extras.end() || extra->second.sizes.size() != 2)
          return load.emitOpError()
                 << "reads a descale table that is not a [batch, kv_heads] "
                    "extra of the kernel";
        Value offset = arith::AddIOp::create(
            b, loc(),
            arith::MulIOp::create(b, loc(), lookup(load.getBatch()),
                                  extra->second.sizes[1]),
            lookup(load.getHead()));
        Value address = LLVM::GEPOp::create(
            b, loc(), extra->second.pointer.getType(), b.getF32Type(),
            extra->second.pointer, ValueRange{toI32(offset)});
        mapping.map(load.getResult(),
                    LLVM::LoadOp::create(b, loc(), b.getF32Type(), address)
                        .getResult());
        return success();
      })
      // The backward's pointwise ops on transposed tiles and its stores
      // (Backward.cpp); its mod regions are not lowered yet.
      .Case<LoadRowTileOp, ProbsFromLseOp, SoftmaxGradOp, SoftcapGradOp,
            ConvertTileOp, AccumulateDqOp, StoreKvTileOp>(
          [&](Operation *backward) { return lowerBackward(backward); })
      .Case([&](ScoreModGradOp grad) { return lowerBackward(grad); })
      .Case([&](ScoreModOp scoreMod) -> LogicalResult {
        if (scoreMod.getTransposed())
          return lowerTransposedScoreMod(scoreMod);
        return lowerRowMath(scoreMod);
      })
      .Case([&](MaskOp mask) -> LogicalResult {
        return mask.getTransposed() ? lowerTransposedMask(mask)
                                    : lowerRowMath(mask);
      })
      .Case<SoftcapOp, OnlineSoftmaxOp, CorrectionOp, NormalizeOp,
            NeedsRescaleOp, StoreLseTileOp>(
          [&](Operation *math) { return lowerRowMath(math); })
      .Case<StorePartialOOp, MergeSplitsOp>(
          [&](Operation *split) { return lowerSplit(split); })
      .Case([&](StoreOTileOp store) { return lowerDirectStore(store); })
      .Default([&](Operation *other) -> LogicalResult {
        // An op of the other family's schedule (fa4.warp_specialize's
        // verifier refuses a mix; convert() a schedule for another chip).
        if (std::optional<target::Family> only = familyOnly(other))
          return other->emitOpError()
                 << "is " << target::familyName(*only)
                 << "'s and has no lowering in a "
                 << target::familyName(kernel.family->family()) << " kernel";
        return other->emitOpError()
               << "has no NVVM lowering (fa4-to-nvvm expects the level-C "
                  "schedule after fa4-correction)";
      });
}

//===----------------------------------------------------------------------===//
// The CTA: prologue and role dispatch
//===----------------------------------------------------------------------===//

LogicalResult Lowering::lowerWarpSpecialize(WarpSpecializeOp op) {
  Value tid = kernel.threadId;
  Value warp = arith::DivUIOp::create(b, loc(), tid, i32(32));

  // Thread 0 initializes every mbarrier before any role may touch one.
  Operation *scope = op->getParentOp();
  auto first = scf::IfOp::create(b,
      loc(), arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::eq, tid, i32(0)),
      false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(first.thenBlock());
    scope->walk([&](MBarrierAllocOp alloc) {
      int64_t base = kernel.smemOffset.lookup(alloc);
      // A pair's barrier counts both CTAs' arrivals (in the even CTA's
      // copy; the odd CTA's is never used).
      int64_t count = alloc.getCount() *
                      (kernel.pairBarriers.contains(alloc) ||
                               kernel.mirroredBarriers.contains(alloc)
                           ? 2
                           : 1);
      for (int64_t stage = 0; stage < alloc.getBarrier().getType().getStages();
           ++stage)
        NVVM::MBarrierInitOp::create(b,
            loc(), smemAt(kernel.smem, i32(base + 8 * stage)),
            i32(count), Value());
    });
    if (kernel.clearBarrierOffset >= 0)
      NVVM::MBarrierInitOp::create(
          b, loc(), smemAt(kernel.smem, i32(kernel.clearBarrierOffset)), i32(1),
          Value());
    // TMA and tcgen05.commit arrive through the async proxy: the inits must
    // be made visible to it before the CTA barrier hands the mbarriers out,
    // as NVIDIA's kernels do.
    NVVM::FenceMbarrierInitOp::create(b, loc());
  }

  // The warp that owns TMEM allocates it for the whole CTA.
  RoleOp owner;
  op.walk([&](TmemAllocColumnsOp alloc) {
    owner = alloc->getParentOfType<RoleOp>();
  });
  Value slot = smemAt(kernel.smem, i32(kernel.tmemSlotOffset));
  if (owner) {
    auto allocate = scf::IfOp::create(b,
        loc(),
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::eq, warp,
                                i32(owner.getFirstWarp())),
        false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(allocate.thenBlock());
    // A pair allocates the same columns in both CTAs, collectively.
    auto group = kernel.ctaPair ? NVVM::CTAGroupKind::CTA_2
                                : NVVM::CTAGroupKind::CTA_1;
    NVVM::Tcgen05AllocOp::create(b, loc(), slot, i32(kernel.tmemColumns),
                                 group);
    NVVM::Tcgen05RelinquishAllocPermitOp::create(b, loc(), group);
  }
  if (kernel.ctaPair) {
    // Both CTAs' barriers are initialized (fence.mbarrier_init's release at
    // cluster scope) before either CTA arrives on or copies to its peer's,
    // and the TMEM address is written before any thread reads it.
    NVVM::ClusterArriveOp::create(b, loc(), b.getUnitAttr());
    NVVM::ClusterWaitOp::create(b, loc(), b.getUnitAttr());
  } else {
    NVVM::Barrier0Op::create(b, loc());
  }
  kernel.tmemBase = LLVM::LoadOp::create(b, loc(), b.getI32Type(), slot);

  // Every role is dispatched, an empty one too: setmaxnreg must be executed
  // by all four warps of a warpgroup.
  for (RoleOp role : op.getRoles().front().getOps<RoleOp>()) {
    Value from = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::uge, warp,
                                         i32(role.getFirstWarp()));
    Value to = arith::CmpIOp::create(b,
        loc(), arith::CmpIPredicate::ult, warp,
        i32(role.getFirstWarp() + role.getNumWarps()));
    auto mine = scf::IfOp::create(b,
        loc(), arith::AndIOp::create(b, loc(), from, to), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(mine.thenBlock());
    if (failed(lowerRole(role)))
      return failure();
  }
  return success();
}

LogicalResult Lowering::lowerRole(RoleOp newRole) {
  role = newRole;
  currentLoc = role.getLoc();
  // A 512-thread CTA starts every thread at 128 registers; each role moves
  // to its budget.
  int64_t registers = role.getRegisters();
  int64_t start = blackwell::registersAtLaunch(
      role->getParentOfType<WarpSpecializeOp>().getNumThreads());
  if (registers != start)
    NVVM::SetMaxRegisterOp::create(b,
        loc(), registers,
        registers > start ? NVVM::SetMaxRegisterAction::increase
                          : NVVM::SetMaxRegisterAction::decrease);
  IRMapping outerMapping = mapping;
  KernelState outerKernel = kernel;
  llvm::scope_exit restore([&] {
    mapping = std::move(outerMapping);
    kernel = std::move(outerKernel);
  });
  rematerializeRoleLiveIns();
  Value thread = arith::SubIOp::create(b,
      loc(), kernel.threadId, i32(role.getFirstWarp() * 32));
  roleThread = toIndex(thread);
  warpTmemBase = Value();
  stagedForAsyncProxy = false;
  laneStoresPending = false;
  electRoleIssuer();
  roleUsesTensorMemory = false;
  bool rowsInTensorMemory = false;
  role.walk([&](Operation *inner) {
    if (isa<TmemLoadOp, TmemStoreOp, ScoreMmaAsyncOp, ValueMmaAsyncOp>(inner))
      roleUsesTensorMemory = true;
    if (isa<TmemLoadOp, TmemStoreOp, OnlineSoftmaxOp>(inner))
      rowsInTensorMemory = true;
  });
  // Warp w reaches only TMEM lanes 32·(w mod 4) to 32·(w mod 4) + 31, and a
  // thread's row of a tile is its TMEM lane: a role that moves rows between
  // TMEM and registers must start on a warpgroup.
  if (rowsInTensorMemory && role.getFirstWarp() % 4 != 0)
    return role.emitOpError()
           << "reads or writes tensor memory but starts at warp "
           << role.getFirstWarp()
           << ": such a role must start at a multiple of 4 warps";
  prefetchRoleTensorMaps();
  // A role whose work is its elected thread's keeps only its first warp:
  // the others have given their registers up and leave.
  if (role->hasAttr("fa4.single_warp")) {
    auto rest = scf::IfOp::create(
        b, loc(),
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::uge, roleThread,
                              index(32)),
        false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rest.thenBlock());
    // (A thread that exits is no longer counted by barrier.cluster.)
    emitExit(/*clusterBarrier=*/false);
  }
  if (failed(lowerBlock(role.getBody().front())))
    return failure();
  placeTensorFences(*b.getInsertionBlock());
  // Each role ends in its own exit, as NVIDIA's warp-specialized kernels
  // do: with no path from one role's code into code other roles share,
  // ptxas allocates each role's registers within its setmaxnreg budget
  // (with a shared tail it allocates the whole kernel within the launch's
  // 128 and spills the softmax's S row).
  emitExit();
  return success();
}

/// Every value the role takes from the kernel's prologue is re-made at the
/// role's entry, after setmaxnreg, by an opaque move: LLVM cannot hoist the
/// role's arithmetic on it into the prologue, so nothing but these moves'
/// sources is live across setmaxnreg, where ptxas would keep such values in
/// local memory (a spill) rather than in registers.
void Lowering::rematerializeRoleLiveIns() {
  llvm::SetVector<Value> liveIns;
  getUsedValuesDefinedAbove(role.getBody(), liveIns);
  for (Value liveIn : liveIns) {
    // The grid's size is read again here: a value live from the prologue
    // into every role is kept across setmaxnreg, where ptxas may put it in
    // local memory (it did at head dim 192). (The CTA's index moved the
    // same way made prefix-LM's kernel spill instead: it stays.)
    Operation *def = liveIn.getDefiningOp();
    if (isa_and_nonnull<GridSizeOp>(def) && succeeded(lowerScheduler(def)))
      continue;
    if (Value lowered = mapping.lookupOrNull(liveIn))
      mapping.map(liveIn, rematerializeAtRoleEntry(lowered));
  }
  for (Value *field : {&kernel.batch, &kernel.seqQ, &kernel.seqK,
                       &kernel.threadId, &kernel.tmemBase, &kernel.smem})
    *field = rematerializeAtRoleEntry(*field);
  // In the order of the kernel's arguments, not the maps' hash order: the
  // output must not depend on where values were allocated.
  auto inArgumentOrder = [](llvm::DenseMap<Value, Value> &map) {
    SmallVector<Value> keys;
    for (auto &entry : map)
      keys.push_back(entry.first);
    llvm::sort(keys, [](Value a, Value b) {
      auto argA = dyn_cast<BlockArgument>(a), argB = dyn_cast<BlockArgument>(b);
      unsigned ia = argA ? argA.getArgNumber() : ~0u;
      unsigned ib = argB ? argB.getArgNumber() : ~0u;
      return ia < ib;
    });
    return keys;
  };
  for (Value key : inArgumentOrder(kernel.tensorMaps))
    kernel.tensorMaps[key] = rematerializeAtRoleEntry(kernel.tensorMaps[key]);
  for (Value key : inArgumentOrder(kernel.globalPointers))
    kernel.globalPointers[key] =
        rematerializeAtRoleEntry(kernel.globalPointers[key]);
}

/// One thread issues for the whole role: elect.sync picks one per warp, so a
/// role of several warps also asks for its first warp. In an issuing role
/// (one warp, or one left working) it alone waits and arrives too
/// (ifElected says why).
void Lowering::electRoleIssuer() {
  roleElected = NVVM::ElectSyncOp::create(b, loc(), b.getI1Type(), Value());
  if (role.getNumWarps() > 1)
    roleElected = arith::AndIOp::create(
        b, loc(), roleElected,
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult, roleThread,
                              index(32)));
  onlyElectedWaits =
      role.getNumWarps() == 1 || role->hasAttr("fa4.single_warp");
}

/// A role that issues TMA copies prefetches their tensor maps first, as
/// FA4's load warp does: the descriptor is then on chip for the first copy.
void Lowering::prefetchRoleTensorMaps() {
  llvm::SetVector<Value> maps;
  role.walk([&](Operation *inner) {
    if (auto load = dyn_cast<TmaLoadOp>(inner))
      maps.insert(kernel.tensorMaps.lookup(load.getSource()));
    if (auto store = dyn_cast<TmaStoreOp>(inner))
      maps.insert(kernel.tensorMaps.lookup(store.getDest()));
  });
  maps.remove(Value());
  if (maps.empty())
    return;
  ifElected([&] {
    // As inline assembly on the generic address: LLVM's lowering of the
    // NVVM op emits a param-space and a generic prefetch of the same map.
    for (Value map : maps)
      LLVM::InlineAsmOp::create(
          b, loc(), TypeRange(), ValueRange{map}, "prefetch.tensormap [$0];",
          "l", /*has_side_effects=*/true, false,
          LLVM::tailcallkind::TailCallKind::None,
          LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
          ArrayAttr());
  });
}

void Lowering::emitExit(bool clusterBarrier) {
  // CTA pairs: a CTA's threads leave only when every thread of its peer is
  // done too — the peer's last arrivals land in this CTA's shared memory
  // (the even CTA's barriers), and the even CTA's copies and MMAs reach
  // the odd CTA's. Not .aligned: a role's lanes may reach their exit
  // apart.
  if (kernel.ctaPair && clusterBarrier) {
    NVVM::ClusterArriveOp::create(b, loc(), UnitAttr());
    NVVM::ClusterWaitOp::create(b, loc(), UnitAttr());
  }
  LLVM::InlineAsmOp::create(
      b, loc(), TypeRange(), ValueRange(), "exit;", "", /*has_side_effects=*/true,
      false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
}

//===----------------------------------------------------------------------===//
// The persistent scheduler
//===----------------------------------------------------------------------===//

std::pair<Value, Value> Lowering::emitTaskPositions(Value rowBegin, Value seqQ,
                                                   int64_t ratio, int64_t rows) {
  // AttentionMath's taskPositions: the first position and the last (clamped
  // to seq_q - 1).
  Value first = arith::DivSIOp::create(b, loc(), rowBegin, index(ratio));
  Value last = arith::MinSIOp::create(
      b, loc(), arith::SubIOp::create(b, loc(), seqQ, index(1)),
      arith::DivSIOp::create(
          b, loc(), arith::AddIOp::create(b, loc(), rowBegin, index(rows - 1)),
          index(ratio)));
  return {first, last};
}

SmallVector<Value, 4> Lowering::emitKvBlockRange(Value rowBegin, Value seqQ,
                                                 Value seqK, int64_t ratio,
                                                 int64_t rows, int64_t blockN,
                                                 const MaskModBounds &bounds) {
  // AttentionMath's kvBlockRange, step for step.
  auto cmp = [&](arith::CmpIPredicate predicate, Value x, Value y) -> Value {
    return arith::CmpIOp::create(b, loc(), predicate, x, y);
  };
  Value zero = index(0), one = index(1);
  auto [firstPos, lastPos] = emitTaskPositions(rowBegin, seqQ, ratio, rows);
  // Rows that see nothing before key 0 or from seq_k on are left out.
  Value seeingFirst = firstPos, seeingLast = lastPos;
  if (bounds.bounds.upper)
    seeingFirst = arith::MaxSIOp::create(
        b, loc(), firstPos,
        emitFirstReaching(*bounds.bounds.upper, zero, seqQ, seqK));
  if (bounds.bounds.lower)
    seeingLast = arith::MinSIOp::create(
        b, loc(), lastPos,
        arith::SubIOp::create(
            b, loc(),
            emitFirstReaching(*bounds.bounds.lower, seqK, seqQ, seqK), one));
  Value firstEnd, lastEnd;
  Value firstBegin = emitKeyEdges(seeingFirst, bounds.bounds, seqQ, seqK, firstEnd);
  Value lastBegin = emitKeyEdges(seeingLast, bounds.bounds, seqQ, seqK, lastEnd);
  Value empty = arith::OrIOp::create(b,
      loc(),
      arith::OrIOp::create(b, loc(), cmp(arith::CmpIPredicate::sle, seqK, zero),
                           cmp(arith::CmpIPredicate::sgt, seeingFirst, seeingLast)),
      cmp(arith::CmpIPredicate::sle, lastEnd, firstBegin));
  Value block = index(blockN);
  Value begin = arith::DivSIOp::create(b, loc(), firstBegin, block);
  Value end = arith::CeilDivSIOp::create(b, loc(), lastEnd, block);
  auto clamp = [&](Value value, Value low, Value high) -> Value {
    return arith::MinSIOp::create(b,
        loc(), arith::MaxSIOp::create(b, loc(), value, low), high);
  };
  Value fullBegin = clamp(arith::CeilDivSIOp::create(b, loc(), lastBegin, block),
                          begin, end);
  Value fullEnd =
      clamp(arith::DivSIOp::create(b, loc(), firstEnd, block), fullBegin, end);
  // A row left out leaves no block whole.
  if (bounds.bounds.upper || bounds.bounds.lower) {
    Value everyRowSees = arith::AndIOp::create(
        b, loc(), cmp(arith::CmpIPredicate::eq, seeingFirst, firstPos),
        cmp(arith::CmpIPredicate::eq, seeingLast, lastPos));
    fullEnd = arith::SelectOp::create(b, loc(), everyRowSees, fullEnd, fullBegin);
  }
  // A predicate that is not all affine is evaluated in every block.
  if (!bounds.exact)
    fullBegin = fullEnd = begin;
  SmallVector<Value, 4> results;
  for (Value value : {begin, fullBegin, fullEnd, end})
    results.push_back(arith::SelectOp::create(b, loc(), empty, zero, value));
  return results;
}

FailureOr<SmallVector<Value, 4>>
Lowering::emitBlockMaskNarrowing(KvBlockRangeOp range, ArrayRef<Value> analysed) {
  auto extra = kernel.extras.find(range.getBlockMask());
  if (extra == kernel.extras.end() || extra->second.sizes.size() != 4)
    return range.emitOpError()
           << "reads a block mask that is not a parameter of the kernel";
  const KernelState::Extra &table = extra->second;
  auto cmp = [&](arith::CmpIPredicate predicate, Value x, Value y) -> Value {
    return arith::CmpIOp::create(b, loc(), predicate, x, y);
  };
  auto select = [&](Value c, Value x, Value y) -> Value {
    return arith::SelectOp::create(b, loc(), c, x, y);
  };
  auto min = [&](Value x, Value y) -> Value {
    return arith::MinSIOp::create(b, loc(), x, y);
  };
  auto max = [&](Value x, Value y) -> Value {
    return arith::MaxSIOp::create(b, loc(), x, y);
  };
  Value zero = index(0), one = index(1);
  int64_t ratio = range.getGqaRatio();
  Value rowBegin = lookup(range.getRowBegin()), seqQ = lookup(range.getSeqQ()),
        seqK = lookup(range.getSeqK());
  // The blocks the attribute mask alone leaves whole.
  MaskModBounds attributeOnly;
  attributeOnly.bounds = KeyBounds::band(maskBandFor(
      range.getMask(), range.getWindowLeft(), range.getWindowRight()));
  SmallVector<Value, 4> attribute =
      emitKvBlockRange(rowBegin, seqQ, seqK, ratio, range.getRows(),
                       range.getBlockN(), attributeOnly);
  // The task's query blocks and the block mask's heads in its group.
  auto [firstPos, lastPos] =
      emitTaskPositions(rowBegin, seqQ, ratio, range.getRows());
  Value block = index(kBlockMaskQueries);
  Value firstBlock = arith::DivSIOp::create(b, loc(), firstPos, block);
  Value blocks = max(zero, arith::AddIOp::create(
                               b, loc(),
                               arith::SubIOp::create(
                                   b, loc(),
                                   arith::DivSIOp::create(b, loc(), lastPos, block),
                                   firstBlock),
                               one));
  Value sharedHeads = cmp(arith::CmpIPredicate::eq, table.sizes[1], one);
  Value heads = select(sharedHeads, one, index(ratio));
  // Indices stay inside the table whatever its sizes (the runtime checks
  // them against the problem's).
  Value batch = min(select(cmp(arith::CmpIPredicate::eq, table.sizes[0], one),
                           zero, lookup(range.getBatch())),
                    arith::SubIOp::create(b, loc(), table.sizes[0], one));
  Value firstHead =
      arith::MulIOp::create(b, loc(), lookup(range.getKvHead()), index(ratio));
  constexpr int64_t kFar = int64_t(1) << 30;
  auto loop = scf::ForOp::create(
      b, loc(), zero, arith::MulIOp::create(b, loc(), blocks, heads), one,
      ValueRange{index(kFar), index(-kFar), index(-kFar), index(kFar)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value i = loop.getInductionVar();
    Value queryBlock = min(
        arith::AddIOp::create(b, loc(), firstBlock,
                              arith::DivSIOp::create(b, loc(), i, heads)),
        arith::SubIOp::create(b, loc(), table.sizes[2], one));
    Value head = min(select(sharedHeads, zero,
                            arith::AddIOp::create(
                                b, loc(), firstHead,
                                arith::RemSIOp::create(b, loc(), i, heads))),
                     arith::SubIOp::create(b, loc(), table.sizes[1], one));
    Value entry = arith::MulIOp::create(
        b, loc(),
        arith::AddIOp::create(
            b, loc(),
            arith::MulIOp::create(
                b, loc(),
                arith::AddIOp::create(
                    b, loc(), arith::MulIOp::create(b, loc(), batch, table.sizes[1]),
                    head),
                table.sizes[2]),
            queryBlock),
        index(4));
    Type i32 = b.getI32Type();
    Value e[4];
    for (int c = 0; c < 4; ++c) {
      Value address = LLVM::GEPOp::create(
          b, loc(), table.pointer.getType(), i32, table.pointer,
          ValueRange{toI32(arith::AddIOp::create(b, loc(), entry, index(c)))});
      e[c] = toIndex(LLVM::LoadOp::create(b, loc(), i32, address).getResult());
    }
    ValueRange carried = loop.getRegionIterArgs();
    Value sees = cmp(arith::CmpIPredicate::slt, e[0], e[3]);
    scf::YieldOp::create(
        b, loc(),
        ValueRange{select(sees, min(carried[0], e[0]), carried[0]),
                   select(sees, max(carried[1], e[3]), carried[1]),
                   max(carried[2], e[1]),
                   min(carried[3], select(sees, e[2], index(-kFar)))});
  }
  ValueRange hull = loop.getResults();
  Value begin = max(analysed[0], hull[0]);
  Value end = min(analysed[3], hull[1]);
  Value empty = cmp(arith::CmpIPredicate::sge, begin, end);
  auto clamp = [&](Value value, Value low, Value high) {
    return min(max(value, low), high);
  };
  Value fullBegin = clamp(max(hull[2], attribute[1]), begin, end);
  Value fullEnd = clamp(min(hull[3], attribute[2]), fullBegin, end);
  SmallVector<Value, 4> results;
  for (Value value : {begin, fullBegin, fullEnd, end})
    results.push_back(select(empty, zero, value));
  return results;
}

LogicalResult Lowering::lowerScheduler(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](TaskCountOp count) -> LogicalResult {
        if (count.getVarlen()) {
          // AttentionMath.h's varlenSlot(seq_q, batch) per head group.
          Value slots = emitVarlenSlot(lookup(count.getSeqQ()),
                                       lookup(count.getBatch()),
                                       lookup(count.getSeqQ()),
                                       count.getGqaRatio(), count.getRows());
          mapping.map(count.getResult(),
                      arith::MulIOp::create(
                          b, loc(), slots,
                          index(count.getKvHeads() * count.getGroupsPerKv())));
          return success();
        }
        Value packed = arith::MulIOp::create(b, loc(), lookup(count.getSeqQ()),
                                               index(count.getGqaRatio()));
        Value mBlocks = arith::CeilDivSIOp::create(b, loc(), packed,
                                                     index(count.getRows()));
        Value tasks = arith::MulIOp::create(b,
            loc(), arith::MulIOp::create(b, loc(), lookup(count.getBatch()),
                                           index(count.getKvHeads() *
                                                 count.getGroupsPerKv())),
            mBlocks);
        mapping.map(count.getResult(), tasks);
        return success();
      })
      // Read where the role asks (an opaque read LLVM does not hoist into
      // the kernel's prologue): a value live from the prologue into every
      // role is kept across setmaxnreg, where ptxas may put it in local
      // memory (head dim 192's MMA warp did).
      // CTA pairs count clusters: the pair's index and the clusters of
      // the grid.
      .Case([&](CtaIdOp cta) -> LogicalResult {
        mapping.map(cta.getResult(),
                    toIndex(specialRegister(kernel.ctaPair ? "%clusterid.x"
                                                           : "%ctaid.x")));
        return success();
      })
      .Case([&](CtaRankOp rank) -> LogicalResult {
        mapping.map(rank.getResult(), kernel.ctaPair ? ctaRank() : index(0));
        return success();
      })
      .Case([&](GridSizeOp grid) -> LogicalResult {
        mapping.map(grid.getResult(),
                    toIndex(specialRegister(kernel.ctaPair ? "%nclusterid.x"
                                                           : "%nctaid.x")));
        return success();
      })
      .Case([&](KvBlockRangeOp range) { return lowerKvBlockRange(range); })
      .Case([&](TaskCoordsOp coords) { return lowerTaskCoords(coords); })
      .Case([&](SequenceLengthOp length) -> LogicalResult {
        auto extra = kernel.extras.find(length.getTable());
        if (extra == kernel.extras.end() || extra->second.sizes.size() != 1)
          return length.emitOpError()
                 << "reads a seqused_k table that is not a parameter of the "
                    "kernel";
        const KernelState::Extra &table = extra->second;
        // One i32 per sequence (the runtime checks the table has batch
        // entries), sign-extended so that a negative count clamps to 0.
        Type i32 = b.getI32Type();
        Value address = LLVM::GEPOp::create(
            b, loc(), table.pointer.getType(), i32, table.pointer,
            ValueRange{toI32(lookup(length.getBatch()))});
        Value keys =
            toIndex(LLVM::LoadOp::create(b, loc(), i32, address).getResult());
        mapping.map(length.getResult(),
                    arith::MinSIOp::create(
                        b, loc(), arith::MaxSIOp::create(b, loc(), keys, index(0)),
                        lookup(length.getSeqK())));
        return success();
      })
      .Case([&](SequenceSpanOp span) -> LogicalResult {
        auto extra = kernel.extras.find(span.getTable());
        if (extra == kernel.extras.end() || extra->second.sizes.size() != 1)
          return span.emitOpError()
                 << "reads a cu_seqlens table that is not a parameter of the "
                    "kernel";
        const KernelState::Extra &table = extra->second;
        // Entries batch and batch + 1 (the runtime checks the table has
        // batch + 1), sign-extended and clamped so that no row outside the
        // packed tensor is read: AttentionMath's sequenceSpan.
        Type i32 = b.getI32Type();
        Value total = lookup(span.getTotal());
        auto entry = [&](Value at) -> Value {
          Value address = LLVM::GEPOp::create(b, loc(), table.pointer.getType(),
                                              i32, table.pointer,
                                              ValueRange{toI32(at)});
          return toIndex(LLVM::LoadOp::create(b, loc(), i32, address));
        };
        auto clamp = [&](Value value, Value low) -> Value {
          return arith::MinSIOp::create(
              b, loc(), arith::MaxSIOp::create(b, loc(), value, low), total);
        };
        Value batch = lookup(span.getBatch());
        Value offset = clamp(entry(batch), index(0));
        Value end = clamp(
            entry(arith::AddIOp::create(b, loc(), batch, index(1))), offset);
        mapping.map(span.getOffset(), offset);
        mapping.map(span.getLength(),
                    arith::SubIOp::create(b, loc(), end, offset));
        return success();
      })
      .Default([](Operation *) { return failure(); });
}

LogicalResult Lowering::lowerKvBlockRange(KvBlockRangeOp range) {
  SmallVector<Value, 4> results = emitKvBlockRange(
      lookup(range.getRowBegin()), lookup(range.getSeqQ()),
      lookup(range.getSeqK()), range.getGqaRatio(), range.getRows(),
      range.getBlockN(),
      maskBounds(range.getMask(), range.getWindowLeft(),
                 range.getWindowRight(), range.getMaskMod()));
  if (range.getBlockMask()) {
    FailureOr<SmallVector<Value, 4>> narrowed =
        emitBlockMaskNarrowing(range, results);
    if (failed(narrowed))
      return failure();
    results = *narrowed;
  }
  for (auto [from, to] : llvm::zip(range.getResults(), results))
    mapping.map(from, to);
  return success();
}

LogicalResult Lowering::lowerQBlockRange(QBlockRangeOp range) {
  // A mask_mod weighs in by its bounds (emitKvBlockRange: a predicate that
  // is not all affine leaves no block whole).
  MaskModBounds bounds = maskBounds(range.getMask(), range.getWindowLeft(),
                                    range.getWindowRight(), range.getMaskMod());
  Value seqQ = lookup(range.getSeqQ()), seqK = lookup(range.getSeqK());
  int64_t rows = range.getRows(), ratio = range.getGqaRatio();
  int64_t blockN = range.getBlockN();
  Value block = arith::DivUIOp::create(b, loc(), lookup(range.getCol()),
                                       index(blockN));
  Value queryBlocks = arith::CeilDivUIOp::create(
      b, loc(), arith::MulIOp::create(b, loc(), seqQ, index(ratio)),
      index(rows));
  // AttentionMath.h's queryBlockRange: every query block's key range
  // (emitKvBlockRange, the forward's), keeping the first and last block
  // that visits `block`, the first and last that sees it whole, and how
  // many of each.
  Value none = index(-1);
  auto scan = scf::ForOp::create(
      b, loc(), index(0), queryBlocks, index(1),
      ValueRange{none, none, none, none, index(0), index(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(scan.getBody());
    Value m = scan.getInductionVar();
    ValueRange carried = scan.getRegionIterArgs();
    SmallVector<Value, 4> keys = emitKvBlockRange(
        arith::MulIOp::create(b, loc(), m, index(rows)), seqQ, seqK, ratio,
        rows, blockN, bounds);
    auto within = [&](Value lowEdge, Value highEdge) -> Value {
      return arith::AndIOp::create(
          b, loc(),
          arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sge, block,
                                lowEdge),
          arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::slt, block,
                                highEdge));
    };
    Value visits = within(keys[0], keys[3]);
    Value whole = arith::AndIOp::create(b, loc(), visits,
                                        within(keys[1], keys[2]));
    auto firstOf = [&](Value when, Value current) -> Value {
      Value unset = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::slt,
                                          current, index(0));
      return arith::SelectOp::create(
          b, loc(), arith::AndIOp::create(b, loc(), when, unset), m, current);
    };
    auto count = [&](Value when, Value current) -> Value {
      return arith::AddIOp::create(
          b, loc(), current,
          arith::SelectOp::create(b, loc(), when, index(1), index(0)));
    };
    scf::YieldOp::create(
        b, loc(),
        ValueRange{firstOf(visits, carried[0]),
                   arith::SelectOp::create(b, loc(), visits, m, carried[1]),
                   firstOf(whole, carried[2]),
                   arith::SelectOp::create(b, loc(), whole, m, carried[3]),
                   count(visits, carried[4]), count(whole, carried[5])});
  }
  Value first = scan.getResult(0), last = scan.getResult(1);
  Value firstWhole = scan.getResult(2), lastWhole = scan.getResult(3);
  Value visited = scan.getResult(4), whole = scan.getResult(5);
  // No block visits: the empty range [0, 0).
  Value any = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sgt,
                                    visited, index(0));
  Value begin = arith::SelectOp::create(b, loc(), any, first, index(0));
  Value end = arith::SelectOp::create(
      b, loc(), any, arith::AddIOp::create(b, loc(), last, index(1)), index(0));
  // The whole blocks form one run inside the visited ones, or every
  // visited block is masked.
  auto span = [&](Value from, Value to) -> Value {
    return arith::AddIOp::create(b, loc(),
                                 arith::SubIOp::create(b, loc(), to, from),
                                 index(1));
  };
  Value runs = arith::AndIOp::create(
      b, loc(),
      arith::AndIOp::create(
          b, loc(),
          arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sgt, whole,
                                index(0)),
          arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::eq, whole,
                                span(firstWhole, lastWhole))),
      arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::eq, visited,
                            span(first, last)));
  Value fullBegin = arith::SelectOp::create(b, loc(), runs, firstWhole, begin);
  Value fullEnd = arith::SelectOp::create(
      b, loc(), runs, arith::AddIOp::create(b, loc(), lastWhole, index(1)),
      begin);
  SmallVector<Value, 4> results{begin, fullBegin, fullEnd, end};
  for (auto [from, to] : llvm::zip(range.getResults(), results))
    mapping.map(from, to);
  return success();
}

Value Lowering::emitVarlenSlot(Value entry, Value b, Value total,
                               int64_t ratio, int64_t rows) {
  Value clamped = arith::MinSIOp::create(
      this->b, loc(), arith::MaxSIOp::create(this->b, loc(), entry, index(0)),
      total);
  return arith::AddIOp::create(
      this->b, loc(),
      arith::DivUIOp::create(
          this->b, loc(),
          arith::MulIOp::create(this->b, loc(), clamped, index(ratio)),
          index(rows)),
      b);
}

LogicalResult Lowering::lowerVarlenTaskCoords(TaskCoordsOp coords) {
  auto extra = kernel.extras.find(coords.getCuSeqlens());
  if (extra == kernel.extras.end() || extra->second.sizes.size() != 1)
    return coords.emitOpError()
           << "reads a cu_seqlens table that is not a parameter of the kernel";
  const KernelState::Extra &table = extra->second;
  int64_t ratio = coords.getGqaRatio(), rows = coords.getRows();
  Value batch = lookup(coords.getBatch()), total = lookup(coords.getSeqQ());
  Type i32 = b.getI32Type();
  // cu_seqlens_q[at], sign-extended (the slot clamps it).
  auto entry = [&](Value at) -> Value {
    Value address = LLVM::GEPOp::create(b, loc(), table.pointer.getType(), i32,
                                        table.pointer, ValueRange{toI32(at)});
    return toIndex(LLVM::LoadOp::create(b, loc(), i32, address));
  };
  // AttentionMath.h's varlenTaskAt: the slots last to first, head group by
  // head group; the sequence is the last whose first slot is at most the
  // task's (a binary search over the bits of the batch, a load only where
  // the candidate is a sequence).
  Value slots = emitVarlenSlot(total, batch, total, ratio, rows);
  Value heads = index(coords.getKvHeads() * coords.getGroupsPerKv());
  Value reversed = arith::SubIOp::create(
      b, loc(),
      arith::SubIOp::create(b, loc(),
                            arith::MulIOp::create(b, loc(), slots, heads),
                            index(1)),
      lookup(coords.getIndex()));
  Value slot = arith::RemUIOp::create(b, loc(), reversed, slots);
  auto search = scf::ForOp::create(b, loc(), index(0), index(31), index(1),
                                   ValueRange{index(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(search.getBody());
    Value found = search.getRegionIterArgs()[0];
    Value step = arith::ShLIOp::create(
        b, loc(), index(1),
        arith::SubIOp::create(b, loc(), index(30), search.getInductionVar()));
    Value candidate = arith::AddIOp::create(b, loc(), found, step);
    Value inside = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                         candidate, batch);
    auto probe = scf::IfOp::create(b, loc(), TypeRange{b.getIndexType()},
                                   inside, true);
    {
      OpBuilder::InsertionGuard inner(b);
      b.setInsertionPointToStart(probe.thenBlock());
      Value first =
          emitVarlenSlot(entry(candidate), candidate, total, ratio, rows);
      scf::YieldOp::create(
          b, loc(),
          ValueRange{arith::SelectOp::create(
              b, loc(),
              arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sle, first,
                                    slot),
              candidate, found)});
      b.setInsertionPointToStart(probe.elseBlock());
      scf::YieldOp::create(b, loc(), ValueRange{found});
    }
    scf::YieldOp::create(b, loc(), probe.getResult(0));
  }
  Value sequence = search.getResult(0);
  Value first = emitVarlenSlot(entry(sequence), sequence, total, ratio, rows);
  Value valid = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sle,
                                      first, slot);
  mapping.map(coords.getBatchIndex(), sequence);
  mapping.map(coords.getHeadGroup(),
              arith::DivUIOp::create(b, loc(), reversed, slots));
  // A slot before the first sequence's: an m_block past every row.
  mapping.map(coords.getMBlock(),
              arith::SelectOp::create(
                  b, loc(), valid,
                  arith::SubIOp::create(b, loc(), slot, first), slots));
  return success();
}

LogicalResult Lowering::lowerTaskCoords(TaskCoordsOp coords) {
  if (coords.getCuSeqlens())
    return lowerVarlenTaskCoords(coords);
  Value t = lookup(coords.getIndex());
  Value batch = lookup(coords.getBatch());
  // Head groups: every K/V head's groups_per_kv of them.
  Value heads = index(coords.getKvHeads() * coords.getGroupsPerKv());
  Value mBlocks = arith::CeilDivSIOp::create(b,
      loc(),
      arith::MulIOp::create(b, loc(), lookup(coords.getSeqQ()),
                              index(coords.getGqaRatio())),
      index(coords.getRows()));
  if (coords.getOrder() == TaskOrder::static_order) {
    // m_block fastest, then head group, then batch.
    Value rest = arith::DivUIOp::create(b, loc(), t, mBlocks);
    mapping.map(coords.getMBlock(),
                arith::RemUIOp::create(b, loc(), t, mBlocks));
    mapping.map(coords.getHeadGroup(),
                arith::RemUIOp::create(b, loc(), rest, heads));
    mapping.map(coords.getBatchIndex(),
                arith::DivUIOp::create(b, loc(), rest, heads));
    return success();
  }
  Value pairs = arith::MulIOp::create(b, loc(), batch, heads);
  Value rank, pair;
  if (int64_t l2Keys = static_cast<int64_t>(coords.getL2Keys())) {
    // Sections of `width` pairs (TileScheduler.h's l2SectionPairs): the
    // largest power of two <= l2_keys / seq_k, at least 1, at most the
    // pairs; the section's pairs fastest, then the m_block's rank.
    Value fit = arith::MaxUIOp::create(
        b, loc(), index(1),
        arith::DivUIOp::create(
            b, loc(), index(l2Keys),
            arith::MaxUIOp::create(b, loc(), index(1),
                                   lookup(coords.getSeqK()))));
    // The highest set bit of fit: smear it downwards, keep the top.
    Value smeared = fit;
    // (index is 32 bits wide in the kernel: a shift by 32 would be poison.)
    for (int64_t shift : {1, 2, 4, 8, 16})
      smeared = arith::OrIOp::create(
          b, loc(), smeared,
          arith::ShRUIOp::create(b, loc(), smeared, index(shift)));
    Value power = arith::SubIOp::create(
        b, loc(), smeared,
        arith::ShRUIOp::create(b, loc(), smeared, index(1)));
    Value width = arith::MinUIOp::create(b, loc(), power, pairs);
    Value perSection = arith::MulIOp::create(b, loc(), width, mBlocks);
    Value section = arith::DivUIOp::create(b, loc(), t, perSection);
    Value within = arith::RemUIOp::create(b, loc(), t, perSection);
    Value first = arith::MulIOp::create(b, loc(), section, width);
    Value inSection = arith::MinUIOp::create(
        b, loc(), width, arith::SubIOp::create(b, loc(), pairs, first));
    rank = arith::DivUIOp::create(b, loc(), within, inSection);
    pair = arith::AddIOp::create(
        b, loc(), first, arith::RemUIOp::create(b, loc(), within, inSection));
  } else {
    rank = arith::DivUIOp::create(b, loc(), t, pairs);
    pair = arith::RemUIOp::create(b, loc(), t, pairs);
  }
  mapping.map(coords.getHeadGroup(),
              arith::RemUIOp::create(b, loc(), pair, heads));
  mapping.map(coords.getBatchIndex(),
              arith::DivUIOp::create(b, loc(), pair, heads));
  if (coords.isCausalShaped()) {
    // Causal work (and a window's unbounded on the left) grows with the
    // m_block: LPT is the last one first.
    mapping.map(coords.getMBlock(),
                arith::SubIOp::create(b,
                    loc(), arith::SubIOp::create(b, loc(), mBlocks, index(1)),
                    rank));
    return success();
  }
  mapping.map(coords.getMBlock(), emitLptMBlock(coords, mBlocks, rank));
  return success();
}

Value Lowering::emitTaskWork(TaskCoordsOp coords, Value m) {
  MaskModBounds band =
      maskBounds(coords.getMask(), coords.getWindowLeft(),
                 coords.getWindowRight(), coords.getMaskMod());
  // (Only the bounds weigh a task; inexactness does not matter.)
  band.exact = true;
  SmallVector<Value, 4> range = emitKvBlockRange(
      arith::MulIOp::create(b, loc(), m, index(coords.getRows())),
      lookup(coords.getSeqQ()), lookup(coords.getSeqK()),
      coords.getGqaRatio(), coords.getRows(), coords.getBlockN(), band);
  return arith::SubIOp::create(b, loc(), range[3], range[0]);
}

Value Lowering::emitCountAbove(TaskCoordsOp coords, Value mBlocks,
                               Value threshold) {
  auto loop = scf::ForOp::create(b, loc(), index(0), mBlocks, index(1),
                                   ValueRange{index(0)});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value above = arith::CmpIOp::create(b,
      loc(), arith::CmpIPredicate::sgt,
      emitTaskWork(coords, loop.getInductionVar()), threshold);
  Value next = arith::AddIOp::create(b,
      loc(), loop.getRegionIterArgs()[0],
      arith::SelectOp::create(b, loc(), above, index(1), index(0)));
  scf::YieldOp::create(b, loc(), next);
  return loop.getResult(0);
}

/// A window's work rises, plateaus and falls (a mask_mod's may do anything):
/// the m_block of LPT rank `rank` is found without sorting. count(W) = #{m :
/// work(m) > W} is non-increasing; a binary search finds the work W of rank
/// `rank`, then a scan takes the (rank - count(W))-th m_block of work W,
/// last first.
Value Lowering::emitLptMBlock(TaskCoordsOp coords, Value mBlocks, Value rank) {
  Value seqK = lookup(coords.getSeqK());
  Value maxWork = arith::CeilDivSIOp::create(b, loc(), seqK,
                                               index(coords.getBlockN()));
  auto search = scf::ForOp::create(b, loc(), index(0), index(24), index(1),
                                     ValueRange{index(0), maxWork});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(search.getBody());
    Value low = search.getRegionIterArgs()[0];
    Value high = search.getRegionIterArgs()[1];
    Value middle = arith::DivSIOp::create(b,
        loc(), arith::AddIOp::create(b, loc(), low, high), index(2));
    Value fits = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sle,
                                         emitCountAbove(coords, mBlocks, middle),
                                         rank);
    Value next = arith::AddIOp::create(b, loc(), middle, index(1));
    scf::YieldOp::create(b,
        loc(), ValueRange{arith::SelectOp::create(b, loc(), fits, low, next),
                          arith::SelectOp::create(b, loc(), fits, middle, high)});
  }
  Value work = search.getResult(0);
  Value within = arith::SubIOp::create(b, loc(), rank,
                                       emitCountAbove(coords, mBlocks, work));
  auto scan = scf::ForOp::create(b, loc(), index(0), mBlocks, index(1),
                                   ValueRange{index(0), index(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(scan.getBody());
    Value m = arith::SubIOp::create(b,
        loc(), arith::SubIOp::create(b, loc(), mBlocks, index(1)),
        scan.getInductionVar());
    Value seen = scan.getRegionIterArgs()[0];
    Value found = scan.getRegionIterArgs()[1];
    Value same = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::eq,
                                         emitTaskWork(coords, m), work);
    Value hit = arith::AndIOp::create(b,
        loc(), same,
        arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::eq, seen, within));
    scf::YieldOp::create(b,
        loc(),
        ValueRange{arith::AddIOp::create(b,
                       loc(), seen,
                       arith::SelectOp::create(b, loc(), same, index(1),
                                                 index(0))),
                   arith::SelectOp::create(b, loc(), hit, m, found)});
  }
  return scan.getResult(1);
}

