//===- Memory.cpp - mbarriers, TMA and shared memory -----------------------===//

#include "Lowering.h"

#include "fa4/Support/Descriptors.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

/// Barrier `count % stages` of an mbarrier array, 8 bytes each.
Value Lowering::barrierSlot(Value barrier, Value count) {
  int64_t stages = cast<MBarrierType>(barrier.getType()).getStages();
  Value stage = b.create<arith::RemUIOp>(loc(), lookup(count), index(stages));
  return smemAt(lookup(barrier), b.create<arith::MulIOp>(loc(), stage, index(8)));
}

/// Issues one TMA copy per 64-column box of a tile from the elected thread.
/// Box coordinates, innermost first: column, head, position, batch; a
/// GQA-packed tile starts at head `head · ratio` and position `row / ratio`.
void Lowering::forEachBox(SmemType type, Value head, Value row, Value batch,
                          int64_t ratio,
                          function_ref<void(int64_t, ValueRange)> copy,
                          function_ref<void()> then) {
  Value headCoord =
      toI32(b.create<arith::MulIOp>(loc(), lookup(head), index(ratio)));
  Value position =
      toI32(b.create<arith::DivUIOp>(loc(), lookup(row), index(ratio)));
  Value batchCoord = toI32(lookup(batch));
  int64_t boxes = llvm::divideCeil(type.getCols(), kBoxColumns);
  ifElected([&] {
    for (int64_t box = 0; box < boxes; ++box)
      copy(box * boxBytes(type), ValueRange{i32(box * kBoxColumns), headCoord,
                                       position, batchCoord});
    if (then)
      then();
  });
}

LogicalResult Lowering::lowerBarrier(Operation *op) {
  auto slot = [&](Value barrier, Value count) {
    return barrierSlot(barrier, count);
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](MBarrierWaitOp wait) -> LogicalResult {
        int64_t stages = wait.getBarrier().getType().getStages();
        Value round = b.create<arith::DivUIOp>(loc(), lookup(wait.getCount()),
                                               index(stages));
        Value parity = toI32(b.create<arith::AndIOp>(loc(), round, index(1)));
        // The round before the first is complete on a fresh barrier: waiting
        // for it is waiting on the other parity.
        if (wait.getPrior())
          parity = b.create<arith::XOrIOp>(loc(), parity, i32(1));
        // The wait loop, written out: upstream's lowering of
        // mbarrier.try_wait.parity branches back with `bra.uni` on a
        // per-lane predicate; a plain `bra` is right whether or not the
        // warp's lanes agree.
        b.create<LLVM::InlineAsmOp>(
            loc(), Type(),
            ValueRange{smemAddress(slot(wait.getBarrier(), wait.getCount())),
                       parity},
            "{\n\t.reg .pred done;\n\twait:\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1, "
            "10000000;\n\t@!done bra wait;\n\t}",
            "r,r", /*has_side_effects=*/true, false,
            LLVM::tailcallkind::TailCallKind::None,
            LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
            ArrayAttr());
        // Tensor-core results the barrier announced are read only after it.
        if (roleUsesTensorMemory)
          b.create<NVVM::Tcgen05FenceOp>(
              loc(), NVVM::Tcgen05FenceKind::AFTER_THREAD_SYNC);
        return success();
      })
      .Case([&](MBarrierArriveOp arrive) -> LogicalResult {
        if (roleUsesTensorMemory)
          b.create<NVVM::Tcgen05FenceOp>(
              loc(), NVVM::Tcgen05FenceKind::BEFORE_THREAD_SYNC);
        b.create<NVVM::MBarrierArriveOp>(loc(), Type(),
                                         slot(arrive.getBarrier(), arrive.getCount()),
                                         Value());
        return success();
      })
      .Case([&](MBarrierExpectTxOp expect) -> LogicalResult {
        Value barrier = slot(expect.getBarrier(), expect.getCount());
        ifElected([&] {
          b.create<NVVM::MBarrierArriveExpectTxOp>(
              loc(), Type(), barrier, i32(expect.getBytes()),
              NVVM::MemScopeKind::CTA, false, Value());
        });
        return success();
      })
      .Case([&](MmaCommitOp commit) -> LogicalResult {
        Value barrier = slot(commit.getBarrier(), commit.getCount());
        ifElected([&] {
          b.create<NVVM::Tcgen05CommitOp>(loc(), barrier, Value());
        });
        return success();
      })
      .Default([](Operation *) { return failure(); });
}

/// The stage of ring item `count` in a shared-memory buffer.
static Value stageBase(OpBuilder &b, Location loc, Value base, SmemType type,
                       Value count, function_ref<Value(Value, Value)> at) {
  Value stage = b.create<arith::RemUIOp>(
      loc, count, b.create<arith::ConstantIndexOp>(loc, type.getStages()));
  Value bytes = b.create<arith::MulIOp>(
      loc, stage, b.create<arith::ConstantIndexOp>(loc, type.getStageBytes()));
  return at(base, bytes);
}

LogicalResult Lowering::lowerTma(Operation *op) {
  auto at = [&](Value base, Value bytes) { return smemAt(base, bytes); };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](TmaLoadOp load) -> LogicalResult {
        if (!load.getBarrier())
          return load.emitOpError() << "signals no barrier (run "
                                       "fa4-insert-barriers first)";
        SmemType type = load.getBuffer().getType();
        Value destination = stageBase(b, loc(), lookup(load.getBuffer()), type,
                                      lookup(load.getCount()), at);
        Value barrier = barrierSlot(load.getBarrier(), load.getBarrierCount());
        Value map = kernel.tensorMaps.lookup(load.getSource());
        if (!map)
          return load.emitOpError() << "loads from a tensor that is not a "
                                       "kernel parameter";
        forEachBox(type, load.getHead(), load.getRow(), load.getBatch(),
                   load.getGqaRatio(), [&](int64_t offset, ValueRange box) {
                     b.create<NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp>(
                         loc(), smemAt(destination, i32(offset)), map, box,
                         barrier, ValueRange(), Value(), Value(),
                         NVVM::TMALoadModeAttr::get(b.getContext(),
                                                    NVVM::TMALoadMode::TILE),
                         b.getBoolAttr(true), NVVM::CTAGroupKindAttr(), Value());
                   });
        return success();
      })
      .Case([&](TmaStoreOp store) -> LogicalResult {
        SmemType type = store.getBuffer().getType();
        Value source = stageBase(b, loc(), lookup(store.getBuffer()), type,
                                 lookup(store.getCount()), at);
        Value map = kernel.tensorMaps.lookup(store.getDest());
        if (!map)
          return store.emitOpError() << "stores to a tensor that is not a "
                                        "kernel parameter";
        forEachBox(type, store.getHead(), store.getRow(), store.getBatch(),
                   store.getGqaRatio(), [&](int64_t offset, ValueRange box) {
                     b.create<NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp>(
                         loc(), map, smemAt(source, i32(offset)), box, Value(),
                         NVVM::TMAStoreMode::TILE, Value());
                   },
                   [&] { b.create<NVVM::CpAsyncBulkCommitGroupOp>(loc()); });
        return success();
      })
      .Case([&](TmaStoreWaitOp) {
        ifElected([&] {
          b.create<NVVM::CpAsyncBulkWaitGroupOp>(loc(), 0, b.getUnitAttr());
        });
        return success();
      })
      .Default([](Operation *) { return failure(); });
}

LogicalResult Lowering::lowerSmem(Operation *op) {
  auto at = [&](Value base, Value bytes) { return smemAt(base, bytes); };
  Value row = rowInWarpgroup();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](SmemLoadOp load) -> LogicalResult {
        SmemType type = load.getBuffer().getType();
        std::optional<int64_t> tileRow = load.getRow();
        if (!tileRow || type.getRows() != 2)
          return load.emitOpError() << "fa4-to-nvvm reads row statistics only";
        // Element `row` of statistics row `tileRow`: thread t reads its own.
        Value stage = stageBase(b, loc(), lookup(load.getBuffer()), type,
                                lookup(load.getCount()), at);
        Value offset = b.create<arith::AddIOp>(
            loc(), index(*tileRow * type.getCols() * 4),
            b.create<arith::MulIOp>(loc(), row, index(4)));
        mapping.map(load.getResult(),
                    b.create<LLVM::LoadOp>(loc(), b.getF32Type(),
                                           smemAt(stage, offset), 4));
        return success();
      })
      .Case([&](SmemStoreOp store) -> LogicalResult {
        SmemType type = store.getBuffer().getType();
        Value stage = stageBase(b, loc(), lookup(store.getBuffer()), type,
                                lookup(store.getCount()), at);
        if (std::optional<int64_t> tileRow = store.getRow()) {
          Value offset = b.create<arith::AddIOp>(
              loc(), index(*tileRow * type.getCols() * 4),
              b.create<arith::MulIOp>(loc(), row, index(4)));
          b.create<LLVM::StoreOp>(loc(), lookup(store.getTile()),
                                  smemAt(stage, offset), 4);
          return success();
        }
        // A staged O tile: thread t writes row t in the 128-byte-swizzled
        // layout the TMA store reads, 8 elements (16 bytes) at a time.
        Value values = lookup(store.getTile());
        auto vector = cast<VectorType>(values.getType());
        int64_t elementBytes = vector.getElementTypeBitWidth() / 8;
        int64_t perChunk = 16 / elementBytes;
        Value first = store.getColumn() ? lookup(store.getColumn()) : index(0);
        Value rowBytes =
            b.create<arith::MulIOp>(loc(), row, index(kSwizzleLineBytes));
        Value rowPhase = b.create<arith::RemUIOp>(loc(), row, index(8));
        for (int64_t chunk = 0; chunk * perChunk < vector.getNumElements();
             ++chunk) {
          Value column = b.create<arith::AddIOp>(loc(), first,
                                                 index(chunk * perChunk));
          Value box = b.create<arith::DivUIOp>(loc(), column, index(kBoxColumns));
          Value line = b.create<arith::DivUIOp>(
              loc(), b.create<arith::RemUIOp>(loc(), column, index(kBoxColumns)),
              index(perChunk));
          Value swizzled = b.create<arith::XOrIOp>(loc(), line, rowPhase);
          Value offset = b.create<arith::AddIOp>(
              loc(),
              b.create<arith::AddIOp>(
                  loc(), b.create<arith::MulIOp>(loc(), box, index(boxBytes(type))),
                  rowBytes),
              b.create<arith::MulIOp>(loc(), swizzled, index(16)));
          Value piece = b.create<vector::ExtractStridedSliceOp>(
              loc(), values, ArrayRef<int64_t>{chunk * perChunk},
              ArrayRef<int64_t>{perChunk}, ArrayRef<int64_t>{1});
          b.create<LLVM::StoreOp>(loc(), piece, smemAt(stage, offset), 16);
        }
        // Generic-proxy writes that a TMA store (async proxy) will read.
        b.create<NVVM::FenceProxyOp>(
            loc(), NVVM::ProxyKind::async_shared,
            NVVM::SharedSpaceAttr::get(b.getContext(),
                                       NVVM::SharedSpace::shared_cta));
        return success();
      })
      .Default([](Operation *) { return failure(); });
}
