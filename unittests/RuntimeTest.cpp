//===- RuntimeTest.cpp - manifest to launch arguments ---------------------===//

#include "fa4/Runtime/Launch.h"
#include "fa4/Runtime/Runtime.h"

#include "gtest/gtest.h"

#include <cstring>

using namespace mlir::fa4::runtime;

namespace {

Manifest seedManifest() {
  Manifest m;
  m.kernel = "attention";
  m.target = "sm_100a";
  m.block[0] = 512;
  m.smCount = 148;
  m.qHeads = 32;
  m.kvHeads = 8;
  m.headDim = 128;
  m.rowsPerTask = 256;
  m.lse = true;
  Manifest::TensorMap q;
  q.tensor = "q";
  q.dtype = "fp16";
  q.rank = 4;
  q.dims = {"128", "32", "seq_q", "batch"};
  q.strides = {"256", "8192", "8192 * seq_q"};
  q.box[0] = 64;
  q.box[1] = 4;
  q.box[2] = 32;
  q.box[3] = 1;
  q.swizzle = TensorMapSwizzle::Bytes128;
  m.tensorMaps = {q};
  m.parameters = {{"q_map", "CUtensorMap"}, {"lse", "float*"},
                  {"batch", "int32"}, {"seq_q", "int32"}, {"seq_k", "int32"}};
  return m;
}

TEST(Runtime, ShapeLimitIsTheKernelsThirtyTwoBitIndices) {
  Manifest m = seedManifest();
  std::string error;
  // batch · q_heads · seq_q = 2^31 - 32: the largest LSE index still fits.
  EXPECT_TRUE(checkShapes(m, {1, (int64_t(1) << 26) - 1, 1}, error)) << error;
  EXPECT_FALSE(checkShapes(m, {1, int64_t(1) << 26, 1}, error));
  EXPECT_NE(error.find("reaches 2^31"), std::string::npos) << error;
  EXPECT_FALSE(checkShapes(m, {1, 1, int64_t(1) << 31}, error));
  EXPECT_FALSE(checkShapes(m, {0, 1, 1}, error));
  // Key edges add offsets below 2^24 in 32 bits: sequences keep 2^25 spare.
  int64_t seqLimit = (int64_t(1) << 31) - (int64_t(1) << 25);
  EXPECT_TRUE(checkShapes(m, {1, 1, seqLimit - 1}, error)) << error;
  EXPECT_FALSE(checkShapes(m, {1, 1, seqLimit}, error));
  EXPECT_NE(error.find("2^31 - 2^25"), std::string::npos) << error;
}

TEST(Runtime, PlanBindsMapsParametersAndThePersistentGrid) {
  Manifest m = seedManifest();
  Buffers buffers;
  buffers.q = 0x100000000ull;
  buffers.lse = 0x200000000ull;
  std::vector<TensorMapSpec> encoded;
  auto encode = [&](const TensorMapSpec &spec, uint8_t *out, std::string &) {
    encoded.push_back(spec);
    std::memset(out, 0xab, 128);
    return true;
  };
  LaunchPlan plan;
  std::string error;
  ASSERT_TRUE(planLaunch(m, {2, 1000, 1000}, buffers, encode, plan, error)) << error;
  // 2 batches · 8 K/V heads · ceil(1000 · 4 / 256) = 16 m_blocks.
  EXPECT_EQ(plan.tasks, 2 * 8 * 16);
  EXPECT_EQ(plan.grid[0], 148u);
  ASSERT_EQ(encoded.size(), 1u);
  EXPECT_EQ(encoded[0].globalDims[2], 1000u);
  EXPECT_EQ(encoded[0].globalDims[3], 2u);
  EXPECT_EQ(encoded[0].globalStrides[2], 8192u * 1000u);
  ASSERT_EQ(plan.arguments.size(), 5u);
  EXPECT_EQ(plan.arguments[0].size(), 128u);
  uint64_t lse;
  std::memcpy(&lse, plan.arguments[1].data(), 8);
  EXPECT_EQ(lse, buffers.lse);
  int32_t seqQ;
  std::memcpy(&seqQ, plan.arguments[3].data(), 4);
  EXPECT_EQ(seqQ, 1000);
  // A kernel that writes the LSE needs its buffer.
  buffers.lse = 0;
  EXPECT_FALSE(planLaunch(m, {2, 1000, 1000}, buffers, encode, plan, error));
  EXPECT_NE(error.find("LSE"), std::string::npos);
}

TEST(Runtime, MalformedManifestsNameTheField) {
  Manifest m;
  std::string error;
  EXPECT_FALSE(parseManifest("{\"kernel\": 3}", m, error));
  EXPECT_NE(error.find("\"kernel\""), std::string::npos) << error;
  EXPECT_FALSE(parseManifest("[", m, error));
  EXPECT_NE(error.find("not JSON"), std::string::npos) << error;
}

TEST(Runtime, PlanPassesExtrasAndTheirDynamicSizes) {
  Manifest m = seedManifest();
  m.extras = {{"f32", {32}}, {"i32", {-1, -1}}};
  m.parameters.push_back({"extra0", "void*"});
  m.parameters.push_back({"extra1", "void*"});
  m.parameters.push_back({"extra1_dim0", "int32"});
  m.parameters.push_back({"extra1_dim1", "int32"});
  Buffers buffers;
  buffers.q = 0x100000000ull;
  buffers.lse = 0x200000000ull;
  buffers.extras = {{0x300000000ull, {32}}, {0x400000000ull, {2, 1000}}};
  auto encode = [](const TensorMapSpec &, uint8_t *out, std::string &) {
    std::memset(out, 0, 128);
    return true;
  };
  LaunchPlan plan;
  std::string error;
  ASSERT_TRUE(planLaunch(m, {2, 1000, 1000}, buffers, encode, plan, error)) << error;
  ASSERT_EQ(plan.arguments.size(), 9u);
  uint64_t address;
  std::memcpy(&address, plan.arguments[5].data(), 8);
  EXPECT_EQ(address, 0x300000000ull);
  std::memcpy(&address, plan.arguments[6].data(), 8);
  EXPECT_EQ(address, 0x400000000ull);
  int32_t size;
  std::memcpy(&size, plan.arguments[7].data(), 4);
  EXPECT_EQ(size, 2);
  std::memcpy(&size, plan.arguments[8].data(), 4);
  EXPECT_EQ(size, 1000);
  // A kernel that reads an extra needs its buffer.
  buffers.extras.pop_back();
  EXPECT_FALSE(planLaunch(m, {2, 1000, 1000}, buffers, encode, plan, error));
  EXPECT_NE(error.find("extra1"), std::string::npos) << error;
}

TEST(Runtime, ExtrasAreCheckedByName) {
  Manifest m = seedManifest();
  m.extras = {{"i32", {-1, 64}}};
  Tensor o{0x100000000ull, "fp16", {1, 64, 32, 128}, {}};
  Tensor ids{0x200000000ull, "i32", {2, 64}, {64, 1}};
  std::string error;
  EXPECT_TRUE(checkExtras(m, {ids}, {&o}, error)) << error;
  auto refused = [&](Tensor extra, std::vector<Tensor> extras = {}) {
    if (extras.empty())
      extras = {extra};
    EXPECT_FALSE(checkExtras(m, extras, {&o}, error));
    return error;
  };
  EXPECT_NE(refused(ids, {ids, ids}).find("reads 1 extra"), std::string::npos) << error;
  Tensor wrong = ids;
  wrong.dtype = "f32";
  EXPECT_NE(refused(wrong).find("expected dtype i32"), std::string::npos) << error;
  wrong = ids;
  wrong.sizes = {2, 63};
  EXPECT_NE(refused(wrong).find("dimension 1 is 63, expected 64"), std::string::npos) << error;
  wrong = ids;
  wrong.strides = {128, 1};
  EXPECT_NE(refused(wrong).find("dense and row-major"), std::string::npos) << error;
  wrong = ids;
  wrong.address = 0x100000000ull + 64; // inside O
  EXPECT_NE(refused(wrong).find("shares memory"), std::string::npos) << error;
  wrong = ids;
  wrong.address += 2;
  EXPECT_NE(refused(wrong).find("aligned"), std::string::npos) << error;
  wrong = ids;
  wrong.sizes = {int64_t(1) << 25, 64};
  wrong.strides = {};
  EXPECT_NE(refused(wrong).find("2^31 elements"), std::string::npos) << error;
}

TEST(Runtime, BlockMaskSizesFollowTheProblem) {
  Manifest m = seedManifest(); // 32 query heads
  m.extras = {{"i32", {-1, -1}}, {"i32", {-1, 1, -1, 4}}};
  m.blockMask = 1;
  Tensor o{0x100000000ull, "fp16", {2, 300, 32, 128}, {}};
  Tensor ids{0x200000000ull, "i32", {2, 300}, {}};
  Tensor table{0x300000000ull, "i32", {2, 1, 3, 4}, {}};
  Shapes shapes{2, 300, 300};
  std::string error;
  EXPECT_TRUE(checkExtras(m, {ids, table}, {&o}, error, &shapes)) << error;
  // One entry for all batches is fine; a wrong count of query blocks is not.
  table.sizes = {1, 1, 3, 4};
  EXPECT_TRUE(checkExtras(m, {ids, table}, {&o}, error, &shapes)) << error;
  table.sizes = {2, 1, 2, 4};
  EXPECT_FALSE(checkExtras(m, {ids, table}, {&o}, error, &shapes));
  EXPECT_NE(error.find("extra1: the block mask must be [batch or 1, q_heads or 1, "
                       "ceil(seq_q / 128), 4] = [2 or 1, 32 or 1, 3, 4]"),
            std::string::npos)
      << error;
  table.sizes = {3, 1, 3, 4};
  EXPECT_FALSE(checkExtras(m, {ids, table}, {&o}, error, &shapes));
}

TEST(Runtime, ManifestExtrasAreValidated) {
  Manifest m;
  std::string error;
  std::string head = R"({"kernel": "a", "cubin": "a.cubin", "target": "sm_100a",
    "block": [512, 1, 1], "grid": {"sm_count": 148, "order": "static"},
    "dynamic_smem_bytes": 1, "tmem_columns": 512,
    "attention": {"mask": "none", "window_left": -1, "window_right": -1,
      "scale": 0.1, "softcap": 0, "head_dim": 64, "q_heads": 4, "kv_heads": 4,
      "dtype": "fp16", "lse": false, "rows_per_task": 256, "mask_mod": true},
    "tensor_maps": [], "parameters": [], )";
  ASSERT_TRUE(parseManifest(head + R"("extras": [{"dtype": "i32", "shape": [-1, 8]}]})", m, error)) << error;
  EXPECT_TRUE(m.maskMod);
  ASSERT_EQ(m.extras.size(), 1u);
  EXPECT_EQ(m.extras[0].shape, (std::vector<int64_t>{-1, 8}));
  EXPECT_FALSE(parseManifest(head + R"("extras": [{"dtype": "q7", "shape": [1]}]})", m, error));
  EXPECT_NE(error.find("unknown dtype \"q7\""), std::string::npos) << error;
  EXPECT_FALSE(parseManifest(head + R"("extras": [{"dtype": "f32", "shape": [0]}]})", m, error));
  EXPECT_NE(error.find("neither -1 nor"), std::string::npos) << error;
  // The block mask must name an i32 [?, ?, ?, 4] extra.
  std::string withBlockMask = head;
  withBlockMask.replace(withBlockMask.find(R"("mask_mod": true)"), 16,
                        R"("mask_mod": true, "block_mask": 0)");
  EXPECT_TRUE(parseManifest(withBlockMask + R"("extras": [{"dtype": "i32", "shape": [-1, 1, -1, 4]}]})", m, error)) << error;
  EXPECT_EQ(m.blockMask, 0);
  EXPECT_FALSE(parseManifest(withBlockMask + R"("extras": [{"dtype": "f32", "shape": [-1, 1, -1, 4]}]})", m, error));
  EXPECT_NE(error.find("block_mask"), std::string::npos) << error;
}

} // namespace
