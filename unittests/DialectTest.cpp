//===- DialectTest.cpp - fa4.attention built through the C++ API ----------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/InitFA4.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::fa4;

namespace {

class AttentionVerifierTest : public ::testing::Test {
protected:
  AttentionVerifierTest() {
    DialectRegistry registry;
    registerTileLevelDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  /// Builds a function around one fa4.attention and returns the verifier's
  /// message, empty when the op verifies.
  std::string verifyAttention(Type element, int64_t headDim, int64_t qHeads,
                              int64_t kvHeads,
                              llvm::function_ref<void(AttentionOp)> edit = {},
                              int64_t valueHeadDim = 0,
                              int64_t outHeadDim = 0) {
    OpBuilder b(&context);
    Location loc = b.getUnknownLoc();
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    int64_t dyn = ShapedType::kDynamic;
    int64_t dv = valueHeadDim > 0 ? valueHeadDim : headDim;
    auto qType = MemRefType::get({dyn, dyn, qHeads, headDim}, element);
    auto kType = MemRefType::get({dyn, dyn, kvHeads, headDim}, element);
    auto vType = MemRefType::get({dyn, dyn, kvHeads, dv}, element);
    auto oType = MemRefType::get(
        {dyn, dyn, qHeads, outHeadDim > 0 ? outHeadDim : dv}, element);
    b.setInsertionPointToEnd(module->getBody());
    auto func = func::FuncOp::create(b,
        loc, "attention", b.getFunctionType({qType, kType, vType, oType}, {}));
    Block *body = func.addEntryBlock();
    b.setInsertionPointToEnd(body);
    auto op = AttentionOp::create(b,
        loc, body->getArgument(0), body->getArgument(1), body->getArgument(2),
        body->getArgument(3), Value(), ValueRange(),
        MaskKindAttr::get(&context, MaskKind::none), b.getI64IntegerAttr(-1),
        b.getI64IntegerAttr(-1), FloatAttr(), b.getF32FloatAttr(0.0f), UnitAttr(),
        IntegerAttr(), IntegerAttr(), IntegerAttr(), IntegerAttr(),
        IntegerAttr(), IntegerAttr(), IntegerAttr(), IntegerAttr(),
        IntegerAttr(), IntegerAttr());
    if (edit)
      edit(op);
    func::ReturnOp::create(b, loc);

    std::string message;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
      message = diagnostic.str();
      return success();
    });
    if (succeeded(verify(*module)))
      return "";
    return message.empty() ? "failed without a message" : message;
  }

  MLIRContext context;
};

TEST_F(AttentionVerifierTest, AcceptsTheSeedConfiguration) {
  OpBuilder b(&context);
  EXPECT_EQ(verifyAttention(b.getF16Type(), 128, 32, 8, [](AttentionOp op) {
              op.setMask(MaskKind::causal);
            }),
            "");
  EXPECT_EQ(verifyAttention(b.getBF16Type(), 64, 16, 16), "");
  EXPECT_EQ(verifyAttention(b.getF16Type(), 96, 16, 1), "");
}

TEST_F(AttentionVerifierTest, RejectsUnsupportedHeadDim) {
  OpBuilder b(&context);
  EXPECT_EQ(verifyAttention(b.getF16Type(), 80, 8, 8),
            "'fa4.attention' op head dim 80 is not supported (expected 32, 64, "
            "96, 128, 192 or 256)");
  // 192 takes a V head dim of at most 128 (DeepSeek-V3's (192, 128)).
  EXPECT_EQ(verifyAttention(b.getF16Type(), 192, 8, 8),
            "'fa4.attention' op V head dim 192 is not supported (expected 32, "
            "64, 96, 128 or 256; Q and K's may be larger, as (192, 128)): with Q and "
            "K's head dim 192, V (and O) take a head dim of their own (fa4c "
            "--v-head-dim, Python's v_head_dim)");
}

TEST_F(AttentionVerifierTest, VHeadDimOfItsOwn) {
  OpBuilder b(&context);
  EXPECT_EQ(verifyAttention(b.getBF16Type(), 192, 16, 16, {}, 128), "");
  EXPECT_EQ(verifyAttention(b.getF16Type(), 128, 8, 2, {}, 64), "");
  EXPECT_EQ(verifyAttention(b.getF16Type(), 64, 8, 8, {}, 128),
            "'fa4.attention' op V head dim 128 exceeds Q and K's head dim 64 "
            "(a V head dim may equal Q's or be smaller)");
  // O has V's head dim.
  EXPECT_EQ(verifyAttention(b.getF16Type(), 192, 8, 8, {}, 128, 192),
            "'fa4.attention' op O shape [?, ?, 8, 192] does not match Q shape "
            "[?, ?, 8, 192] with V's head dim 128");
}

TEST_F(AttentionVerifierTest, RejectsUnsupportedDtype) {
  OpBuilder b(&context);
  EXPECT_EQ(verifyAttention(b.getF32Type(), 128, 8, 8),
            "'fa4.attention' op Q element type 'f32' is not supported "
            "(expected f16, bf16 or f8E4M3FN)");
  // FP8 Q, K, V and O: O must be f16 or bf16.
  EXPECT_EQ(verifyAttention(b.getType<Float8E4M3FNType>(), 128, 8, 8),
            "'fa4.attention' op O element type 'f8E4M3FN' is not f16 or bf16 "
            "(an FP8 attention's output)");
}

TEST_F(AttentionVerifierTest, RejectsHeadsThatDoNotGroup) {
  OpBuilder b(&context);
  EXPECT_EQ(verifyAttention(b.getF16Type(), 128, 30, 8),
            "'fa4.attention' op Q heads (30) must be a multiple of K/V heads "
            "(8)");
  // Any whole ratio is served, MQA included.
  for (int64_t qHeads : {24, 40, 56, 64, 8})
    EXPECT_EQ(verifyAttention(b.getF16Type(), 128, qHeads,
                              qHeads == 64 ? 1 : 8),
              "");
}

TEST_F(AttentionVerifierTest, RejectsBadScaleAndWindow) {
  OpBuilder b(&context);
  EXPECT_EQ(verifyAttention(b.getF16Type(), 128, 8, 8,
                            [&](AttentionOp op) {
                              op.setScaleAttr(b.getF32FloatAttr(-0.5f));
                            }),
            "'fa4.attention' op scale must be positive and finite, and finite "
            "times log2(e), got -0.5");
  EXPECT_EQ(verifyAttention(b.getF16Type(), 128, 8, 8,
                            [](AttentionOp op) {
                              op.setMask(MaskKind::window);
                              op.setWindowLeft(-3);
                            }),
            "'fa4.attention' op window_left must be -1 (unbounded) or "
            "in [0, 2^31), got -3");
  EXPECT_EQ(verifyAttention(b.getF16Type(), 128, 8, 8,
                            [](AttentionOp op) { op.setMask(MaskKind::window); }),
            "'fa4.attention' op a window unbounded on both sides masks "
            "nothing; use mask = none");
}

TEST_F(AttentionVerifierTest, EffectiveScaleDefaultsToInverseSqrtHeadDim) {
  OpBuilder b(&context);
  float scale = 0.0f;
  verifyAttention(b.getF16Type(), 64, 8, 8, [&](AttentionOp op) {
    scale = op.getEffectiveScale();
  });
  EXPECT_FLOAT_EQ(scale, 0.125f);
}

} // namespace
