//===- Fp8RuntimeTest.cpp - FP8 kernels' manifest, V layout and launch ----===//

#include "fa4/Runtime/Contract.h"
#include "fa4/Runtime/Fp8Value.h"
#include "fa4/Runtime/Launch.h"
#include "fa4/Runtime/Runtime.h"

#include "Succeeds.h"

#include "gtest/gtest.h"

#include <cstring>
#include <random>

using namespace mlir::fa4::runtime;
using fa4test::succeeds;

namespace {

/// What fa4c writes for an sm_90a e4m3 kernel, hd 128, 4 query heads over
/// 2 K/V heads, its three descale tables the only extras: Q and K e4m3,
/// V e4m3 in the vt layout, O bf16.
Manifest fp8Manifest() {
  Manifest m;
  m.kernel = "attention";
  m.target = "sm_90a";
  m.block[0] = 384;
  m.smCount = 132;
  m.order = "static";
  m.qHeads = 4;
  m.kvHeads = 2;
  m.headDim = m.valueHeadDim = 128;
  m.rowsPerTask = 128;
  m.scale = 0.088388347648;
  m.dtype = "e4m3";
  m.outDtype = "bf16";
  m.extras = {{"f32", {-1, 2}}, {"f32", {-1, 2}}, {"f32", {-1, 2}}};
  m.qDescale = 0;
  m.kDescale = 1;
  m.vDescale = 2;
  auto map = [](const char *tensor, const char *dtype, std::string seq,
                int64_t heads, int64_t bytes, uint32_t boxHeads) {
    Manifest::TensorMap t;
    t.tensor = tensor;
    t.dtype = dtype;
    t.rank = 4;
    t.dims = {"128", std::to_string(heads), seq, "batch"};
    t.strides = {std::to_string(128 * bytes), std::to_string(128 * bytes * heads),
                 std::to_string(128 * bytes * heads) + " * " + seq};
    uint32_t columns = 128 / bytes;
    t.box[0] = columns;
    t.box[1] = boxHeads;
    t.box[2] = 128 / boxHeads;
    t.box[3] = 1;
    t.axes = {3, 2, 1, 0};
    t.layoutStrides = {-1, -1, -1, -1};
    t.swizzle = TensorMapSwizzle::Bytes128;
    return t;
  };
  Manifest::TensorMap v;
  v.tensor = "v";
  v.dtype = "e4m3";
  v.layout = "vt";
  v.rank = 4;
  v.dims = {"seq_k_padded", "2", "128", "batch"};
  v.strides = {"128 * seq_k_padded", "seq_k_padded", "256 * seq_k_padded"};
  v.box[0] = 128;
  v.box[1] = 1;
  v.box[2] = 128;
  v.box[3] = 1;
  v.axes = {3, 1, 2, 0};
  v.swizzle = TensorMapSwizzle::Bytes128;
  m.tensorMaps = {map("q", "e4m3", "seq_q", 4, 1, 2),
                  map("k", "e4m3", "seq_k", 2, 1, 1), v,
                  map("o", "bf16", "seq_q", 4, 2, 2)};
  for (const char *name : {"q_map", "k_map", "v_map", "o_map"})
    m.parameters.push_back({name, "CUtensorMap", "", ""});
  for (const char *name : {"batch", "seq_q", "seq_k"})
    m.parameters.push_back({name, "int32", "", ""});
  for (int i = 0; i < 3; ++i) {
    m.parameters.push_back({"extra" + std::to_string(i), "void*", "", ""});
    m.parameters.push_back(
        {"extra" + std::to_string(i) + "_dim0", "int32", "", ""});
  }
  return m;
}

/// `text` with its first `from` replaced by `to` (the test fails when there
/// is none).
std::string edited(std::string text, const std::string &from,
                   const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

TEST(Fp8Value, PermutationIsTheAFragmentsKeyOrder) {
  // Position k = 4t + 2h + e holds key 8h + 2t + e, in every group of 16.
  int64_t expected[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
  for (int64_t group = 0; group < 3; ++group)
    for (int64_t k = 0; k < 16; ++k)
      EXPECT_EQ(vtKeyAt(16 * group + k), 16 * group + expected[k]) << k;
  EXPECT_EQ(vtPaddedKeys(1), 16);
  EXPECT_EQ(vtPaddedKeys(16), 16);
  EXPECT_EQ(vtPaddedKeys(17), 32);
  EXPECT_EQ(vtSizes({2, 77, 3, 64}), (std::vector<int64_t>{2, 3, 64, 80}));
}

TEST(Fp8Value, PreparedValueIsTransposedPermutedAndZeroPadded) {
  // V [batch 2, seq_k 19, kv_heads 3, dim 5] stored heads-first ([b, h, s,
  // d] in memory), every byte nonzero and distinct per element.
  const int64_t batch = 2, seqK = 19, heads = 3, dim = 5;
  std::vector<uint8_t> value(batch * heads * seqK * dim);
  std::mt19937 random(7);
  for (uint8_t &byte : value)
    byte = static_cast<uint8_t>(1 + random() % 126);
  std::vector<int64_t> strides = {heads * seqK * dim, dim, seqK * dim, 1};
  std::vector<int64_t> sizes = {batch, seqK, heads, dim};
  std::vector<int64_t> out = vtSizes(sizes);
  ASSERT_EQ(out[3], 32);
  std::vector<uint8_t> vt(out[0] * out[1] * out[2] * out[3], 0xff);
  std::string error;
  ASSERT_TRUE(succeeds(prepareFp8Value(value.data(), value.size(), sizes,
                                       strides, vt.data(), vt.size()),
                       error))
      << error;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < dim; ++d)
        for (int64_t p = 0; p < out[3]; ++p) {
          int64_t key = vtKeyAt(p);
          uint8_t want =
              key < seqK ? value[b * strides[0] + key * strides[1] +
                                 h * strides[2] + d * strides[3]]
                         : 0;
          ASSERT_EQ(vt[((b * heads + h) * dim + d) * out[3] + p], want)
              << b << " " << h << " " << d << " " << p;
        }
  // Keys 19..31 are padding: the positions that hold them are +0.0 bytes
  // (position 6 of the second group holds key 16 + 10 = 26).
  EXPECT_EQ(vt[16 + 6], 0);
  EXPECT_NE(vt[16 + 0], 0); // key 16
}

TEST(Fp8Value, BadArgumentsAreRefusedWithoutWriting) {
  std::vector<uint8_t> value(2 * 16 * 1 * 4, 1), vt(2 * 4 * 16, 0xee);
  std::vector<int64_t> sizes = {2, 16, 1, 4}, dense = {64, 4, 4, 1};
  std::string error;
  EXPECT_TRUE(succeeds(prepareFp8Value(value.data(), value.size(), sizes,
                                       dense, vt.data(), vt.size()),
                       error))
      << error;
  std::fill(vt.begin(), vt.end(), 0xee);
  // A stride that reaches past the value's bytes.
  EXPECT_FALSE(succeeds(prepareFp8Value(value.data(), value.size(), sizes,
                                        {65, 4, 4, 1}, vt.data(), vt.size()),
                        error));
  EXPECT_NE(error.find("outside the 128 bytes"), std::string::npos) << error;
  // A negative stride that reaches before them.
  EXPECT_FALSE(succeeds(prepareFp8Value(value.data(), value.size(), sizes,
                                        {64, -4, 4, 1}, vt.data(), vt.size()),
                        error));
  // A vt buffer too small, a zero size, the wrong rank.
  EXPECT_FALSE(succeeds(prepareFp8Value(value.data(), value.size(), sizes,
                                        dense, vt.data(), vt.size() - 1),
                        error));
  EXPECT_NE(error.find("needs 128 bytes"), std::string::npos) << error;
  EXPECT_FALSE(succeeds(prepareFp8Value(value.data(), value.size(),
                                        {2, 0, 1, 4}, dense, vt.data(),
                                        vt.size()),
                        error));
  EXPECT_FALSE(succeeds(prepareFp8Value(value.data(), value.size(), {2, 16, 4},
                                        {64, 4, 1}, vt.data(), vt.size()),
                        error));
  EXPECT_TRUE(std::all_of(vt.begin(), vt.end(),
                          [](uint8_t byte) { return byte == 0xee; }));
  // A vt buffer over V's own bytes: refused before anything is written.
  std::vector<uint8_t> shared(2 * value.size(), 0);
  std::copy(value.begin(), value.end(), shared.begin());
  EXPECT_FALSE(succeeds(prepareFp8Value(shared.data(), value.size(), sizes,
                                        dense, shared.data() + 64, 128),
                        error));
  EXPECT_NE(error.find("overlap the bytes of v"), std::string::npos) << error;
  EXPECT_TRUE(std::equal(value.begin(), value.end(), shared.begin()));
  // Null pointers, named; reaches past 64 bits, in full.
  EXPECT_FALSE(succeeds(prepareFp8Value(value.data(), value.size(), sizes,
                                        dense, nullptr, vt.size()),
                        error));
  EXPECT_NE(error.find("vt: a null pointer"), std::string::npos) << error;
  int64_t big = (int64_t(1) << 31) - 1;
  EXPECT_FALSE(succeeds(prepareFp8Value(value.data(), ~size_t(0),
                                        {big, big, big, big}, {0, 0, 0, 0},
                                        vt.data(), ~size_t(0)),
                        error));
  EXPECT_NE(error.find("needs 21267647902848093037446844420041211904 bytes"),
            std::string::npos)
      << error;
}

TEST(Fp8Manifest, RoundTripsAndDeclaresItsLayout) {
  Manifest m = fp8Manifest();
  std::string text = writeManifest(m), error;
  EXPECT_NE(text.find(R"("dtype": "e4m3", "out_dtype": "bf16")"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("descales": {"q": 0, "k": 1, "v": 2})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("tensor": "v", "dtype": "e4m3", "layout": "vt")"),
            std::string::npos)
      << text;
  Manifest read;
  ASSERT_TRUE(succeeds(parseManifest(text), read, error)) << error;
  EXPECT_EQ(writeManifest(read), text);
  EXPECT_EQ(read.outDtype, "bf16");
  EXPECT_EQ(read.vDescale, 2);
  EXPECT_TRUE(read.valueTransposed());
  EXPECT_TRUE(succeeds(checkInterface(read), error)) << error;
  std::string contract = kernelContract(read);
  EXPECT_NE(contract.find("attention.out_dtype=bf16\n"), std::string::npos);
  EXPECT_NE(contract.find("attention.descales.v=2\n"), std::string::npos);
  EXPECT_NE(contract.find("tensor_maps[2].layout=vt\n"), std::string::npos);
  // A manifest from before FP8 (no out_dtype): O in the inputs' type.
  Manifest old;
  std::string bf16 = edited(edited(edited(text, R"("dtype": "e4m3", "out_dtype": "bf16")",
                                          R"("dtype": "bf16")"),
                                   R"(, "descales": {"q": 0, "k": 1, "v": 2})", ""),
                            R"("dtype": "e4m3", "layout": "vt")", R"("dtype": "bf16")");
  ASSERT_TRUE(succeeds(parseManifest(bf16), old, error)) << error;
  EXPECT_EQ(old.oDtype(), "bf16");
  EXPECT_EQ(kernelContract(old).find("out_dtype"), std::string::npos);
}

TEST(Fp8Manifest, InconsistentEntriesAreRefused) {
  std::string text = writeManifest(fp8Manifest()), error;
  Manifest m;
  struct Case {
    std::string from, to, says;
  } cases[] = {
      {R"("tensor": "q", "dtype": "e4m3")",
       R"("tensor": "q", "dtype": "e4m3", "layout": "vt")",
       "only an e4m3 V takes, on \"q\""},
      {R"("tensor": "v", "dtype": "e4m3", "layout": "vt")",
       R"("tensor": "v", "dtype": "e4m3", "layout": "tv")", "unknown layout"},
      {R"(, "descales": {"q": 0, "k": 1, "v": 2})", "",
       "e4m3 inputs without their descale tables"},
      {R"("descales": {"q": 0, "k": 1, "v": 2})",
       R"("descales": {"q": 0, "k": 1, "v": 1})", "v descale table"},
      {R"("descales": {"q": 0, "k": 1, "v": 2})",
       R"("descales": {"q": 0, "k": 1})", "\"v\""},
      {R"("descales": {"q": 0, "k": 1, "v": 2})",
       R"("descales": {"q": 0, "k": 1, "v": 2, "o": 2})",
       "has \"o\"; its keys are q, k and v"},
      {R"("out_dtype": "bf16")", R"("out_dtype": "e4m3")",
       "e4m3 inputs and O of e4m3"},
      {R"("out_dtype": "bf16", )", "", "e4m3 inputs and O of e4m3"},
      {R"("out_dtype": "bf16")", R"("out_dtype": "f32")",
       "out_dtype \"f32\" that is not fp16 or bf16"},
      {R"("dtype": "e4m3", "out_dtype")", R"("dtype": "e5m2", "out_dtype")",
       "unknown dtype \"e5m2\""},
      {R"("dtype": "f32", "shape": [-1, 2])", R"("dtype": "i32", "shape": [-1, 2])",
       "q descale table"},
      {R"("dtype": "f32", "shape": [-1, 2])", R"("dtype": "f32", "shape": [-1, 3])",
       "q descale table"},
  };
  for (const Case &c : cases) {
    EXPECT_FALSE(succeeds(parseManifest(edited(text, c.from, c.to)), m, error))
        << c.to;
    EXPECT_NE(error.find(c.says), std::string::npos) << c.to << ": " << error;
  }
  // Descales on a 16-bit kernel, another output type for 16-bit inputs.
  std::string bf16 = edited(edited(text, R"("dtype": "e4m3", "out_dtype": "bf16")",
                                   R"("dtype": "bf16", "out_dtype": "bf16")"),
                            R"("dtype": "e4m3", "layout": "vt")", R"("dtype": "bf16")");
  EXPECT_FALSE(succeeds(parseManifest(bf16), m, error));
  EXPECT_NE(error.find("descale tables for bf16"), std::string::npos) << error;
  EXPECT_FALSE(succeeds(
      parseManifest(edited(edited(bf16, R"("out_dtype": "bf16")",
                                  R"("out_dtype": "fp16")"),
                           R"(, "descales": {"q": 0, "k": 1, "v": 2})", "")),
      m, error));
  EXPECT_NE(error.find("only e4m3 inputs give O another type"),
            std::string::npos)
      << error;
  // V's map must read V transposed where it says so: a vt map whose dims
  // are the untransposed tensor's.
  Manifest wrong = fp8Manifest();
  wrong.tensorMaps[2].dims = {"seq_k", "2", "128", "batch"};
  EXPECT_FALSE(succeeds(checkInterface(wrong), error));
  EXPECT_NE(error.find("seq_k_padded"), std::string::npos) << error;
}

TEST(Fp8Launch, MapsAreBytesAndVIsTransposed) {
  Manifest m = fp8Manifest();
  const int64_t batch = 2, seqQ = 77, seqK = 200, padded = 208;
  Tensor q{0x10000, "e4m3", {batch, seqQ, 4, 128}, {seqQ * 512, 512, 128, 1}};
  Tensor k{0x100000, "e4m3", {batch, seqK, 2, 128}, {seqK * 256, 256, 128, 1}};
  Tensor v{0x200000, "e4m3", {batch, 2, 128, padded},
           {256 * padded, 128 * padded, padded, 1}};
  Tensor o{0x400000, "bf16", {batch, seqQ, 4, 128}, {seqQ * 512, 512, 128, 1}};
  Shapes shapes;
  std::string error;
  ASSERT_TRUE(succeeds(checkTensors(m, q, k, v, o, nullptr), shapes, error))
      << error;
  EXPECT_EQ(shapes.seqK, seqK);
  // V as the user holds it, not prepared: the message says what to do.
  Tensor untransposed{0x200000, "e4m3", {batch, seqK, 2, 128},
                      {seqK * 256, 256, 128, 1}};
  EXPECT_FALSE(
      succeeds(checkTensors(m, q, k, untransposed, o, nullptr), shapes, error));
  EXPECT_NE(error.find("prepareFp8Value"), std::string::npos) << error;
  // O in the inputs' type, V's keys strided.
  Tensor fp8Out = o;
  fp8Out.dtype = "e4m3";
  EXPECT_FALSE(succeeds(checkTensors(m, q, k, v, fp8Out, nullptr), shapes, error));
  EXPECT_NE(error.find("o: dtype e4m3, the kernel takes bf16"),
            std::string::npos)
      << error;
  Tensor strided = v;
  strided.strides[3] = 2;
  EXPECT_FALSE(
      succeeds(checkTensors(m, q, k, strided, o, nullptr), shapes, error));
  EXPECT_NE(error.find("the keys must be contiguous"), std::string::npos)
      << error;
  // One-byte strides must still be multiples of 16 bytes: a head stride
  // of 120 bytes is not.
  Tensor odd = q;
  odd.strides = {seqQ * 4 * 136, 4 * 136, 120, 1};
  EXPECT_FALSE(succeeds(checkTensors(m, odd, k, v, o, nullptr), shapes, error));
  EXPECT_NE(error.find("multiple of 16 bytes"), std::string::npos) << error;

  // The descale tables: [batch, kv_heads] f32 each.
  std::vector<Tensor> extras = {{0x800000, "f32", {batch, 2}, {}},
                                {0x800100, "f32", {batch, 2}, {}},
                                {0x800200, "f32", {batch, 2}, {}}};
  EXPECT_TRUE(succeeds(checkExtras(m, extras, {&o}, &shapes), error)) << error;
  std::vector<Tensor> wrongBatch = extras;
  wrongBatch[1].sizes = {1, 2};
  EXPECT_FALSE(succeeds(checkExtras(m, wrongBatch, {&o}, &shapes), error));
  EXPECT_NE(error.find("extra1: a descale table must be [batch, kv_heads] = [2, 2]"),
            std::string::npos)
      << error;
  EXPECT_NE(describeExtras(m).find("extra2: V's descale table"),
            std::string::npos);

  // The plan: UINT8 maps; V's walks the keys first, its strides in bytes.
  Buffers buffers;
  buffers.q = q.address;
  buffers.k = k.address;
  buffers.v = v.address;
  buffers.o = o.address;
  for (const Tensor &extra : extras)
    buffers.extras.push_back({extra.address, extra.sizes});
  std::vector<std::pair<std::string, TensorMapSpec>> encoded;
  LaunchPlan plan;
  ASSERT_TRUE(succeeds(planLaunch(m, shapes, buffers,
                                  [&](const TensorMapSpec &spec, uint8_t *) {
                                    return llvm::Error::success();
                                  }),
                       plan, error))
      << error;
  ASSERT_EQ(plan.tensorMaps.size(), 4u);
  const TensorMapSpec &qMap = plan.tensorMaps[0].second;
  EXPECT_EQ(qMap.dataType, TensorMapDataType::UInt8);
  EXPECT_EQ(qMap.globalStrides[0], 128u);
  EXPECT_EQ(qMap.globalStrides[1], 512u);
  const TensorMapSpec &vMap = plan.tensorMaps[2].second;
  EXPECT_EQ(vMap.dataType, TensorMapDataType::UInt8);
  uint64_t dims[4] = {padded, 2, 128, batch};
  uint64_t strides[3] = {128 * padded, padded, 256 * padded};
  for (int d = 0; d < 4; ++d)
    EXPECT_EQ(vMap.globalDims[d], dims[d]) << d;
  for (int d = 0; d < 3; ++d)
    EXPECT_EQ(vMap.globalStrides[d], strides[d]) << d;
  EXPECT_EQ(vMap.boxDims[0], 128u);
  EXPECT_EQ(vMap.boxDims[2], 128u);
  const TensorMapSpec &oMap = plan.tensorMaps[3].second;
  EXPECT_EQ(oMap.dataType, TensorMapDataType::BFloat16);
  EXPECT_EQ(oMap.globalStrides[0], 256u);
  // A V of another layout (heads and dims swapped in memory): its own
  // strides reach the map through the axes.
  buffers.vStrides = {256 * padded, padded, 2 * padded, 1};
  ASSERT_TRUE(succeeds(planLaunch(m, shapes, buffers,
                                  [&](const TensorMapSpec &, uint8_t *) {
                                    return llvm::Error::success();
                                  }),
                       plan, error))
      << error;
  EXPECT_EQ(plan.tensorMaps[2].second.globalStrides[0], uint64_t(padded));
  EXPECT_EQ(plan.tensorMaps[2].second.globalStrides[1], uint64_t(2 * padded));
}

} // namespace
