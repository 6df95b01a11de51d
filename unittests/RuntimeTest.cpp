//===- RuntimeTest.cpp - manifest to launch arguments ---------------------===//

#include "fa4/Runtime/Launch.h"

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

} // namespace
