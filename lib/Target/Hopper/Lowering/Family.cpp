//===- Family.cpp - what the Hopper lowering does its own way -------------===//
//
// On sm_90a a consumer warpgroup's tiles live in registers in the layout of
// a wgmma accumulator (Warpgroup.cpp): a thread holds two rows of a 64-row
// tile, shared with the three other threads of its quad. The family's own
// ops: the warpgroup MMAs and their waits, and the row ops whose lowering
// follows that layout (softcap, score_mod, mask, the online softmax, the
// correction and the O staging store). The normalization and the LSE store
// are the shared lowering's, on the rows this file says a thread holds.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

namespace mlir::fa4::nvvm {

class HopperLowering final : public FamilyLowering {
public:
  target::Family family() const override { return target::Family::Hopper; }

  Type convertTile(RankedTensorType tile) const override {
    // A 64-row tile in wgmma's fragment layout, two rows per thread.
    if (tile.getRank() == 1)
      return VectorType::get({2}, tile.getElementType());
    // FP8 probabilities: the thread's bytes packed four to a word, in the
    // order of wgmma's 8-bit A fragment (Warpgroup.cpp).
    if (tile.getElementType().getIntOrFloatBitWidth() == 8)
      return VectorType::get({tile.getDimSize(1) / 8},
                             IntegerType::get(tile.getContext(), 32));
    return VectorType::get({tile.getDimSize(1) / 2}, tile.getElementType());
  }

  bool packsF32() const override { return false; }

  // A thread holds two rows (fragmentRow), each shared by its quad.
  SmallVector<Value, 2> threadRows(Lowering &lowering) const override {
    return {lowering.fragmentRow(0), lowering.fragmentRow(1)};
  }
  Value rowWriter(Lowering &lowering) const override {
    // The quad's first thread.
    return arith::CmpIOp::create(
        lowering.b, lowering.loc(), arith::CmpIPredicate::eq,
        arith::RemUIOp::create(lowering.b, lowering.loc(),
                               lowering.fragmentLane(), lowering.index(4)),
        lowering.index(0));
  }
  SmallVector<Value, 2> rowScalars(Lowering &lowering,
                                   Value rowVector) const override {
    return {lowering.rowOfFragment(rowVector, 0),
            lowering.rowOfFragment(rowVector, 1)};
  }
  Value rowVector(Lowering &lowering, ArrayRef<Value> rows) const override {
    return lowering.fragmentRowVector(rows[0], rows[1]);
  }
  Value rowTotal(Lowering &lowering, Value partial) const override {
    return lowering.quadReduce(partial, [&](Value x, Value y) {
      return Value(arith::AddFOp::create(lowering.b, lowering.loc(), x, y));
    });
  }
  Value spreadRows(Lowering &lowering, ArrayRef<Value> rows,
                   VectorType tile) const override {
    return lowering.spreadRows(lowering.fragmentRowVector(rows[0], rows[1]),
                               tile.getNumElements());
  }

  // wgmma's fragment: elements 2j and 2j + 1 are adjacent columns of row
  // (j mod 2), from column 8·(j / 2) + 2·(lane mod 4).
  SmallVector<ElementRun> elementRuns(Lowering &lowering,
                                      int64_t elements) const override {
    SmallVector<ElementRun> runs;
    Value column = lowering.fragmentColumn();
    for (int64_t first = 0; first < elements; first += 2)
      runs.push_back(
          {static_cast<unsigned>((first / 2) % 2), first, 2,
           arith::AddIOp::create(lowering.b, lowering.loc(), column,
                                 lowering.index(8 * (first / 4)))});
    return runs;
  }
  Value rowShareSlot(Lowering &lowering) const override {
    return arith::RemUIOp::create(lowering.b, lowering.loc(),
                                  lowering.fragmentLane(), lowering.index(4));
  }

  // The backward's transposed fragments: a thread's columns of a 64-wide
  // tile are 8·(k/2) + 2·(lane mod 4) + k mod 2 for k < 16; element i is
  // in column slot fragmentColumnOf(i) and row (i / 2) mod 2.
  SmallVector<Value> threadColumns(Lowering &lowering,
                                   int64_t columns) const override {
    SmallVector<Value> result;
    Value first = lowering.fragmentColumn();
    for (int64_t k = 0; k < columns / 4; ++k)
      result.push_back(arith::AddIOp::create(
          lowering.b, lowering.loc(), first,
          lowering.index(8 * (k / 2) + k % 2)));
    return result;
  }
  int64_t columnSlot(int64_t element) const override {
    return Lowering::fragmentColumnOf(element);
  }
  unsigned rowSlot(int64_t element) const override {
    return static_cast<unsigned>((element / 2) % 2);
  }

  std::optional<LogicalResult> lowerOwn(Lowering &lowering,
                                        Operation *op) const override {
    if (isa<WarpgroupScoreMmaOp, WarpgroupValueMmaOp, WarpgroupWaitOp,
            SoftcapOp, ScoreModOp, MaskOp, OnlineSoftmaxOp, CorrectionOp,
            SmemStoreOp>(op))
      return lowering.lowerWarpgroup(op);
    // dQ's MMA (Warpgroup.cpp); the backward's pointwise ops and stores
    // are the shared lowering's (Backward.cpp).
    if (auto mma = dyn_cast<WarpgroupTransposedMmaOp>(op))
      return lowering.lowerWarpgroupTransposedMma(mma);
    return std::nullopt;
  }
};

const FamilyLowering &hopperLowering() {
  static const HopperLowering lowering;
  return lowering;
}

} // namespace mlir::fa4::nvvm
