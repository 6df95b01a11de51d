//===- TileConfig.cpp - the tile program's configuration ------------------===//

#include "fa4/Transforms/TileConfig.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa4;

MaskBand mlir::fa4::maskBandFor(MaskKind mask, int64_t windowLeft,
                                int64_t windowRight) {
  switch (mask) {
  case MaskKind::none:
    return {-1, -1};
  case MaskKind::causal:
    return {-1, 0};
  case MaskKind::window: {
    // A side that reaches past any sequence (INT32_MAX, a common
    // "unbounded") is an open one: its edge would need 64 bits in the kernel.
    auto side = [](int64_t keys) { return keys >= kSequenceLimit ? -1 : keys; };
    return {side(windowLeft), side(windowRight)};
  }
  }
  return {-1, -1};
}

static constexpr double kLog2E = 1.4426950408889634;

TileConfig TileConfig::get(int64_t headDim, int64_t numQueryHeads,
                           int64_t numKvHeads, MaskKind mask,
                           int64_t windowLeft, int64_t windowRight, float scale,
                           float softcap, double rescaleThreshold) {
  TileConfig config;
  config.headDim = headDim;
  config.valueHeadDim = headDim;
  config.numQueryHeads = numQueryHeads;
  config.numKvHeads = numKvHeads;
  config.gqaRatio = numQueryHeads / numKvHeads;
  config.gqaPacking = mlir::fa4::gqaPacking(config.gqaRatio);
  config.mask = mask;
  config.windowLeft = windowLeft;
  config.windowRight = windowRight;
  config.scale = scale;
  config.softcap = softcap;
  config.scaleLog2 = static_cast<float>(softcap > 0.0f ? kLog2E : scale * kLog2E);
  config.rescaleThreshold = static_cast<float>(rescaleThreshold);
  return config;
}

float mlir::fa4::softcapOf(Region &scoreMod) {
  // c · tanh(s / c) (or s · (1/c), the factors in either order), then yield.
  if (scoreMod.empty())
    return 0.0f;
  Block &body = scoreMod.front();
  if (body.getNumArguments() < 1)
    return 0.0f;
  Value score = body.getArgument(0);
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return 0.0f;
  auto constant = [](Value v) -> std::optional<float> {
    FloatAttr attr;
    if (matchPattern(v, m_Constant(&attr)) && attr.getType().isF32())
      return attr.getValue().convertToFloat();
    return std::nullopt;
  };
  auto capped = yield.getValue().getDefiningOp<arith::MulFOp>();
  if (!capped)
    return 0.0f;
  Value squashedValue = capped.getRhs();
  std::optional<float> cap = constant(capped.getLhs());
  if (!cap) {
    cap = constant(capped.getRhs());
    squashedValue = capped.getLhs();
  }
  auto squashed = squashedValue.getDefiningOp<math::TanhOp>();
  // (A subnormal cap has no finite reciprocal: not the attribute's math.)
  // (A cap past the attribute's limit stays a region: the softcap's path
  // would multiply its tanh's error by it.)
  if (!cap || !(*cap > 0.0f) || *cap > kMaxSoftcap || !std::isnormal(*cap) ||
      !std::isfinite(1.0f / *cap) || !squashed)
    return 0.0f;
  Operation *ratio = squashed.getOperand().getDefiningOp();
  bool matches = false;
  if (auto div = dyn_cast_or_null<arith::DivFOp>(ratio))
    matches = div.getLhs() == score && constant(div.getRhs()) == cap;
  if (auto mul = dyn_cast_or_null<arith::MulFOp>(ratio)) {
    Value other = mul.getLhs() == score ? mul.getRhs() : mul.getLhs();
    matches = llvm::is_contained(mul->getOperands(), score) &&
              constant(other) == 1.0f / *cap;
  }
  // Nothing else in the body (constants aside), so nothing else to keep.
  for (Operation &op : body.without_terminator())
    if (&op != capped && &op != squashed.getOperation() && &op != ratio &&
        !matchPattern(&op, m_Constant()))
      matches = false;
  return matches ? *cap : 0.0f;
}

TileConfig TileConfig::get(AttentionOp op, double rescaleThreshold) {
  // A score_mod that is a softcap takes the softcap's path (the scale folded
  // into the tanh's argument, no region per score): one lowering for both
  // spellings.
  float softcap = op.getSoftcap().convertToFloat();
  float cap = softcapOf(op.getScoreMod());
  if (cap > 0.0f)
    softcap = cap;
  TileConfig config =
      get(op.getHeadDim(), op.getNumQueryHeads(), op.getNumKvHeads(),
          op.getMask(), op.getWindowLeft(), op.getWindowRight(),
          op.getEffectiveScale(), softcap, rescaleThreshold);
  config.valueHeadDim = op.getValueHeadDim();
  if (isa<Float8E4M3FNType>(getElementTypeOrSelf(op.getQ().getType()))) {
    config.fp8 = true;
    config.probShift = kFp8ProbShift;
    config.rescaleThreshold = 0.0f;
  }
  if (!op.getScoreMod().empty() && cap == 0.0f) {
    config.scoreMod = true;
    config.scaleLog2 = static_cast<float>(kLog2E);
  }
  return config;
}
