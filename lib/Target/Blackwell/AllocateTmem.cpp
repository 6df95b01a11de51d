//===- AllocateTmem.cpp - columns of the CTA's tensor memory ---------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Target/Blackwell/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4ALLOCATETMEM
#include "fa4/Target/Blackwell/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {
struct AllocateTmemPass
    : public fa4::impl::FA4AllocateTmemBase<AllocateTmemPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

void AllocateTmemPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (failed(checkModuleFamily(func, target::Family::Blackwell, getArgument())))
    return signalPassFailure();
  WarpSpecializeOp specialize;
  func.walk([&](WarpSpecializeOp op) { specialize = op; });
  SmallVector<TmemAllocOp> buffers;
  func.walk([&](TmemAllocOp op) { buffers.push_back(op); });
  if (!specialize || buffers.empty())
    return;

  // Every accumulator lives from the first task to the last (S and O are
  // double-buffered per Q tile, never idle long enough to share), so they are
  // laid out one after another; a P view needs no columns of its own because
  // it is written only after its S has been read.
  // Each spans whole MMA atoms: the value MMA of head dim 96 writes a
  // 128-column accumulator, and an 8-bit V's atom is 128 columns wide
  // (blackwell::accumulatorColumns).
  llvm::DenseMap<Operation *, int64_t> bElementBits;
  func.walk([&](ValueMmaAsyncOp mma) {
    if (Operation *acc = mma.getAcc().getDefiningOp())
      bElementBits[acc] = mma.getValue()
                              .getType()
                              .getElementType()
                              .getIntOrFloatBitWidth();
  });
  auto footprint = [&](TmemAllocOp buffer) {
    return blackwell::accumulatorColumns(
        buffer.getBuffer().getType().getColumns(),
        bElementBits.lookup_or(buffer.getOperation(), 16));
  };
  int64_t next = 0;
  for (TmemAllocOp buffer : buffers)
    next += footprint(buffer);
  if (next > blackwell::kTmemColumns) {
    InFlightDiagnostic diag = func.emitError()
                              << "TMEM overflow: the accumulators need " << next
                              << " columns, more than the "
                              << blackwell::kTmemColumns << " of an SM (";
    int64_t column = 0;
    llvm::interleaveComma(buffers, diag, [&](TmemAllocOp buffer) {
      int64_t columns = footprint(buffer);
      diag << buffer.getName() << " [" << column << ", " << column + columns
           << ")";
      column += columns;
    });
    diag << ")";
    return signalPassFailure();
  }

  Builder builder(func.getContext());
  SmallVector<TmemBufferAttr> layout;
  int64_t column = 0;
  for (TmemAllocOp buffer : buffers) {
    int64_t columns = footprint(buffer);
    buffer.setColumnOffsetAttr(builder.getI64IntegerAttr(column));
    layout.push_back(TmemBufferAttr::get(builder.getContext(),
                                         buffer.getName(), column, columns));
    column += columns;
  }
  int64_t allocated = std::max<int64_t>(32, llvm::PowerOf2Ceil(column));
  specialize->setAttr(kTmemAttrName, TmemLayoutAttr::get(builder.getContext(),
                                                         allocated, layout));

  // The warp that issues the MMAs owns the allocation; every role that reads
  // or writes TMEM must be done before it is freed.
  RoleOp owner;
  llvm::SetVector<RoleOp> users;
  specialize.walk([&](Operation *op) {
    auto role = op->getParentOfType<RoleOp>();
    if (isa<ScoreMmaAsyncOp, ValueMmaAsyncOp, TransposedMmaAsyncOp>(op))
      owner = role;
    else if (llvm::any_of(op->getOperandTypes(),
                          [](Type type) { return isa<TmemType>(type); }))
      users.insert(role);
  });
  if (!owner) {
    specialize.emitError() << "no role issues tensor-core ops, so none can "
                              "own the TMEM allocation";
    return signalPassFailure();
  }
  users.remove(owner);

  Location loc = specialize.getLoc();
  OpBuilder allocs(specialize);
  int64_t threads = 0;
  SmallVector<StringAttr> userNames;
  for (RoleOp user : users) {
    threads += user.getNumThreads();
    userNames.push_back(user.getNameAttr());
  }
  Value done;
  if (!users.empty()) {
    done = MBarrierAllocOp::create(allocs,
        loc, MBarrierType::get(func.getContext(), BarrierKind::threads, 1),
        allocs.getStringAttr("tmem_dealloc"), threads);
    SmallVector<Attribute> table;
    if (auto existing = specialize->getAttrOfType<ArrayAttr>(kBarriersAttrName))
      table.assign(existing.begin(), existing.end());
    table.push_back(BarrierInfoAttr::get(
        builder.getContext(), "tmem_dealloc", BarrierKind::threads, threads,
        /*stages=*/1, userNames, {owner.getNameAttr()}));
    specialize->setAttr(kBarriersAttrName, builder.getArrayAttr(table));
  }
  Value zero = arith::ConstantIndexOp::create(allocs, loc, 0);

  Block &body = owner.getBody().front();
  OpBuilder b = OpBuilder::atBlockBegin(&body);
  TmemAllocColumnsOp::create(b, loc, allocated);
  TmemRelinquishOp::create(b, loc);
  b.setInsertionPointToEnd(&body);
  if (done)
    MBarrierWaitOp::create(b, loc, done, zero, false);
  TmemDeallocOp::create(b, loc, allocated);
  for (RoleOp user : users) {
    OpBuilder end = OpBuilder::atBlockEnd(&user.getBody().front());
    MBarrierArriveOp::create(end, loc, done, zero);
  }
}
