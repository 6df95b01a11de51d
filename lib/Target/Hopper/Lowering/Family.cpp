//===- Family.cpp - what the Hopper lowering does its own way -------------===//
//
// On sm_90a a consumer warpgroup's tiles live in registers in the layout of
// a wgmma accumulator (Warpgroup.cpp): a thread holds two rows of a 64-row
// tile, shared with the three other threads of its quad. The family's own
// ops: the warpgroup MMAs and their waits, and the row ops whose lowering
// follows that layout (softcap, score_mod, mask, the online softmax, the
// correction, the normalization, the O staging store and the LSE store).
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

namespace mlir::fa4::nvvm {

class HopperLowering final : public FamilyLowering {
public:
  target::Family family() const override { return target::Family::Hopper; }

  Type convertTile(RankedTensorType tile) const override {
    // A 64-row tile in wgmma's fragment layout, two rows per thread.
    if (tile.getRank() == 1)
      return VectorType::get({2}, tile.getElementType());
    return VectorType::get({tile.getDimSize(1) / 2}, tile.getElementType());
  }

  std::optional<LogicalResult> lowerOwn(Lowering &lowering,
                                        Operation *op) const override {
    if (isa<WarpgroupScoreMmaOp, WarpgroupValueMmaOp, WarpgroupWaitOp,
            SoftcapOp, ScoreModOp, MaskOp, OnlineSoftmaxOp, CorrectionOp,
            NormalizeOp, SmemStoreOp, StoreLseTileOp>(op))
      return lowering.lowerWarpgroup(op);
    return std::nullopt;
  }
};

const FamilyLowering &hopperLowering() {
  static const HopperLowering lowering;
  return lowering;
}

} // namespace mlir::fa4::nvvm
