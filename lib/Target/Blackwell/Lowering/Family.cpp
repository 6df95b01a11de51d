//===- Family.cpp - what the Blackwell lowering does its own way ----------===//
//
// On sm_100a a warpgroup's tiles live in tensor memory, row r in TMEM lane
// r, so thread r of the warpgroup holds row r of every tile it loads (and
// its element of every row vector). The family's own ops: TMEM buffers and
// their loads, stores, allocation and release, and the tcgen05 MMAs
// (TensorCore.cpp). The row math is the shared lowering's (RowMath.cpp),
// on the one row each thread holds.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::fa4::nvvm {

class BlackwellLowering final : public FamilyLowering {
public:
  target::Family family() const override { return target::Family::Blackwell; }

  Type convertTile(RankedTensorType tile) const override {
    // Row r of a warpgroup tile belongs to thread r.
    if (tile.getRank() == 1)
      return tile.getElementType();
    return VectorType::get({tile.getDimSize(1)}, tile.getElementType());
  }

  bool packsF32() const override { return true; }

  // Thread r holds row r alone: its row scalars are plain f32 values.
  SmallVector<Value, 2> threadRows(Lowering &lowering) const override {
    return {lowering.rowInWarpgroup()};
  }
  Value rowWriter(Lowering &) const override { return Value(); }
  SmallVector<Value, 2> rowScalars(Lowering &,
                                   Value rowVector) const override {
    return {rowVector};
  }
  Value rowVector(Lowering &, ArrayRef<Value> rows) const override {
    return rows.front();
  }
  Value rowTotal(Lowering &, Value partial) const override { return partial; }
  Value spreadRows(Lowering &lowering, ArrayRef<Value> rows,
                   VectorType tile) const override {
    return vector::BroadcastOp::create(lowering.b, lowering.loc(), tile,
                                       rows.front());
  }

  // Thread r's row is its own: its elements are the row's columns in order.
  SmallVector<ElementRun> elementRuns(Lowering &lowering,
                                      int64_t elements) const override {
    SmallVector<ElementRun> runs;
    for (int64_t first = 0; first < elements; first += 4)
      runs.push_back({0, first, std::min<int64_t>(4, elements - first),
                      lowering.index(first)});
    return runs;
  }
  Value rowShareSlot(Lowering &lowering) const override {
    return lowering.index(0);
  }

  // The backward's transposed tiles: a thread's row is a key, and it holds
  // every column of the chunk, element i in column i.
  SmallVector<Value> threadColumns(Lowering &lowering,
                                   int64_t columns) const override {
    SmallVector<Value> result;
    for (int64_t column = 0; column < columns; ++column)
      result.push_back(lowering.index(column));
    return result;
  }
  int64_t columnSlot(int64_t element) const override { return element; }
  unsigned rowSlot(int64_t) const override { return 0; }

  std::optional<LogicalResult> lowerOwn(Lowering &lowering,
                                        Operation *op) const override {
    return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
        .Case([&](TmemAllocOp alloc) -> LogicalResult {
          if (!alloc.getColumnOffset())
            return alloc.emitOpError()
                   << "has no column offset (run fa4-allocate-tmem first)";
          lowering.mapping.map(alloc.getResult(),
                               lowering.i32(*alloc.getColumnOffset()));
          return success();
        })
        .Case([&](TmemViewOp view) -> LogicalResult {
          lowering.mapping.map(view.getResult(),
                               lowering.lookup(view.getSource()));
          return success();
        })
        .Case<TmemLoadOp, TmemStoreOp, TmemAllocColumnsOp, TmemRelinquishOp,
              TmemDeallocOp>(
            [&](Operation *tmem) { return lowering.lowerTmem(tmem); })
        .Case<ScoreMmaAsyncOp, ValueMmaAsyncOp, TransposedMmaAsyncOp>(
            [&](Operation *mma) { return lowering.lowerMma(mma); })
        .Default([](Operation *) { return std::nullopt; });
  }
};

const FamilyLowering &blackwellLowering() {
  static const BlackwellLowering lowering;
  return lowering;
}

} // namespace mlir::fa4::nvvm
