//===- RuntimeTest.cpp - manifest to launch arguments ---------------------===//

#include "fa4/Runtime/CompileCache.h"
#include "fa4/Runtime/Contract.h"
#include "fa4/Runtime/Launch.h"
#include "fa4/Runtime/Runtime.h"
#include "fa4/Support/Error.h"
#include "fa4/Support/InputLimits.h"

#include "Succeeds.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cstring>
#include <functional>
#include <random>
#include <sys/stat.h>

using namespace mlir::fa4;
using namespace mlir::fa4::runtime;
using fa4test::succeeds;

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
  m.dtype = "fp16";
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
  EXPECT_TRUE(succeeds(checkShapes(m, {1, (int64_t(1) << 26) - 1, 1}), error))
      << error;
  EXPECT_FALSE(succeeds(checkShapes(m, {1, int64_t(1) << 26, 1}), error));
  EXPECT_NE(error.find("reaches 2^31"), std::string::npos) << error;
  EXPECT_FALSE(succeeds(checkShapes(m, {1, 1, int64_t(1) << 31}), error));
  EXPECT_FALSE(succeeds(checkShapes(m, {0, 1, 1}), error));
  // Key edges add offsets below 2^24 in 32 bits: sequences keep 2^25 spare.
  int64_t seqLimit = (int64_t(1) << 31) - (int64_t(1) << 25);
  EXPECT_TRUE(succeeds(checkShapes(m, {1, 1, seqLimit - 1}), error)) << error;
  EXPECT_FALSE(succeeds(checkShapes(m, {1, 1, seqLimit}), error));
  EXPECT_NE(error.find("2^31 - 2^25"), std::string::npos) << error;
}

TEST(Runtime, PlanBindsMapsParametersAndThePersistentGrid) {
  Manifest m = seedManifest();
  Buffers buffers;
  buffers.q = 0x100000000ull;
  buffers.lse = 0x200000000ull;
  std::vector<TensorMapSpec> encoded;
  auto encode = [&](const TensorMapSpec &spec, uint8_t *out) {
    encoded.push_back(spec);
    std::memset(out, 0xab, 128);
    return llvm::Error::success();
  };
  LaunchPlan plan;
  std::string error;
  ASSERT_TRUE(
      succeeds(planLaunch(m, {2, 1000, 1000}, buffers, encode), plan, error))
      << error;
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
  EXPECT_FALSE(
      succeeds(planLaunch(m, {2, 1000, 1000}, buffers, encode), plan, error));
  EXPECT_NE(error.find("LSE"), std::string::npos);
}

TEST(Runtime, CtaPairsLaunchTwoCtasAClusterAndSayCluster) {
  // A pair kernel's sm_count and tasks count clusters; the grid is twice
  // as many CTAs, and the manifest says "cluster": 2 (read back as written).
  Manifest m = seedManifest();
  m.smCount = 74;
  m.rowsPerTask = 512;
  m.cluster = 2;
  Buffers buffers;
  buffers.q = 0x100000000ull;
  buffers.lse = 0x200000000ull;
  auto encode = [&](const TensorMapSpec &, uint8_t *out) {
    std::memset(out, 0, 128);
    return llvm::Error::success();
  };
  LaunchPlan plan;
  std::string error;
  ASSERT_TRUE(
      succeeds(planLaunch(m, {1, 1000, 1000}, buffers, encode), plan, error))
      << error;
  // 1 batch · 8 K/V heads · ceil(1000 · 4 / 512) = 8 pairs: 16 CTAs.
  EXPECT_EQ(plan.tasks, 8 * 8);
  EXPECT_EQ(plan.grid[0], 2u * 64u);
  std::string text = writeManifest(m);
  EXPECT_NE(text.find("\"cluster\": 2"), std::string::npos) << text;
  Manifest back;
  ASSERT_TRUE(succeeds(parseManifest(text), back, error)) << error;
  EXPECT_EQ(back.cluster, 2);
  // The contract (what the cubin is checked against) tells a pair kernel
  // from the same kernel without pairs.
  Manifest unpaired = m;
  unpaired.cluster = 1;
  EXPECT_NE(kernelContract(m), kernelContract(unpaired));
  // Only 1 and 2 are cluster sizes fa4 launches.
  size_t at = text.find("\"cluster\": 2");
  std::string bad = text.substr(0, at) + "\"cluster\": 3" + text.substr(at + 12);
  EXPECT_FALSE(succeeds(parseManifest(bad), back, error));
  EXPECT_NE(error.find("\"cluster\" 3"), std::string::npos) << error;
  // A manifest without it: one CTA a cluster.
  EXPECT_EQ(writeManifest(seedManifest()).find("cluster"), std::string::npos);
}

TEST(Runtime, MalformedManifestsNameTheField) {
  Manifest m;
  std::string error;
  EXPECT_FALSE(succeeds(parseManifest("{\"kernel\": 3}"), m, error));
  EXPECT_NE(error.find("\"kernel\""), std::string::npos) << error;
  EXPECT_FALSE(succeeds(parseManifest("["), m, error));
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
  auto encode = [](const TensorMapSpec &, uint8_t *out) {
    std::memset(out, 0, 128);
    return llvm::Error::success();
  };
  LaunchPlan plan;
  std::string error;
  ASSERT_TRUE(
      succeeds(planLaunch(m, {2, 1000, 1000}, buffers, encode), plan, error))
      << error;
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
  EXPECT_FALSE(
      succeeds(planLaunch(m, {2, 1000, 1000}, buffers, encode), plan, error));
  EXPECT_NE(error.find("extra1"), std::string::npos) << error;
}

TEST(Runtime, ExtrasAreCheckedByName) {
  Manifest m = seedManifest();
  m.extras = {{"i32", {-1, 64}}};
  Tensor o{0x100000000ull, "fp16", {1, 64, 32, 128}, {}};
  Tensor ids{0x200000000ull, "i32", {2, 64}, {64, 1}};
  std::string error;
  EXPECT_TRUE(succeeds(checkExtras(m, {ids}, {&o}), error)) << error;
  auto refused = [&](Tensor extra, std::vector<Tensor> extras = {}) {
    if (extras.empty())
      extras = {extra};
    EXPECT_FALSE(succeeds(checkExtras(m, extras, {&o}), error));
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
  EXPECT_TRUE(succeeds(checkExtras(m, {ids, table}, {&o}, &shapes), error))
      << error;
  // One entry for all batches is fine; a wrong count of query blocks is not.
  table.sizes = {1, 1, 3, 4};
  EXPECT_TRUE(succeeds(checkExtras(m, {ids, table}, {&o}, &shapes), error))
      << error;
  table.sizes = {2, 1, 2, 4};
  EXPECT_FALSE(succeeds(checkExtras(m, {ids, table}, {&o}, &shapes), error));
  EXPECT_NE(error.find("extra1: the block mask must be [batch or 1, q_heads or 1, "
                       "ceil(seq_q / 128), 4] = [2 or 1, 32 or 1, 3, 4]"),
            std::string::npos)
      << error;
  table.sizes = {3, 1, 3, 4};
  EXPECT_FALSE(succeeds(checkExtras(m, {ids, table}, {&o}, &shapes), error));
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
  ASSERT_TRUE(
      succeeds(parseManifest(
                   head + R"("extras": [{"dtype": "i32", "shape": [-1, 8]}]})"),
               m, error))
      << error;
  EXPECT_TRUE(m.maskMod);
  ASSERT_EQ(m.extras.size(), 1u);
  EXPECT_EQ(m.extras[0].shape, (std::vector<int64_t>{-1, 8}));
  EXPECT_FALSE(succeeds(
      parseManifest(head + R"("extras": [{"dtype": "q7", "shape": [1]}]})"), m,
      error));
  EXPECT_NE(error.find("unknown dtype \"q7\""), std::string::npos) << error;
  EXPECT_FALSE(succeeds(
      parseManifest(head + R"("extras": [{"dtype": "f32", "shape": [0]}]})"), m,
      error));
  EXPECT_NE(error.find("neither -1 nor"), std::string::npos) << error;
  // The block mask must name an i32 [?, ?, ?, 4] extra.
  std::string withBlockMask = head;
  withBlockMask.replace(withBlockMask.find(R"("mask_mod": true)"), 16,
                        R"("mask_mod": true, "block_mask": 0)");
  EXPECT_TRUE(
      succeeds(parseManifest(
                   withBlockMask +
                   R"("extras": [{"dtype": "i32", "shape": [-1, 1, -1, 4]}]})"),
               m, error))
      << error;
  EXPECT_EQ(m.blockMask, 0);
  EXPECT_FALSE(
      succeeds(parseManifest(
                   withBlockMask +
                   R"("extras": [{"dtype": "f32", "shape": [-1, 1, -1, 4]}]})"),
               m, error));
  EXPECT_NE(error.find("block_mask"), std::string::npos) << error;
  // A paged cache's block table: an i32 [?, ?] extra with a page size (a
  // power of two of at least 16), the two together.
  std::string paged = head;
  paged.replace(paged.find(R"("mask_mod": true)"), 16,
                R"("mask_mod": true, "block_table": 0, "page_size": 16)");
  std::string table = R"("extras": [{"dtype": "i32", "shape": [-1, -1]}]})";
  EXPECT_TRUE(succeeds(parseManifest(paged + table), m, error)) << error;
  EXPECT_EQ(m.blockTable, 0);
  EXPECT_EQ(m.pageSize, 16);
  for (const char *bad : {R"("block_table": 0, "page_size": 24)",
                          R"("block_table": 0)", R"("page_size": 16)",
                          R"("block_table": 0, "page_size": -16)",
                          R"("block_table": 1, "page_size": 16)"}) {
    std::string edited = head;
    edited.replace(edited.find(R"("mask_mod": true)"), 16,
                   std::string(R"("mask_mod": true, )") + bad);
    EXPECT_FALSE(succeeds(parseManifest(edited + table), m, error)) << bad;
    EXPECT_TRUE(error.find("block_table") != std::string::npos ||
                error.find("page_size") != std::string::npos)
        << error;
  }
}

TEST(InputLimits, NestingIsCountedOutsideStringsAndComments) {
  std::string error;
  EXPECT_TRUE(
      succeeds(checkNestingDepth("[[1]]", 2, NestingSyntax::Json), error));
  EXPECT_FALSE(
      succeeds(checkNestingDepth("[[[1]]]", 2, NestingSyntax::Json), error));
  EXPECT_NE(error.find("line 1, column 3: nesting deeper than 2"), std::string::npos)
      << error;
  // Brackets in strings (with escaped quotes) and comments do not nest.
  EXPECT_TRUE(succeeds(
      checkNestingDepth(R"(["[[[\"[[["])", 1, NestingSyntax::Json), error));
  EXPECT_TRUE(succeeds(
      checkNestingDepth("// ((((\n(x)", 1, NestingSyntax::Mlir), error));
  // The `>` of `->` closes nothing.
  EXPECT_TRUE(
      succeeds(checkNestingDepth("(a) -> (b)", 1, NestingSyntax::Mlir), error));
  EXPECT_FALSE(
      succeeds(checkNestingDepth("<(x) -> y>", 1, NestingSyntax::Mlir), error));
  size_t offset = 0;
  EXPECT_FALSE(succeeds(
      checkNestingDepth("{\n {\n  {", 2, NestingSyntax::Mlir, &offset), error));
  EXPECT_EQ(offset, 7u);
  EXPECT_NE(error.find("line 3, column 3"), std::string::npos) << error;
}

TEST(InputLimits, OnlyBoundedRegularFilesAreRead) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("fa4-runtime-test", dir));
  std::string file = std::string(dir) + "/f", fifo = std::string(dir) + "/p";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    os << "0123456789";
  }
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string text, error;
  bool missing = true;
  EXPECT_TRUE(succeeds(readRegularFile(file, 10, &missing), text, error))
      << error;
  EXPECT_EQ(text, "0123456789");
  EXPECT_FALSE(missing);
  EXPECT_FALSE(succeeds(readRegularFile(file, 9), text, error));
  EXPECT_NE(error.find("more than the 9 accepted"), std::string::npos) << error;
  // A FIFO without a writer: refused at once, not waited on.
  EXPECT_FALSE(succeeds(readRegularFile(fifo, 10), text, error));
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;
  EXPECT_FALSE(succeeds(readRegularFile(std::string(dir), 10), text, error));
  EXPECT_FALSE(succeeds(readRegularFile("/dev/zero", 10), text, error));
  EXPECT_FALSE(succeeds(
      readRegularFile(std::string(dir) + "/none", 10, &missing), text, error));
  EXPECT_TRUE(missing);
  llvm::sys::fs::remove_directories(dir);
}

/// A manifest as fa4c writes it for hd 64, 2 q heads over 1 kv head, LSE.
std::string writtenManifest() {
  return R"({"kernel": "attention", "cubin": "k.cubin", "ptx": "k.ptx",
    "target": "sm_100a", "block": [512, 1, 1],
    "grid": {"sm_count": 148, "order": "static"},
    "dynamic_smem_bytes": 1024, "tmem_columns": 512,
    "attention": {"mask": "causal", "window_left": -1, "window_right": 0,
      "scale": 0.125, "softcap": 0, "head_dim": 64, "q_heads": 2, "kv_heads": 1,
      "dtype": "fp16", "lse": true, "rows_per_task": 256},
    "tensor_maps": [)" +
         [] {
           std::string maps;
           for (const char *t : {"q", "k", "v", "o"}) {
             bool query = *t == 'q' || *t == 'o';
             std::string heads = query ? "2" : "1", seq = query ? "seq_q" : "seq_k";
             std::string row = query ? "256" : "128";
             maps += std::string(maps.empty() ? "" : ", ") + R"({"tensor": ")" + t +
                     R"(", "dtype": "fp16", "rank": 4, "dims": [64, )" + heads +
                     R"(, ")" + seq + R"(", "batch"], "strides_bytes": [128, )" + row +
                     R"(, ")" + row + " * " + seq +
                     R"("], "box": [64, 1, 128, 1], "axes": [3, 2, 1, 0],
                     "element_strides": [1, 1, 1, 1], "swizzle": "128B", "oob_fill": "zero"})";
           }
           return maps;
         }() +
         R"(], "parameters": [{"name": "q_map", "type": "CUtensorMap"},
      {"name": "k_map", "type": "CUtensorMap"}, {"name": "v_map", "type": "CUtensorMap"},
      {"name": "o_map", "type": "CUtensorMap"}, {"name": "lse", "type": "float*"},
      {"name": "batch", "type": "int32"}, {"name": "seq_q", "type": "int32"},
      {"name": "seq_k", "type": "int32"}]})";
}

const char *kWrittenPtx = R"(.version 8.7
.target sm_100a
.address_size 64
.visible .entry attention(
	.param .align 64 .b8 attention_param_0[128],
	.param .align 64 .b8 attention_param_1[128],
	.param .align 64 .b8 attention_param_2[128],
	.param .align 64 .b8 attention_param_3[128],
	.param .u64 .ptr .global .align 1 attention_param_4,
	.param .u32 attention_param_5,
	.param .u32 attention_param_6,
	.param .u32 attention_param_7
)
.reqntid 512
{
})";

TEST(InputLimits, StreamsAreReadOnlyUpToTheBound) {
  // A device that never ends is refused after the bound, not read whole.
  llvm::Expected<std::string> zero = readBoundedStream("/dev/zero", 1 << 20);
  ASSERT_FALSE(bool(zero));
  EXPECT_EQ(llvm::toString(zero.takeError()),
            "/dev/zero holds more than 1048576 bytes, the most accepted");
  llvm::Expected<std::string> missing =
      readBoundedStream("/nonexistent/fa4.mlir", 1 << 20);
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(llvm::toString(missing.takeError())
                .find("cannot open input file '/nonexistent/fa4.mlir'"),
            std::string::npos);
  llvm::Expected<std::string> empty = readBoundedStream("/dev/null", 0);
  ASSERT_TRUE(bool(empty));
  EXPECT_TRUE(empty->empty());
}

TEST(CompileCache, KeysHoldNumbersExactly) {
  // Six decimals made 0.1249999 and 0.125 (which emulate a different
  // number of exponentials) one key.
  EXPECT_NE(roundTripDecimal(0.1249999), roundTripDecimal(0.125));
  for (double value : {0.125, 0.1249999, 1.0000001, 1e-46, 8.0, 2.5e38,
                       0.1 + 0.2})
    EXPECT_EQ(std::strtod(roundTripDecimal(value).c_str(), nullptr), value)
        << roundTripDecimal(value);
  EXPECT_EQ(roundTripDecimal(0.125), "0.125");
  EXPECT_EQ(roundTripDecimal(8.0), "8");
  EXPECT_EQ(roundTripDecimal(1e-46), "1e-46");
}

TEST(Runtime, ManifestFilesStayBesideIt) {
  Manifest m;
  std::string error, json = writtenManifest();
  ASSERT_TRUE(succeeds(parseManifest(json), m, error)) << error;
  for (const char *name : {"../k.ptx", "/dev/zero", "..", ".", "a/b"}) {
    std::string edited = json;
    edited.replace(edited.find("\"k.ptx\""), 7, std::string("\"") + name + "\"");
    EXPECT_FALSE(succeeds(parseManifest(edited), m, error)) << name;
    EXPECT_NE(error.find("must name a file beside the manifest"), std::string::npos)
        << error;
  }
  // Nesting is refused before llvm::json recurses into it.
  std::string deep = json;
  deep.insert(1, R"("x": )" + std::string(100000, '[') + std::string(100000, ']') + ", ");
  EXPECT_FALSE(succeeds(parseManifest(deep), m, error));
  EXPECT_NE(error.find("nesting deeper than 64"), std::string::npos) << error;
}

TEST(Runtime, InterfaceIsFa4sAndThePtxs) {
  Manifest m;
  std::string error;
  ASSERT_TRUE(succeeds(parseManifest(writtenManifest()), m, error)) << error;
  EXPECT_TRUE(succeeds(checkInterface(m), error)) << error;
  EXPECT_TRUE(succeeds(checkPtxEntry(m, kWrittenPtx), error)) << error;
  // Q's and O's maps exchanged in the parameter list.
  Manifest swapped = m;
  std::swap(swapped.parameters[0], swapped.parameters[3]);
  EXPECT_FALSE(succeeds(checkInterface(swapped), error));
  EXPECT_NE(error.find("are not the kernel's"), std::string::npos) << error;
  // A map of the wrong heads, a second map of q, none of v.
  Manifest edited = m;
  edited.tensorMaps[3].dims[1] = "4";
  EXPECT_FALSE(succeeds(checkInterface(edited), error));
  EXPECT_NE(error.find("dimension 1 is \"4\", the kernel's tensor has 2"),
            std::string::npos)
      << error;
  edited = m;
  edited.tensorMaps[2].tensor = "q";
  EXPECT_FALSE(succeeds(checkInterface(edited), error));
  EXPECT_NE(error.find("two tensor maps for \"q\""), std::string::npos) << error;
  // The PTX's entry: its name, count, sizes and block.
  edited = m;
  edited.kernel = "other";
  EXPECT_FALSE(succeeds(checkPtxEntry(edited, kWrittenPtx), error));
  edited = m;
  edited.parameters[5].type = "float*";
  EXPECT_FALSE(succeeds(checkPtxEntry(edited, kWrittenPtx), error));
  EXPECT_NE(error.find("parameter 5 of attention is 4 bytes"), std::string::npos) << error;
  edited = m;
  edited.block[0] = 384;
  EXPECT_FALSE(succeeds(checkPtxEntry(edited, kWrittenPtx), error));
  EXPECT_NE(error.find("runs 512 threads"), std::string::npos) << error;
}

TEST(Runtime, PlanMapsStayInsideTheirTensors) {
  Manifest m;
  std::string error;
  ASSERT_TRUE(succeeds(parseManifest(writtenManifest()), m, error)) << error;
  Buffers buffers{0x10000, 0x20000, 0x30000, 0x40000, 0x50000};
  auto encode = [](const TensorMapSpec &, uint8_t *out) {
    std::memset(out, 0, 128);
    return llvm::Error::success();
  };
  LaunchPlan plan;
  ASSERT_TRUE(
      succeeds(planLaunch(m, {2, 300, 200}, buffers, encode), plan, error))
      << error;
  // O's map: [64, 2, 300, 2] with the dense strides.
  const TensorMapSpec &o = plan.tensorMaps[3].second;
  EXPECT_EQ(o.globalDims[2], 300u);
  EXPECT_EQ(o.globalStrides[2], 256u * 300u);
  // An enlarged stride or extent in the manifest is refused.
  Manifest edited = m;
  edited.tensorMaps[3].strides[1] = "1024";
  EXPECT_FALSE(succeeds(planLaunch(edited, {2, 300, 200}, buffers, encode),
                        plan, error));
  EXPECT_NE(error.find("stride 2 (\"1024\") of the tensor map of \"o\" is not the "
                       "tensor's 256 bytes"),
            std::string::npos)
      << error;
  edited = m;
  edited.tensorMaps[3].dims[2] = "seq_k";
  EXPECT_FALSE(succeeds(planLaunch(edited, {2, 300, 200}, buffers, encode),
                        plan, error));
  EXPECT_NE(error.find("dimension 2 of the tensor map of \"o\" is 200, the tensor's axis 1 is 300"),
            std::string::npos)
      << error;
}

TEST(CompileCache, EntriesAreVerifiedAndBadOnesReplaced) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("fa4-cache-test", dir));
  CompileCache cache{std::string(dir)};
  std::string manifest = writtenManifest();
  CompileCache::Entry a{"cubin a", kWrittenPtx, manifest, "k.cubin", "k.ptx"};
  CompileCache::Entry b = a;
  b.cubin = "cubin b";
  std::string keyA = CompileCache::key({"a"}), keyB = CompileCache::key({"b"});
  std::string error;
  ASSERT_TRUE(succeeds(cache.store(keyA, a), error)) << error;
  ASSERT_TRUE(succeeds(cache.store(keyB, b), error)) << error;
  CompileCache::Entry found;
  ASSERT_TRUE(cache.lookup(keyA, found));
  EXPECT_EQ(found.cubin, "cubin a");
  std::string entryA = std::string(dir) + "/" + keyA, entryB = std::string(dir) + "/" + keyB;
  auto write = [](const std::string &path, const std::string &text) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    os << text;
  };
  // Another entry's cubin: no hit, the entry gone, and a store replaces it.
  write(entryA + "/kernel.cubin", "cubin b");
  std::string rejected;
  EXPECT_FALSE(cache.lookup(keyA, found, &rejected));
  EXPECT_NE(rejected.find("kernel.cubin is not the file the entry was written with"),
            std::string::npos)
      << rejected;
  EXPECT_FALSE(llvm::sys::fs::exists(entryA));
  ASSERT_TRUE(succeeds(cache.store(keyA, a), error)) << error;
  ASSERT_TRUE(cache.lookup(keyA, found));
  EXPECT_EQ(found.cubin, "cubin a");
  // Another key's whole entry.
  llvm::sys::fs::remove_directories(entryA);
  ASSERT_FALSE(llvm::sys::fs::rename(entryB, entryA));
  EXPECT_FALSE(cache.lookup(keyA, found, &rejected));
  EXPECT_NE(rejected.find("another key's compilation"), std::string::npos) << rejected;
  // A bad entry in place when a store comes: replaced, not kept.
  ASSERT_TRUE(succeeds(cache.store(keyA, a), error)) << error;
  write(entryA + "/manifest.json", "{");
  ASSERT_TRUE(succeeds(cache.store(keyA, a), error)) << error;
  ASSERT_TRUE(cache.lookup(keyA, found));
  EXPECT_EQ(found.manifest, manifest);
  // A FIFO for a file: refused, not waited on.
  llvm::sys::fs::remove(entryA + "/kernel.ptx");
  ASSERT_EQ(::mkfifo((entryA + "/kernel.ptx").c_str(), 0600), 0);
  EXPECT_FALSE(cache.lookup(keyA, found, &rejected));
  EXPECT_NE(rejected.find("not a regular file"), std::string::npos) << rejected;
  // Discarded whole, FIFO and all: nothing is left.
  std::error_code ec;
  std::vector<std::string> left;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    left.push_back(llvm::sys::path::filename(it->path()).str());
  EXPECT_TRUE(left.empty()) << left.front();
  llvm::sys::fs::remove_directories(dir);
}

/// The declaration fa4c's lowering writes into the PTX for `contract`.
std::string ptxDeclaring(const std::string &contract) {
  std::string text = ".version 8.8\n.target sm_100a\n.address_size 64\n\n"
                     ".visible .global .align 1 .b8 fa4_contract[" +
                     std::to_string(contract.size()) + "] = {";
  for (size_t i = 0; i < contract.size(); ++i)
    text += (i ? ", " : "") + std::to_string(static_cast<uint8_t>(contract[i]));
  return text + "};\n\n.visible .entry attention()\n{\n\tret;\n}\n";
}

/// A minimal little-endian ELF64 file as ptxas lays out a cubin's symbols:
/// a string table, a symbol table (a null symbol, `other`, then each of
/// `names`), one PROGBITS section holding `contents` (every named symbol
/// covers all of it) and one NOBITS section, then the section headers.
struct ElfImage {
  std::vector<uint8_t> bytes;
  size_t symbols = 0, sectionTable = 0;
  /// Offset of symbol `i`'s entry, and of section header `i`.
  size_t symbol(size_t i) const { return symbols + 24 * i; }
  size_t section(size_t i) const { return sectionTable + 64 * i; }
};

ElfImage elfWith(const std::vector<std::string> &names, const std::string &contents) {
  ElfImage elf;
  std::vector<uint8_t> &b = elf.bytes;
  auto put = [&](size_t at, uint64_t value, unsigned size) {
    for (unsigned i = 0; i < size; ++i)
      b[at + i] = static_cast<uint8_t>(value >> (8 * i));
  };
  b.assign(64, 0);
  const uint8_t ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  std::memcpy(b.data(), ident, sizeof(ident));
  std::string strtab = std::string(1, '\0') + "other" + '\0';
  std::vector<uint32_t> nameOffsets;
  for (const std::string &name : names) {
    nameOffsets.push_back(static_cast<uint32_t>(strtab.size()));
    strtab += name + '\0';
  }
  size_t strtabAt = b.size();
  b.insert(b.end(), strtab.begin(), strtab.end());
  while (b.size() % 8)
    b.push_back(0);
  elf.symbols = b.size();
  size_t count = 2 + names.size();
  b.resize(b.size() + 24 * count, 0);
  put(elf.symbol(1), 1, 4); // "other", section 3
  put(elf.symbol(1) + 6, 3, 2);
  for (size_t i = 0; i < names.size(); ++i) {
    put(elf.symbol(2 + i), nameOffsets[i], 4);
    put(elf.symbol(2 + i) + 6, 3, 2);
    put(elf.symbol(2 + i) + 16, contents.size(), 8);
  }
  size_t dataAt = b.size();
  b.insert(b.end(), contents.begin(), contents.end());
  while (b.size() % 8)
    b.push_back(0);
  elf.sectionTable = b.size();
  b.resize(b.size() + 64 * 5, 0);
  auto header = [&](size_t i, uint32_t type, uint64_t offset, uint64_t size,
                    uint32_t link, uint64_t entrySize) {
    put(elf.section(i) + 0x04, type, 4);
    put(elf.section(i) + 0x18, offset, 8);
    put(elf.section(i) + 0x20, size, 8);
    put(elf.section(i) + 0x28, link, 4);
    put(elf.section(i) + 0x38, entrySize, 8);
  };
  header(1, /*STRTAB*/ 3, strtabAt, strtab.size(), 0, 0);
  header(2, /*SYMTAB*/ 2, elf.symbols, 24 * count, 1, 24);
  header(3, /*PROGBITS*/ 1, dataAt, contents.size(), 0, 0);
  header(4, /*NOBITS*/ 8, 0, 1 << 20, 0, 0);
  put(0x28, elf.sectionTable, 8);
  put(0x3a, 64, 2);
  put(0x3c, 5, 2);
  return elf;
}

std::string errorOf(llvm::Expected<std::optional<std::string>> result) {
  if (result)
    return "no error";
  return llvm::toString(result.takeError());
}

TEST(Contract, CubinSymbolIsRead) {
  ElfImage elf = elfWith({"fa4_contract"}, "fa4-contract 1\nkernel=x\n");
  auto read = readCubinContract(elf.bytes);
  ASSERT_TRUE(static_cast<bool>(read)) << llvm::toString(read.takeError());
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ(**read, "fa4-contract 1\nkernel=x\n");
  // No such symbol, or no ELF file at all: no contract.
  auto none = readCubinContract(elfWith({"fa4_contracts"}, "x").bytes);
  ASSERT_TRUE(static_cast<bool>(none));
  EXPECT_FALSE(none->has_value());
  const uint8_t text[] = {'c', 'u', 'b', 'i', 'n'};
  auto notElf = readCubinContract(text);
  ASSERT_TRUE(static_cast<bool>(notElf));
  EXPECT_FALSE(notElf->has_value());
}

TEST(Contract, CubinReaderStaysInsideTheFile) {
  const ElfImage good = elfWith({"fa4_contract"}, "the contract");
  auto put = [](std::vector<uint8_t> &b, size_t at, uint64_t value, unsigned size) {
    for (unsigned i = 0; i < size; ++i)
      b[at + i] = static_cast<uint8_t>(value >> (8 * i));
  };
  // Every truncation: an error (or, shorter than the magic, no ELF).
  for (size_t size = 0; size < good.bytes.size(); ++size) {
    auto read = readCubinContract(llvm::ArrayRef(good.bytes).take_front(size));
    if (read) {
      EXPECT_LT(size, 4u);
      EXPECT_FALSE(read->has_value());
    } else {
      llvm::consumeError(read.takeError());
    }
  }
  struct Corruption {
    const char *expected;
    std::function<void(std::vector<uint8_t> &)> apply;
  };
  std::vector<Corruption> corruptions = {
      {"is not a little-endian ELF64 file", [&](auto &b) { b[4] = 1; }},
      {"is not a little-endian ELF64 file", [&](auto &b) { b[5] = 2; }},
      {"section table outside the file",
       [&](auto &b) { put(b, 0x28, ~uint64_t(0) - 63, 8); }},
      {"section table outside the file", [&](auto &b) { put(b, 0x3c, 0xffff, 2); }},
      {"section table outside the file", [&](auto &b) { put(b, 0x3a, 8, 2); }},
      {"section 3 outside the file",
       [&](auto &b) { put(b, good.section(3) + 0x20, ~uint64_t(0), 8); }},
      {"malformed symbol table", [&](auto &b) { put(b, good.section(2) + 0x38, 0, 8); }},
      {"malformed symbol table", [&](auto &b) { put(b, good.section(2) + 0x28, 77, 4); }},
      {"malformed symbol table", [&](auto &b) { put(b, good.section(2) + 0x28, 4, 4); }},
      {"name lies outside its string table",
       [&](auto &b) { put(b, good.symbol(2), 1u << 31, 4); }},
      {"does not end in its string table",
       [&](auto &b) { put(b, good.section(1) + 0x20, 14, 8); }},
      {"without contents", [&](auto &b) { put(b, good.symbol(2) + 6, 4, 2); }},
      {"without contents", [&](auto &b) { put(b, good.symbol(2) + 6, 0, 2); }},
      {"without contents", [&](auto &b) { put(b, good.symbol(2) + 6, 0xfff1, 2); }},
      {"larger than its section",
       [&](auto &b) { put(b, good.symbol(2) + 8, ~uint64_t(0), 8); }},
      {"larger than its section",
       [&](auto &b) { put(b, good.symbol(2) + 16, ~uint64_t(0) - 2, 8); }},
  };
  for (const Corruption &c : corruptions) {
    std::vector<uint8_t> bytes = good.bytes;
    c.apply(bytes);
    std::string error = errorOf(readCubinContract(bytes));
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.expected << ": " << error;
  }
  EXPECT_NE(errorOf(readCubinContract(elfWith({"fa4_contract", "fa4_contract"}, "x").bytes))
                .find("defines fa4_contract twice"),
            std::string::npos);
  // Garbage behind the magic: never a read outside (the sanitizer build
  // checks), whatever the verdict.
  std::mt19937_64 random(24);
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<uint8_t> bytes = good.bytes;
    for (int flips = 1 + trial % 8; flips-- > 0;)
      bytes[6 + random() % (bytes.size() - 6)] = static_cast<uint8_t>(random());
    if (auto read = readCubinContract(bytes); !read)
      llvm::consumeError(read.takeError());
  }
}

TEST(Contract, PtxDeclarationIsRead) {
  auto read = readPtxContract(ptxDeclaring("a=1\nb=2\n"));
  ASSERT_TRUE(static_cast<bool>(read)) << llvm::toString(read.takeError());
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ(**read, "a=1\nb=2\n");
  auto none = readPtxContract(kWrittenPtx);
  ASSERT_TRUE(static_cast<bool>(none));
  EXPECT_FALSE(none->has_value());
  std::string good = ptxDeclaring("ab");
  auto edited = [&](const std::string &from, const std::string &to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return errorOf(readPtxContract(text));
  };
  EXPECT_NE(edited("[2]", "[3]").find("not 3 bytes"), std::string::npos);
  EXPECT_NE(edited("{97, 98}", "{97}").find("not 2 bytes"), std::string::npos);
  EXPECT_NE(edited("{97, 98}", "{97, 98, 99}").find("not 2 bytes"), std::string::npos);
  EXPECT_NE(edited("98}", "256}").find("not 2 bytes"), std::string::npos);
  EXPECT_NE(edited("[2]", "[99999999999999999999]").find("no size of at most"),
            std::string::npos);
  EXPECT_NE(edited("[2]", "[65537]").find("no size of at most"), std::string::npos);
  EXPECT_NE(edited(".global", ".shared").find("not a .global .b8 array"), std::string::npos);
  EXPECT_NE(edited(" = {", ";").find("no initializer"), std::string::npos);
  EXPECT_NE(errorOf(readPtxContract(good + ptxDeclaring("ab"))).find("declared twice"),
            std::string::npos);
  // Cut anywhere: an error or no contract, never a read past the end.
  for (size_t size = 0; size < good.size(); ++size)
    if (auto read = readPtxContract(llvm::StringRef(good).take_front(size)); !read)
      llvm::consumeError(read.takeError());
}

TEST(Contract, ManifestPtxAndCubinMustAgree) {
  Manifest m = seedManifest();
  std::string contract = kernelContract(m);
  std::string ptx = ptxDeclaring(contract);
  std::vector<uint8_t> cubin = elfWith({"fa4_contract"}, contract).bytes;
  EXPECT_FALSE(static_cast<bool>(checkContract(m, ptx, cubin)));
  // What the code does not depend on.
  Manifest renamed = m;
  renamed.cubin = "other.cubin";
  renamed.smCount = 7;
  EXPECT_FALSE(static_cast<bool>(checkContract(renamed, ptx, cubin)));
  // What it does, named with both values.
  Manifest edited = m;
  edited.tensorMaps[0].swizzle = TensorMapSwizzle::None;
  std::string error = llvm::toString(checkContract(edited, ptx, cubin));
  EXPECT_NE(error.find("\"tensor_maps[0].swizzle\" is none in the manifest but 128B in "
                       "the kernel's PTX"),
            std::string::npos)
      << error;
  error = llvm::toString(checkContract(edited, {}, cubin));
  EXPECT_NE(error.find("but 128B in the kernel's cubin"), std::string::npos) << error;
  edited = m;
  edited.parameters.pop_back();
  error = llvm::toString(checkContract(edited, ptx, {}));
  EXPECT_NE(error.find("\"parameters\" is 4 in the manifest but 5"), std::string::npos)
      << error;
  // Another kernel's cubin; a cubin without one beside a PTX with one.
  edited = m;
  edited.dtype = "bf16";
  std::vector<uint8_t> other = elfWith({"fa4_contract"}, kernelContract(edited)).bytes;
  error = llvm::toString(checkContract(m, ptx, other));
  EXPECT_NE(error.find("the cubin is not the PTX's: \"attention.dtype\" is fp16 in the "
                       "PTX's contract but bf16 in the cubin's"),
            std::string::npos)
      << error;
  const uint8_t notElf[] = {'c', 'u', 'b', 'i', 'n'};
  error = llvm::toString(checkContract(m, ptx, notElf));
  EXPECT_NE(error.find("the PTX declares the kernel's contract"), std::string::npos) << error;
  // Neither declares one (hand-written PTX): accepted as before contracts.
  EXPECT_FALSE(static_cast<bool>(checkContract(m, kWrittenPtx, notElf)));
}

} // namespace

// A backend's caches know a kernel's code by its digest: equal exactly for
// equal code, the PTX/cubin boundary included; a kernel put together field
// by field (no digest set) gets the same one computed at launch.
TEST(Runtime, CodeDigestNamesTheCodeExactly) {
  std::vector<uint8_t> c = {'c'}, bc = {'b', 'c'}, none;
  EXPECT_EQ(codeDigest("ab", c), codeDigest("ab", c));
  EXPECT_EQ(codeDigest("ab", c).size(), 32u);
  EXPECT_NE(codeDigest("ab", c), codeDigest("a", bc));
  EXPECT_NE(codeDigest("abc", none), codeDigest("", {'a', 'b', 'c'}));
  EXPECT_NE(codeDigest("ab", c), codeDigest("ab", {'d'}));
  Kernel kernel;
  kernel.manifest.kernel = "attention";
  kernel.manifest.target = "sm_90a";
  kernel.manifest.dynamicSmemBytes = 1024;
  // (Longer than a string keeps inline, as any real PTX: a move keeps its
  // buffer.)
  std::string ptx(64, 'p');
  kernel.ptx = ptx;
  kernel.cubin = c;
  KernelCode code = kernel.code();
  EXPECT_EQ(code.digest, codeDigest(ptx, c));
  EXPECT_EQ(&code.ptx, &kernel.ptx);
  EXPECT_EQ(&code.cubin, &kernel.cubin);
  EXPECT_EQ(code.entry, "attention");
  EXPECT_EQ(code.dynamicSmemBytes, 1024u);
  // A digest names the buffers it was computed from: kept by a move,
  // computed again for a copy or for reassigned code.
  kernel.digest = CodeDigest::of(kernel.ptx, kernel.cubin);
  kernel.digest.value = "remembered";
  EXPECT_EQ(kernel.code().digest, "remembered");
  Kernel moved = std::move(kernel);
  EXPECT_EQ(moved.code().digest, "remembered");
  Kernel copied = moved;
  EXPECT_EQ(copied.code().digest, codeDigest(ptx, c));
  moved.cubin = {'d', 'e'};
  EXPECT_EQ(moved.code().digest, codeDigest(ptx, {'d', 'e'}));
}
