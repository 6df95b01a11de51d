//===- EmulatorTest.cpp - fa4-emu's semantics on small kernels ------------===//
//
// Hand-written PTX whose results are worked out from the PTX ISA: SIMT
// divergence and reconvergence, packed conversions, and the reports for
// divergent collectives, deadlocks, bad addresses and TMEM leaks.
//
//===----------------------------------------------------------------------===//

#include "fa4/Emu/Emulator.h"
#include "fa4/Support/Float8.h"

#include "Succeeds.h"

#include "gtest/gtest.h"

#include <cstring>

using namespace mlir::fa4::emu;
using mlir::fa4::Float8;
using mlir::fa4::float8FromDouble;
using mlir::fa4::float8ToFloat;
using fa4test::succeeds;

namespace {

std::string kernel(const std::string &body, const std::string &regs = "") {
  return ".version 8.8\n.target sm_100a\n.address_size 64\n"
         ".extern .shared .align 1024 .b8 smem[];\n"
         ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n"
         "\t.reg .pred %p<8>;\n\t.reg .b32 %r<32>;\n\t.reg .b64 %rd<16>;\n" +
         regs + "\tld.param.u64 %rd1, [k_param_0];\n"
                "\tmov.u32 %r1, %tid.x;\n"
                "\tmul.wide.u32 %rd2, %r1, 4;\n"
                "\tadd.s64 %rd3, %rd1, %rd2;\n" +
         body + "}\n";
}

struct Outcome {
  LaunchReport report;
  std::vector<uint32_t> out;
};

Outcome launchKernel(const std::string &ptx, uint32_t threads, uint32_t smem = 0,
                     uint32_t wordsPerThread = 1) {
  Outcome run;
  std::string error;
  std::shared_ptr<const Program> program;
  EXPECT_TRUE(succeeds(parsePtx(ptx), program, error)) << error;
  if (!program)
    return run;
  Device device;
  uint32_t words = threads * wordsPerThread;
  uint64_t out = device.allocate(words * 4);
  LaunchConfig config;
  config.kernel = "k";
  config.block[0] = threads;
  config.dynamicSmemBytes = smem;
  std::vector<uint8_t> pointer(8);
  std::memcpy(pointer.data(), &out, 8);
  config.arguments = {pointer};
  EXPECT_TRUE(succeeds(launch(*program, device, config), run.report, error))
      << error;
  run.out.resize(words);
  std::memcpy(run.out.data(), device.host(out, words * 4), words * 4);
  return run;
}

TEST(Emulator, DivergentPathsReconvergeBeforeACollective) {
  // Odd lanes add 100, even lanes 200; after the join every lane votes, so
  // the ballot must hold the whole warp.
  Outcome run = launchKernel(kernel("\tand.b32 %r2, %r1, 1;\n"
                                "\tsetp.eq.u32 %p1, %r2, 1;\n"
                                "\t@%p1 bra ODD;\n"
                                "\tadd.s32 %r3, %r1, 200;\n"
                                "\tbra.uni JOIN;\n"
                                "ODD:\n"
                                "\tadd.s32 %r3, %r1, 100;\n"
                                "JOIN:\n"
                                "\tvote.sync.ballot.b32 %r4, %p1, -1;\n"
                                "\tadd.s32 %r5, %r3, %r4;\n"
                                "\tst.global.b32 [%rd3], %r5;\n"
                                "\tret;\n"),
                         64);
  ASSERT_TRUE(run.report.clean()) << (run.report.errors.empty() ? "" : run.report.errors[0]);
  for (uint32_t t = 0; t < 64; ++t)
    EXPECT_EQ(run.out[t], t + (t % 2 ? 100u : 200u) + 0xaaaaaaaau) << t;
}

TEST(Emulator, PackedConversionPutsTheFirstSourceHigh) {
  // cvt.rn.f16x2.f32 d, a, b: a's half in the upper 16 bits.
  Outcome run = launchKernel(kernel("\tcvt.rn.f16x2.f32 %r2, 0f3F800000, 0f40000000;\n"
                                "\tst.global.b32 [%rd3], %r2;\n"
                                "\tret;\n"),
                         32);
  ASSERT_TRUE(run.report.clean());
  EXPECT_EQ(run.out[0], 0x3c004000u);
}

TEST(Emulator, DirectedRoundingAndSaturation) {
  // 1 + 2^-30 rounds to 1 toward -inf and to the next float toward +inf;
  // 1.5·2^23 added to -2.25 toward -inf leaves floor(-2.25) = -3 in the low
  // mantissa bits (the softmax's floor); fma.rm.f32x2 rounds both halves;
  // .sat clamps to [0, 1] and sends NaN to 0.
  const char *body =
      "\tadd.rm.f32 %r2, 0f3F800000, 0f30800000;\n"
      "\tadd.rp.f32 %r3, 0f3F800000, 0f30800000;\n"
      "\tadd.rm.ftz.f32 %r4, 0fC0100000, 0f4B400000;\n"
      "\tmov.b64 %rd4, {0fC0100000, 0f3F400000};\n"
      "\tmov.b64 %rd5, {0f3F800000, 0f3F800000};\n"
      "\tmov.b64 %rd6, {0f4B400000, 0f4B400000};\n"
      "\tfma.rm.ftz.f32x2 %rd7, %rd4, %rd5, %rd6;\n"
      "\tmov.b64 {%r5, %r6}, %rd7;\n"
      "\tfma.rn.sat.f32 %r7, 0f40000000, 0f40000000, 0f00000000;\n"
      "\tfma.rn.sat.f32 %r8, 0fFF800000, 0f3F800000, 0f00000000;\n"
      "\tsetp.eq.u32 %p1, %r1, 0;\n\tselp.b32 %r9, %r2, 0, %p1;\n"
      "\tsetp.eq.u32 %p1, %r1, 1;\n\tselp.b32 %r9, %r3, %r9, %p1;\n"
      "\tsetp.eq.u32 %p1, %r1, 2;\n\tselp.b32 %r9, %r4, %r9, %p1;\n"
      "\tsetp.eq.u32 %p1, %r1, 3;\n\tselp.b32 %r9, %r5, %r9, %p1;\n"
      "\tsetp.eq.u32 %p1, %r1, 4;\n\tselp.b32 %r9, %r6, %r9, %p1;\n"
      "\tsetp.eq.u32 %p1, %r1, 5;\n\tselp.b32 %r9, %r7, %r9, %p1;\n"
      "\tsetp.eq.u32 %p1, %r1, 6;\n\tselp.b32 %r9, %r8, %r9, %p1;\n"
      "\tst.global.b32 [%rd3], %r9;\n"
      "\tret;\n";
  Outcome run = launchKernel(kernel(body), 32);
  ASSERT_TRUE(run.report.clean()) << (run.report.errors.empty() ? "" : run.report.errors[0]);
  EXPECT_EQ(run.out[0], 0x3f800000u);
  EXPECT_EQ(run.out[1], 0x3f800001u);
  EXPECT_EQ(run.out[2], 0x4b400000u - 3u);
  EXPECT_EQ(run.out[3], 0x4b400000u - 3u);
  EXPECT_EQ(run.out[4], 0x4b400000u);
  EXPECT_EQ(run.out[5], 0x3f800000u);
  EXPECT_EQ(run.out[6], 0x00000000u);
}

TEST(Emulator, TestpClassifiesFloats) {
  // testp.{infinite,finite,number,notanumber,normal,subnormal}: LLVM's frem
  // expansion tests its divisor for infinity. Lane i reports check i.
  const char *checks[] = {
      "testp.infinite.f32 %p1, 0f7F800000",   "testp.finite.f32 %p1, 0f7F800000",
      "testp.number.f32 %p1, 0f7FC00000",     "testp.notanumber.f32 %p1, 0f7FC00000",
      "testp.normal.f32 %p1, 0f3F800000",     "testp.subnormal.f32 %p1, 0f00000001",
      "testp.normal.f32 %p1, 0f00000001",     "testp.finite.f64 %p1, 0d3FF0000000000000"};
  std::string body = "\tmov.b32 %r9, 7;\n";
  for (int i = 0; i < 8; ++i)
    body += std::string("\t") + checks[i] + ";\n\tselp.b32 %r2, 1, 0, %p1;\n" +
            "\tsetp.eq.u32 %p2, %r1, " + std::to_string(i) +
            ";\n\tselp.b32 %r9, %r2, %r9, %p2;\n";
  body += "\tst.global.b32 [%rd3], %r9;\n\tret;\n";
  Outcome run = launchKernel(kernel(body), 32);
  ASSERT_TRUE(run.report.clean()) << (run.report.errors.empty() ? "" : run.report.errors[0]);
  uint32_t want[] = {1, 0, 0, 1, 1, 1, 0, 1};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(run.out[i], want[i]) << checks[i];
}

TEST(Emulator, CollectiveInADivergentRegionIsReported) {
  Outcome run = launchKernel(kernel("\tsetp.lt.u32 %p1, %r1, 16;\n"
                                "\t@%p1 bra SKIP;\n"
                                "\tvote.sync.any.pred %p2, %p1, -1;\n"
                                "SKIP:\n"
                                "\tret;\n"),
                         32);
  ASSERT_EQ(run.report.errorCount, 1);
  EXPECT_NE(run.report.errors[0].find("reached by a divergent warp"), std::string::npos)
      << run.report.errors[0];
}

TEST(Emulator, WaitThatCanNeverCompleteIsADeadlock) {
  // Two arrivals expected, one made; every thread then waits on phase 0.
  Outcome run = launchKernel(
      kernel("\tmov.b32 %r2, smem;\n"
             "\tsetp.ne.u32 %p1, %r1, 0;\n"
             "\t@%p1 bra WAIT;\n"
             "\tmbarrier.init.shared.b64 [%r2], 2;\n"
             "\tmbarrier.arrive.shared.b64 %rd4, [%r2];\n"
             "WAIT:\n"
             "\tbar.sync 0;\n"
             "LOOP:\n"
             "\tmbarrier.try_wait.parity.shared.b64 %p2, [%r2], 0;\n"
             "\t@!%p2 bra LOOP;\n"
             "\tret;\n"),
      64, 1024);
  ASSERT_GE(run.report.deadlock.size(), 3u);
  EXPECT_NE(run.report.deadlock[1].find("for the phase of parity 0"), std::string::npos)
      << run.report.deadlock[1];
  EXPECT_NE(run.report.deadlock[1].find("1 of 2 arrivals pending"), std::string::npos)
      << run.report.deadlock[1];
}

TEST(Emulator, OutOfBoundsStoreNamesThreadAndAddress) {
  Outcome run = launchKernel(kernel("\tst.global.b32 [%rd3+256], %r1;\n"
                                "\tret;\n"),
                         64);
  ASSERT_GE(run.report.errorCount, 1);
  EXPECT_NE(run.report.errors[0].find("is outside every allocation"), std::string::npos)
      << run.report.errors[0];
  EXPECT_NE(run.report.errors[0].find("st.global.b32"), std::string::npos);
}

TEST(Emulator, FloatReductionsAddEveryThreadsValues) {
  // 64 threads add 0.5 to word 0 (scalar) and 1.0, 2.0 to words 2 and 3
  // (a vector pair, 8-byte aligned); word 1 stays 0.
  Outcome run = launchKernel(kernel("\tld.param.u64 %rd4, [k_param_0];\n"
                                    "\tmov.f32 %f1, 0f3F000000;\n"
                                    "\tred.global.add.f32 [%rd4], %f1;\n"
                                    "\tmov.f32 %f2, 0f3F800000;\n"
                                    "\tmov.f32 %f3, 0f40000000;\n"
                                    "\tred.relaxed.gpu.global.add.v2.f32 "
                                    "[%rd4+8], {%f2, %f3};\n"
                                    "\tret;\n",
                                    "\t.reg .f32 %f<4>;\n"),
                             64);
  ASSERT_TRUE(run.report.clean())
      << (run.report.errors.empty() ? "" : run.report.errors[0]);
  float words[4];
  std::memcpy(words, run.out.data(), sizeof(words));
  EXPECT_EQ(words[0], 32.0f);
  EXPECT_EQ(words[1], 0.0f);
  EXPECT_EQ(words[2], 64.0f);
  EXPECT_EQ(words[3], 128.0f);
}

TEST(Emulator, VectorReductionMustBeAligned) {
  Outcome run = launchKernel(kernel("\tld.param.u64 %rd4, [k_param_0];\n"
                                    "\tmov.f32 %f1, 0f3F000000;\n"
                                    "\tred.global.add.v2.f32 [%rd4+4], "
                                    "{%f1, %f1};\n"
                                    "\tret;\n",
                                    "\t.reg .f32 %f<4>;\n"),
                             32);
  ASSERT_GE(run.report.errorCount, 1);
  EXPECT_NE(run.report.errors[0].find("misaligned 8-byte access"),
            std::string::npos)
      << run.report.errors[0];
}

/// A kernel in which lane l's register i holds the halves l·16 + 2i and
/// l·16 + 2i + 1, stmatrix.x4 stores them (`trans` or not) to matrices of
/// 8 rows of 16 bytes at smem + 128·i + 16·r, and each lane copies 16 bytes
/// of them (at 16·lane) out.
std::string stmatrixKernel(bool transpose) {
  std::string body =
      "\tmov.b32 %r2, smem;\n"
      // The row address lane l gives: matrix l / 8, row l mod 8.
      "\tshr.u32 %r3, %r1, 3;\n"
      "\tand.b32 %r4, %r1, 7;\n"
      "\tshl.b32 %r3, %r3, 7;\n"
      "\tshl.b32 %r4, %r4, 4;\n"
      "\tadd.u32 %r5, %r2, %r3;\n"
      "\tadd.u32 %r5, %r5, %r4;\n"
      // Register i: (l·16 + 2i + 1) << 16 | (l·16 + 2i).
      "\tshl.b32 %r6, %r1, 4;\n";
  for (int i = 0; i < 4; ++i)
    body += "\tadd.u32 %r" + std::to_string(10 + i) + ", %r6, " +
            std::to_string(2 * i) + ";\n"
            "\tadd.u32 %r" + std::to_string(14 + i) + ", %r6, " +
            std::to_string(2 * i + 1) + ";\n"
            "\tshl.b32 %r" + std::to_string(14 + i) + ", %r" +
            std::to_string(14 + i) + ", 16;\n"
            "\tor.b32 %r" + std::to_string(20 + i) + ", %r" +
            std::to_string(10 + i) + ", %r" + std::to_string(14 + i) + ";\n";
  body += std::string("\tstmatrix.sync.aligned.m8n8.x4") +
          (transpose ? ".trans" : "") +
          ".shared.b16 [%r5], {%r20, %r21, %r22, %r23};\n"
          "\tbar.sync 0;\n"
          "\tshl.b32 %r7, %r1, 4;\n"
          "\tadd.u32 %r7, %r2, %r7;\n"
          "\tld.shared.v4.b32 {%r24, %r25, %r26, %r27}, [%r7];\n"
          "\tmul.wide.u32 %rd5, %r1, 16;\n"
          "\tadd.s64 %rd6, %rd1, %rd5;\n"
          "\tst.global.v4.b32 [%rd6], {%r24, %r25, %r26, %r27};\n"
          "\tret;\n";
  return body;
}

TEST(Emulator, StmatrixStoresEachLanesFragmentAtItsRow) {
  for (bool transpose : {false, true}) {
    Outcome run = launchKernel(kernel(stmatrixKernel(transpose)), 32, 1024, 4);
    ASSERT_TRUE(run.report.clean())
        << (run.report.errors.empty() ? "" : run.report.errors[0]);
    const uint8_t *bytes = reinterpret_cast<const uint8_t *>(run.out.data());
    for (int i = 0; i < 4; ++i)
      for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c) {
          uint16_t got;
          std::memcpy(&got, bytes + 128 * i + 16 * r + 2 * c, 2);
          // The fragment's element (row, col) is lane 4·row + col / 2's half
          // col mod 2; .trans puts element (row, col) at (col, row).
          int row = transpose ? c : r, col = transpose ? r : c;
          int lane = 4 * row + col / 2;
          EXPECT_EQ(got, lane * 16 + 2 * i + col % 2)
              << (transpose ? "trans " : "") << "matrix " << i << " row " << r
              << " column " << c;
        }
  }
}

TEST(Emulator, TensorMemoryLeakIsReported) {
  Outcome run = launchKernel(kernel("\tmov.b32 %r2, smem;\n"
                                "\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 "
                                "[%r2], 64;\n"
                                "\tret;\n"),
                         32, 1024);
  ASSERT_EQ(run.report.barrierMisuseCount, 1);
  EXPECT_NE(run.report.barrierMisuse[0].find("exited holding 64 TMEM columns"),
            std::string::npos);
}

TEST(Emulator, TensorMapEncodingFollowsTheDriversRules) {
  mlir::fa4::runtime::TensorMapSpec spec;
  spec.rank = 2;
  spec.globalAddress = 0x100000000ull;
  spec.globalDims[0] = 128;
  spec.globalDims[1] = 64;
  spec.globalStrides[0] = 256;
  spec.boxDims[0] = 64;
  spec.boxDims[1] = 32;
  spec.swizzle = mlir::fa4::runtime::TensorMapSwizzle::Bytes128;
  uint8_t bytes[128];
  std::string error;
  ASSERT_TRUE(succeeds(encodeTensorMap(spec, bytes), error)) << error;
  mlir::fa4::runtime::TensorMapSpec decoded;
  ASSERT_TRUE(succeeds(decodeTensorMap(bytes), decoded, error)) << error;
  EXPECT_EQ(decoded.boxDims[0], 64u);
  EXPECT_EQ(decoded.globalStrides[0], 256u);
  // A 128-element f16 inner box is 256 bytes: wider than the 128B swizzle.
  spec.boxDims[0] = 128;
  EXPECT_FALSE(succeeds(encodeTensorMap(spec, bytes), error));
  EXPECT_NE(error.find("more than the 128-byte swizzle span"), std::string::npos);
  spec.boxDims[0] = 64;
  spec.globalStrides[0] = 200;
  EXPECT_FALSE(succeeds(encodeTensorMap(spec, bytes), error));
  EXPECT_NE(error.find("a multiple of 16"), std::string::npos);
  // 8-bit floats travel as UINT8 (as CuTe's maps for e4m3 and e5m2): a
  // 128-byte swizzle row is 128 of them, 144 are too many, 8 too few bytes.
  spec.dataType = mlir::fa4::runtime::TensorMapDataType::UInt8;
  spec.globalStrides[0] = 256;
  spec.boxDims[0] = 128;
  EXPECT_TRUE(succeeds(encodeTensorMap(spec, bytes), error)) << error;
  ASSERT_TRUE(succeeds(decodeTensorMap(bytes), decoded, error)) << error;
  EXPECT_EQ(decoded.dataType, mlir::fa4::runtime::TensorMapDataType::UInt8);
  EXPECT_EQ(decoded.boxDims[0], 128u);
  spec.boxDims[0] = 144;
  EXPECT_FALSE(succeeds(encodeTensorMap(spec, bytes), error));
  EXPECT_NE(error.find("144 bytes, more than the 128-byte swizzle span"),
            std::string::npos)
      << error;
  spec.boxDims[0] = 8;
  EXPECT_FALSE(succeeds(encodeTensorMap(spec, bytes), error));
  EXPECT_NE(error.find("8 bytes (a multiple of 16)"), std::string::npos)
      << error;
}

} // namespace

// The forms nvcc's PTX brings (test/Emu/cute-gemm.test runs such a kernel):
// pointer parameters, sinks, bar.warp.sync, .maxntid, module variables.
namespace {

const char *kHead = ".version 9.0\n.target sm_100a\n.address_size 64\n";

/// Launches entry k(u32 a, u64 .ptr b) with `threads` threads; b points to
/// one u32 per thread.
struct PtrRun {
  LaunchReport report;
  std::vector<uint32_t> out;
  std::string error;
  bool launched = false;
};
PtrRun runPointerKernel(const std::string &ptx, uint32_t threads) {
  PtrRun run;
  std::shared_ptr<const Program> program;
  if (!succeeds(parsePtx(ptx), program, run.error))
    return run;
  Device device;
  uint64_t out = device.allocate(threads * 4);
  LaunchConfig config;
  config.kernel = "k";
  config.block[0] = threads;
  std::vector<uint8_t> a(4, 0), b(8);
  a[0] = 7;
  std::memcpy(b.data(), &out, 8);
  config.arguments = {a, b};
  run.launched =
      succeeds(launch(*program, device, config), run.report, run.error);
  run.out.resize(threads);
  std::memcpy(run.out.data(), device.host(out, threads * 4), threads * 4);
  return run;
}
std::string pointerKernel(const std::string &body, const std::string &directives = "") {
  return std::string(kHead) +
         ".visible .entry k(\n\t.param .u32 k_param_0,\n"
         "\t.param .u64 .ptr .global .align 1 k_param_1\n)\n" + directives +
         "{\n\t.reg .pred %p<4>;\n\t.reg .b32 %r<16>;\n\t.reg .b64 %rd<8>;\n"
         "\tld.param.u32 %r1, [k_param_0];\n"
         "\tld.param.u64 %rd1, [k_param_1];\n"
         "\tmov.u32 %r2, %tid.x;\n"
         "\tmul.wide.u32 %rd2, %r2, 4;\n"
         "\tadd.s64 %rd3, %rd1, %rd2;\n" + body + "\tret;\n}\n";
}
} // namespace

TEST(EmulatorForms, PointerParameterAlignIsThePointees) {
  // `.ptr .align 1` is the pointee's alignment: the u64 parameter still
  // sits at offset 8, after the u32.
  PtrRun run = runPointerKernel(pointerKernel("\tst.global.u32 [%rd3], %r1;\n"), 32);
  ASSERT_TRUE(run.launched) << run.error;
  ASSERT_TRUE(run.report.clean()) << (run.report.errors.empty() ? "" : run.report.errors[0]);
  EXPECT_EQ(run.out[5], 7u);
}

TEST(EmulatorForms, ElectIntoTheSinkSetsOnlyThePredicate) {
  PtrRun run = runPointerKernel(pointerKernel("\telect.sync _|%p1, 0xffffffff;\n"
                                           "\tselp.u32 %r3, 1, 2, %p1;\n"
                                           "\tst.global.u32 [%rd3], %r3;\n"),
                             64);
  ASSERT_TRUE(run.launched) << run.error;
  ASSERT_TRUE(run.report.clean()) << (run.report.errors.empty() ? "" : run.report.errors[0]);
  for (uint32_t t = 0; t < 64; ++t)
    EXPECT_EQ(run.out[t], t % 32 == 0 ? 1u : 2u) << t;
}

TEST(EmulatorForms, BarWarpSyncOfTheLanesPresentPasses) {
  PtrRun run = runPointerKernel(pointerKernel("\tsetp.lt.u32 %p1, %r2, 16;\n"
                                           "\t@!%p1 bra DONE;\n"
                                           "\tbar.warp.sync 0xffff;\n"
                                           "\tst.global.u32 [%rd3], %r2;\n"
                                           "DONE:\n"
                                           "\tbar.warp.sync -1;\n"),
                             32);
  ASSERT_TRUE(run.launched) << run.error;
  ASSERT_TRUE(run.report.clean()) << (run.report.errors.empty() ? "" : run.report.errors[0]);
  EXPECT_EQ(run.out[15], 15u);
  EXPECT_EQ(run.out[16], 0u);
}

TEST(EmulatorForms, BarWarpSyncWithAMemberMissingIsReported) {
  PtrRun run = runPointerKernel(pointerKernel("\tsetp.lt.u32 %p1, %r2, 16;\n"
                                           "\t@!%p1 bra DONE;\n"
                                           "\tbar.warp.sync -1;\n"
                                           "DONE:\n"),
                             32);
  ASSERT_TRUE(run.launched) << run.error;
  ASSERT_EQ(run.report.errorCount, 1);
  EXPECT_NE(run.report.errors[0].find("reached by a divergent warp: lanes 0xffff0000"),
            std::string::npos)
      << run.report.errors[0];
}

TEST(EmulatorForms, MaxntidLimitsTheBlock) {
  std::string ptx = pointerKernel("", ".maxntid 32, 2, 1\n");
  PtrRun fits = runPointerKernel(ptx, 64);
  EXPECT_TRUE(fits.launched) << fits.error;
  PtrRun over = runPointerKernel(ptx, 96);
  EXPECT_FALSE(over.launched);
  EXPECT_EQ(over.error, "k allows at most .maxntid 64 threads, the launch gives 96");
}

TEST(EmulatorForms, ModuleGlobalIsDeclaredButNotAddressable) {
  std::string declared = std::string(kHead) +
                         ".global .align 4 .b32 counter;\n"
                         ".visible .global .align 8 .b8 table[16] = {1, 2};\n" +
                         pointerKernel("").substr(std::string(kHead).size());
  std::string error;
  std::shared_ptr<const Program> program;
  EXPECT_TRUE(succeeds(parsePtx(declared), program, error)) << error;
  std::string used = std::string(kHead) + ".global .align 4 .b32 counter;\n" +
                     pointerKernel("\tmov.u64 %rd4, counter;\n").substr(std::string(kHead).size());
  EXPECT_FALSE(succeeds(parsePtx(used), program, error));
  EXPECT_NE(error.find("'counter' is a module-scope .global variable, which fa4-emu "
                       "does not place in global memory"),
            std::string::npos)
      << error;
  EXPECT_FALSE(
      succeeds(parsePtx(std::string(kHead) + ".const .align 4 .b32 c;\n" +
                        pointerKernel("").substr(std::string(kHead).size())),
               program, error));
  EXPECT_NE(error.find("module-scope .const variables are not supported"), std::string::npos)
      << error;
}

//===----------------------------------------------------------------------===//
// sm_90a: named barriers, setmaxnreg's pool, wgmma
//===----------------------------------------------------------------------===//

namespace {

std::string hopperKernel(const std::string &body, const std::string &regs = "") {
  std::string text = kernel(body, "\t.reg .f32 %f<80>;\n" + regs);
  text.replace(text.find("sm_100a"), 7, "sm_90a");
  return text;
}

TEST(EmulatorHopper, NamedBarrierArriveLetsTheSyncingWarpsGo) {
  // Warps 0-1 arrive on barrier 1 and go on; warps 2-3 wait there until all
  // 128 threads have arrived.
  Outcome run = launchKernel(hopperKernel("\tsetp.lt.u32 %p1, %r1, 64;\n"
                                          "\t@%p1 bra ARRIVE;\n"
                                          "\tbar.sync 1, 128;\n"
                                          "\tst.global.b32 [%rd3], 7;\n"
                                          "\tret;\n"
                                          "ARRIVE:\n"
                                          "\tbar.arrive 1, 128;\n"
                                          "\tst.global.b32 [%rd3], 5;\n"
                                          "\tret;\n"),
                             128);
  ASSERT_TRUE(run.report.clean())
      << (run.report.errors.empty() ? "" : run.report.errors[0]);
  EXPECT_EQ(run.out[0], 5u);
  EXPECT_EQ(run.out[127], 7u);
}

TEST(EmulatorHopper, NamedBarrierShortOfItsCountIsADeadlock) {
  // Only warps 2-3 arrive at a barrier of 128 threads; the others exit.
  Outcome run = launchKernel(hopperKernel("\tsetp.lt.u32 %p1, %r1, 64;\n"
                                          "\t@%p1 bra DONE;\n"
                                          "\tbar.sync 3, 128;\n"
                                          "DONE:\n"
                                          "\tret;\n"),
                             128);
  ASSERT_GE(run.report.deadlock.size(), 2u);
  EXPECT_NE(run.report.deadlock[1].find("waits at named barrier 3 (64 of 128 "
                                        "threads arrived)"),
            std::string::npos)
      << run.report.deadlock[1];
}

TEST(EmulatorHopper, NamedBarrierCountsMustAgree) {
  // Warp 0 says 128 threads, the others 64: in any order, a 128 meets a 64
  // within one use of the barrier.
  Outcome run = launchKernel(hopperKernel("\tsetp.lt.u32 %p1, %r1, 32;\n"
                                          "\t@%p1 bra FIRST;\n"
                                          "\tbar.sync 2, 64;\n"
                                          "\tret;\n"
                                          "FIRST:\n"
                                          "\tbar.sync 2, 128;\n"
                                          "\tret;\n"),
                             128);
  ASSERT_EQ(run.report.errorCount, 1);
  EXPECT_NE(run.report.errors[0].find("earlier arrivals of this use expect"),
            std::string::npos)
      << run.report.errors[0];
}

TEST(EmulatorHopper, SetmaxnregIncWaitsForRegistersReleasedInTheCta) {
  // 256 threads at .maxnreg 128: the CTA holds 32K registers and its pool
  // starts empty. Warpgroup 0 gives back 128 x 88; warpgroup 1 asks for
  // 128 x 104 more, which the CTA never has, whatever the SM has free.
  std::string text = hopperKernel("\tsetp.lt.u32 %p1, %r1, 128;\n"
                                  "\t@%p1 bra GIVE;\n"
                                  "\tsetmaxnreg.inc.sync.aligned.u32 232;\n"
                                  "\tret;\n"
                                  "GIVE:\n"
                                  "\tsetmaxnreg.dec.sync.aligned.u32 40;\n"
                                  "\tret;\n");
  text.replace(text.find("{\n"), 2, ".maxnreg 128\n{\n");
  Outcome run = launchKernel(text, 256);
  ASSERT_GE(run.report.deadlock.size(), 2u);
  EXPECT_NE(run.report.deadlock[1].find("waits in setmaxnreg.inc"),
            std::string::npos)
      << run.report.deadlock[1];
}

/// A warpgroup's wgmma of A (RS: from registers, lane l's register j holding
/// 32·j + l in both halves) by B = ones (64 rows of 16 bf16 in shared
/// memory, no swizzle), then optional `between` and D stored by every
/// thread: 4 accumulators of N = 8 each, word 4·tid + i.
const char *kWgmmaSetup =
    // B: 16 ones (bf16 0x3f80) a row for n < 8, K-major with no swizzle:
    // 8 rows of 16 bytes, the second 8 columns LBO = 128 bytes on.
    "\tmov.u32 %r10, smem;\n"
    "\tsetp.lt.u32 %p2, %r1, 16;\n"
    "\tmul.lo.u32 %r11, %r1, 16;\n"
    "\tadd.u32 %r11, %r10, %r11;\n"
    "\tmov.b32 %r12, 0x3f803f80;\n"
    "\t@%p2 st.shared.v4.b32 [%r11], {%r12, %r12, %r12, %r12};\n"
    "\tfence.proxy.async.shared::cta;\n"
    "\tbar.sync 0;\n"
    // A's registers: 32·j + lane, as bf16, in both halves.
    "\tand.b32 %r13, %r1, 31;\n"
    "\tcvt.rn.f32.u32 %f1, %r13;\n"
    "\tadd.f32 %f2, %f1, 0f42000000;\n"
    "\tadd.f32 %f3, %f1, 0f42800000;\n"
    "\tadd.f32 %f4, %f1, 0f42C00000;\n"
    "\tcvt.rn.bf16x2.f32 %r20, %f1, %f1;\n"
    "\tcvt.rn.bf16x2.f32 %r21, %f2, %f2;\n"
    "\tcvt.rn.bf16x2.f32 %r22, %f3, %f3;\n"
    "\tcvt.rn.bf16x2.f32 %r23, %f4, %f4;\n"
    // The descriptor: start >> 4, LBO 128 >> 4, SBO 128 >> 4, no swizzle.
    "\tshr.u32 %r14, %r10, 4;\n"
    "\tcvt.u64.u32 %rd8, %r14;\n"
    "\tor.b64 %rd8, %rd8, 0x0000000800080000;\n"
    "\tmov.f32 %f10, 0f00000000;\n\tmov.f32 %f11, 0f00000000;\n"
    "\tmov.f32 %f12, 0f00000000;\n\tmov.f32 %f13, 0f00000000;\n"
    "\tsetp.ne.u32 %p3, %r13, 99;\n";
const char *kWgmmaStore =
    "\tmul.wide.u32 %rd9, %r1, 16;\n"
    "\tadd.s64 %rd9, %rd1, %rd9;\n"
    "\tst.global.v4.f32 [%rd9], {%f10, %f11, %f12, %f13};\n"
    "\tret;\n";
const char *kWgmmaIssue =
    "\twgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
    "{%f10, %f11, %f12, %f13}, {%r20, %r21, %r22, %r23}, %rd8, %p3, 1, 1, 0;\n"
    "\twgmma.commit_group.sync.aligned;\n";

} // namespace

TEST(EmulatorHopper, WgmmaRegisterFragmentsFollowTheIsaLayout) {
  std::string body = std::string(kWgmmaSetup) + "\twgmma.fence.sync.aligned;\n" +
                     kWgmmaIssue + "\twgmma.wait_group.sync.aligned 0;\n" +
                     kWgmmaStore;
  Outcome run = launchKernel(hopperKernel(body), 128, 4096, 4);
  ASSERT_TRUE(run.report.clean())
      << (run.report.errors.empty() ? "" : run.report.errors[0])
      << (run.report.hazards.empty() ? "" : run.report.hazards[0]);
  // A from the fragment layout: lane l, element i at row 16w + l/4 +
  // 8((i/2) mod 2), column 8(i/4) + 2(l mod 4) + i mod 2, value 32(i/2) + l.
  float a[64][16] = {};
  for (uint32_t t = 0; t < 128; ++t)
    for (uint32_t i = 0; i < 8; ++i)
      a[16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2)]
       [8 * (i / 4) + 2 * (t % 4) + i % 2] = 32.0f * (i / 2) + t % 32;
  // D = A·Bᵀ with B all ones: every column of row r is A's row sum.
  for (uint32_t t = 0; t < 128; ++t)
    for (uint32_t i = 0; i < 4; ++i) {
      uint32_t row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
      float expected = 0;
      for (uint32_t k = 0; k < 16; ++k)
        expected += a[row][k];
      float got;
      std::memcpy(&got, &run.out[4 * t + i], 4);
      EXPECT_EQ(got, expected) << "thread " << t << " element " << i;
    }
}

TEST(EmulatorHopper, ReadingTheAccumulatorBeforeTheWaitIsAHazard) {
  std::string body = std::string(kWgmmaSetup) + "\twgmma.fence.sync.aligned;\n" +
                     kWgmmaIssue + "\tadd.f32 %f20, %f10, %f11;\n" +
                     "\twgmma.wait_group.sync.aligned 0;\n" + kWgmmaStore;
  Outcome run = launchKernel(hopperKernel(body), 128, 4096, 4);
  ASSERT_GE(run.report.hazardCount, 1);
  EXPECT_NE(run.report.hazards[0].find("reads a register that an in-flight "
                                       "wgmma writes"),
            std::string::npos)
      << run.report.hazards[0];
}

TEST(EmulatorHopper, OverwritingTheAFragmentBeforeTheWaitIsAHazard) {
  std::string body = std::string(kWgmmaSetup) + "\twgmma.fence.sync.aligned;\n" +
                     kWgmmaIssue + "\tmov.b32 %r21, 0;\n" +
                     "\twgmma.wait_group.sync.aligned 0;\n" + kWgmmaStore;
  Outcome run = launchKernel(hopperKernel(body), 128, 4096, 4);
  ASSERT_GE(run.report.hazardCount, 1);
  EXPECT_NE(run.report.hazards[0].find("overwrites a register that an "
                                       "in-flight wgmma reads"),
            std::string::npos)
      << run.report.hazards[0];
}

namespace {
std::string allHazards(const LaunchReport &report) {
  std::string all;
  for (const std::string &h : report.hazards)
    all += h + "\n";
  return all;
}

} // namespace

TEST(EmulatorHopper, OverwritingSharedOperandsBeforeTheWaitIsAHazard) {
  std::string body = std::string(kWgmmaSetup) + "\twgmma.fence.sync.aligned;\n" +
                     kWgmmaIssue + "\t@%p2 st.shared.b32 [%r11], 0;\n" +
                     "\twgmma.wait_group.sync.aligned 0;\n" + kWgmmaStore;
  Outcome run = launchKernel(hopperKernel(body), 128, 4096, 4);
  ASSERT_GE(run.report.hazardCount, 1);
  // Both the in-flight check and the happens-before one (no
  // wgmma.wait_group has covered the read) see it.
  EXPECT_NE(allHazards(run.report).find("that an in-flight wgmma"), std::string::npos)
      << allHazards(run.report);
  EXPECT_NE(allHazards(run.report).find("warp 0 has not waited for it yet"),
            std::string::npos)
      << allHazards(run.report);
}

TEST(EmulatorHopper, AWgmmaWithoutAFenceAfterTheRegisterWritesIsAHazard) {
  std::string body = std::string("\twgmma.fence.sync.aligned;\n") + kWgmmaSetup +
                     kWgmmaIssue + "\twgmma.wait_group.sync.aligned 0;\n" + kWgmmaStore;
  Outcome run = launchKernel(hopperKernel(body), 128, 4096, 4);
  ASSERT_GE(run.report.hazardCount, 1);
  EXPECT_NE(run.report.hazards[0].find("written by the thread after the last wgmma.fence"),
            std::string::npos)
      << run.report.hazards[0];
}

TEST(EmulatorHopper, AFirstWgmmaWithoutAnyFenceIsAHazard) {
  std::string body = std::string(kWgmmaSetup) + kWgmmaIssue +
                     "\twgmma.wait_group.sync.aligned 0;\n" + kWgmmaStore;
  Outcome run = launchKernel(hopperKernel(body), 128, 4096, 4);
  ASSERT_GE(run.report.hazardCount, 1);
  EXPECT_NE(run.report.hazards[0].find("first wgmma.mma_async has no wgmma.fence"),
            std::string::npos)
      << run.report.hazards[0];
}

TEST(EmulatorHopper, AnAccumulatorReadAfterTheFenceIsAHazard) {
  // The thread reads the accumulator (as softmax reads S) after the fence
  // and before the wgmma that overwrites it: the PTX ISA asks for a
  // wgmma.fence between any register access and the wgmma.
  std::string body = std::string(kWgmmaSetup) + "\twgmma.fence.sync.aligned;\n" +
                     "\tmov.b32 %r24, %f10;\n" + kWgmmaIssue +
                     "\twgmma.wait_group.sync.aligned 0;\n" + kWgmmaStore;
  Outcome run = launchKernel(hopperKernel(body), 128, 4096, 4);
  ASSERT_GE(run.report.hazardCount, 1);
  EXPECT_NE(run.report.hazards[0].find("accumulator was read by the thread after the last "
                                       "wgmma.fence"),
            std::string::npos)
      << run.report.hazards[0];
}

TEST(EmulatorHopper, AWarpThatSkipsTheWarpgroupsWgmmaIsReported) {
  // Warp 3 branches around the MMA: wgmma is warpgroup-collective.
  std::string body = std::string(kWgmmaSetup) + "\twgmma.fence.sync.aligned;\n" +
                     "\tsetp.ge.u32 %p4, %r1, 96;\n\t@%p4 bra SKIP;\n" +
                     kWgmmaIssue + "\twgmma.wait_group.sync.aligned 0;\n" +
                     "SKIP:\n" + kWgmmaStore;
  Outcome run = launchKernel(hopperKernel(body), 128, 4096, 4);
  ASSERT_GE(run.report.errorCount, 1);
  EXPECT_NE(run.report.errors[0].find("warps of warpgroup 0 issued"),
            std::string::npos)
      << run.report.errors[0];
}

TEST(EmulatorHopper, WgmmaIsRefusedOutsideSm90a) {
  std::string body = std::string(kWgmmaSetup) + "\twgmma.fence.sync.aligned;\n" +
                     kWgmmaIssue + kWgmmaStore;
  std::string text = hopperKernel(body);
  text.replace(text.find("sm_90a"), 6, "sm_100a");
  std::string error;
  std::shared_ptr<const Program> program;
  EXPECT_FALSE(succeeds(parsePtx(text), program, error));
  EXPECT_NE(error.find("wgmma needs .target sm_90a; this module is for "
                       "sm_100a"),
            std::string::npos)
      << error;
}

// Ordering across thread synchronization (issue 23): tcgen05 operations of
// two warps are ordered only by tcgen05.fence::before_thread_sync, a
// synchronization and tcgen05.fence::after_thread_sync; generic writes reach
// another warp's async-proxy read only through fence.proxy.async before the
// release; a swizzled TMA box moves chunks within its 128-byte lines.
namespace {

/// Warp 0 stores one TMEM word a lane and hands it to warp 4 (the same
/// lane quadrant) through an mbarrier; warp 4 reads it back and hands the
/// columns back for the dealloc. `before` / `after` keep the fences of the
/// first hand-over.
std::string tmemHandOver(bool before, bool after) {
  return kernel(std::string("\tmov.b32 %r2, smem;\n"
                            "\tshr.u32 %r3, %r1, 5;\n"
                            "\tsetp.ne.u32 %p1, %r3, 0;\n"
                            "\t@%p1 bra ALLOCATED;\n"
                            "\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r2], 32;\n"
                            "\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n"
                            "\tmbarrier.init.shared.b64 [%r2+8], 32;\n"
                            "\tmbarrier.init.shared.b64 [%r2+16], 32;\n"
                            "ALLOCATED:\n"
                            "\ttcgen05.fence::before_thread_sync;\n"
                            "\tbar.sync 0;\n"
                            "\ttcgen05.fence::after_thread_sync;\n"
                            "\tld.shared.b32 %r4, [%r2];\n"
                            "\tsetp.eq.u32 %p2, %r3, 0;\n"
                            "\t@%p2 bra WRITER;\n"
                            "\tsetp.eq.u32 %p3, %r3, 4;\n"
                            "\t@%p3 bra READER;\n"
                            "\tret;\n"
                            "WRITER:\n"
                            "\ttcgen05.st.sync.aligned.32x32b.x1.b32 [%r4], {%r1};\n"
                            "\ttcgen05.wait::st.sync.aligned;\n") +
                (before ? "\ttcgen05.fence::before_thread_sync;\n" : "") +
                "\tmbarrier.arrive.shared.b64 %rd4, [%r2+8];\n"
                "BACK:\n"
                "\tmbarrier.try_wait.parity.shared.b64 %p1, [%r2+16], 0;\n"
                "\t@!%p1 bra BACK;\n"
                "\ttcgen05.fence::after_thread_sync;\n"
                "\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 32;\n"
                "\tret;\n"
                "READER:\n"
                "\tmbarrier.try_wait.parity.shared.b64 %p1, [%r2+8], 0;\n"
                "\t@!%p1 bra READER;\n" +
                (after ? "\ttcgen05.fence::after_thread_sync;\n" : "") +
                "\ttcgen05.ld.sync.aligned.32x32b.x1.b32 {%r5}, [%r4];\n"
                "\ttcgen05.wait::ld.sync.aligned;\n"
                "\tst.global.b32 [%rd3], %r5;\n"
                "\ttcgen05.fence::before_thread_sync;\n"
                "\tmbarrier.arrive.shared.b64 %rd4, [%r2+16];\n"
                "\tret;\n");
}

} // namespace

TEST(EmulatorOrder, TmemHandOverWithBothFencesIsClean) {
  Outcome run = launchKernel(tmemHandOver(true, true), 160, 1024);
  EXPECT_EQ(run.report.hazardCount, 0) << allHazards(run.report);
  EXPECT_TRUE(run.report.errors.empty());
  // Warp 4's lanes read what warp 0's lanes stored: their thread ids.
  for (uint32_t lane = 0; lane < 32; ++lane)
    EXPECT_EQ(run.out[128 + lane], lane);
}

TEST(EmulatorOrder, MissingBeforeThreadSyncIsAHazardNamingBoth) {
  Outcome run = launchKernel(tmemHandOver(false, true), 160, 1024);
  ASSERT_GE(run.report.hazardCount, 1);
  const std::string &h = run.report.hazards[0];
  EXPECT_NE(h.find("tcgen05.ld"), std::string::npos) << h;
  EXPECT_NE(h.find("tcgen05.st"), std::string::npos) << h;
  EXPECT_NE(h.find("warp 0 has no tcgen05.fence::before_thread_sync"), std::string::npos) << h;
}

TEST(EmulatorOrder, MissingAfterThreadSyncIsAHazardNamingBoth) {
  Outcome run = launchKernel(tmemHandOver(true, false), 160, 1024);
  ASSERT_GE(run.report.hazardCount, 1);
  const std::string &h = run.report.hazards[0];
  EXPECT_NE(h.find("tcgen05.ld"), std::string::npos) << h;
  EXPECT_NE(h.find("tcgen05.st"), std::string::npos) << h;
  EXPECT_NE(h.find("no tcgen05.fence::after_thread_sync"), std::string::npos) << h;
}

TEST(EmulatorOrder, UnwrittenSharedMemoryReadsAsPoison) {
  // Shared memory no instruction wrote is all ones, not zero: a kernel that
  // reads it before the write that publishes it sees a NaN, not 0.0.
  Outcome run = launchKernel(kernel("\tmov.b32 %r2, smem;\n"
                                    "\tld.shared.b32 %r3, [%r2+64];\n"
                                    "\tst.global.b32 [%rd3], %r3;\n"
                                    "\tret;\n"),
                             32, 1024);
  EXPECT_EQ(run.out[0], 0xffffffffu);
}

namespace {

/// Launches entry k(.param .align 64 .b8 map[128]) with `threads` threads,
/// `smem` bytes of dynamic shared memory and the tensor map `spec` over a
/// zeroed global buffer.
LaunchReport runWithMap(const std::string &body, uint32_t threads, uint32_t smem,
                        mlir::fa4::runtime::TensorMapSpec spec) {
  LaunchReport report;
  std::string ptx = ".version 8.8\n.target sm_100a\n.address_size 64\n"
                    ".extern .shared .align 1024 .b8 smem[];\n"
                    ".visible .entry k(\n\t.param .align 64 .b8 k_param_0[128]\n)\n{\n"
                    "\t.reg .pred %p<8>;\n\t.reg .b32 %r<32>;\n\t.reg .b64 %rd<16>;\n"
                    "\tmov.b64 %rd1, k_param_0;\n"
                    "\tcvta.param.u64 %rd2, %rd1;\n"
                    "\tmov.u32 %r1, %tid.x;\n"
                    "\tmov.b32 %r2, smem;\n"
                    "\tmov.u32 %r3, 0;\n" +
                    body + "}\n";
  std::string error;
  std::shared_ptr<const Program> program;
  EXPECT_TRUE(succeeds(parsePtx(ptx), program, error)) << error;
  if (!program)
    return report;
  Device device;
  spec.globalAddress = device.allocate(4096);
  std::vector<uint8_t> map(128);
  EXPECT_TRUE(succeeds(encodeTensorMap(spec, map.data()), error)) << error;
  LaunchConfig config;
  config.kernel = "k";
  config.block[0] = threads;
  config.dynamicSmemBytes = smem;
  config.arguments = {map};
  EXPECT_TRUE(succeeds(launch(*program, device, config), report, error))
      << error;
  return report;
}

mlir::fa4::runtime::TensorMapSpec narrowMap() {
  // 16 f16 a row (32 bytes, narrower than the 128-byte swizzle span).
  mlir::fa4::runtime::TensorMapSpec spec;
  spec.rank = 2;
  spec.globalDims[0] = 16;
  spec.globalDims[1] = 4;
  spec.globalStrides[0] = 32;
  spec.boxDims[0] = 16;
  spec.boxDims[1] = 1;
  spec.swizzle = mlir::fa4::runtime::TensorMapSwizzle::Bytes128;
  return spec;
}

} // namespace

TEST(EmulatorOrder, SwizzledBoxPastTheEndOfSharedMemoryIsRefused) {
  // The box is 32 bytes at smem + 896, the last bytes of the CTA's shared
  // memory; the 128B swizzle moves its chunk 112 bytes on (row bits 7..9 of
  // the address are 7), past the end.
  LaunchReport report = runWithMap(
      "\tmbarrier.init.shared.b64 [%r2], 1;\n"
      "\tfence.mbarrier_init.release.cluster;\n"
      "\tadd.s32 %r4, %r2, 896;\n"
      "\tmbarrier.arrive.expect_tx.shared.b64 %rd3, [%r2], 32;\n"
      "\tcp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes "
      "[%r4], [%rd2, {%r3, %r3}], [%r2];\n"
      "WAIT:\n"
      "\tmbarrier.try_wait.parity.shared.b64 %p1, [%r2], 0;\n"
      "\t@!%p1 bra WAIT;\n"
      "\tret;\n",
      32, 928, narrowMap());
  ASSERT_GE(report.errorCount, 1);
  EXPECT_NE(report.errors[0].find("through its swizzle"), std::string::npos)
      << report.errors[0];
}

TEST(EmulatorOrder, ProxyFenceAfterTheReleaseIsAHazard) {
  // Warp 0 writes the staging tile, arrives, and only then fences; warp 1
  // waits and stores the tile with TMA: its read is not ordered after the
  // fence.
  auto body = [](bool late) {
    return std::string("\tshr.u32 %r5, %r1, 5;\n"
                       "\tadd.s32 %r4, %r2, 1024;\n"
                       "\tsetp.ne.u32 %p1, %r5, 0;\n"
                       "\t@%p1 bra INITED;\n"
                       "\tmbarrier.init.shared.b64 [%r2], 32;\n"
                       "INITED:\n"
                       "\tbar.sync 0;\n"
                       "\t@%p1 bra STORER;\n"
                       "\tshl.b32 %r6, %r1, 0;\n"
                       "\tst.shared.b8 [%r4], %r6;\n") +
           (late ? "" : "\tfence.proxy.async.shared::cta;\n") +
           "\tmbarrier.arrive.shared.b64 %rd3, [%r2];\n" +
           (late ? "\tfence.proxy.async.shared::cta;\n" : "") +
           "\tret;\n"
           "STORER:\n"
           "\tmbarrier.try_wait.parity.shared.b64 %p2, [%r2], 0;\n"
           "\t@!%p2 bra STORER;\n"
           "\tsetp.ne.u32 %p3, %r1, 32;\n"
           "\t@%p3 bra DONE;\n"
           "\tcp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group "
           "[%rd2, {%r3, %r3}], [%r4];\n"
           "\tcp.async.bulk.commit_group;\n"
           "\tcp.async.bulk.wait_group.read 0;\n"
           "DONE:\n"
           "\tret;\n";
  };
  mlir::fa4::runtime::TensorMapSpec spec = narrowMap();
  spec.swizzle = mlir::fa4::runtime::TensorMapSwizzle::None;
  LaunchReport clean = runWithMap(body(false), 64, 2048, spec);
  EXPECT_EQ(clean.hazardCount, 0) << allHazards(clean);
  LaunchReport late = runWithMap(body(true), 64, 2048, spec);
  ASSERT_GE(late.hazardCount, 1);
  EXPECT_NE(late.hazards[0].find("a fence after the release does not order it"),
            std::string::npos)
      << late.hazards[0];
}

TEST(EmulatorOrder, OverwritingWhatATmaStoreReadsNeedsItsWait) {
  // A thread stores a tile with TMA and loads the next one into the same
  // shared memory. Without cp.async.bulk.wait_group.read between them the
  // load's write is unordered with the store's read, however early the
  // store happened to finish: the happens-before check sees it every time.
  auto body = [](bool wait) {
    return std::string("\tsetp.ne.u32 %p1, %r1, 0;\n"
                       "\t@%p1 bra DONE;\n"
                       "\tmbarrier.init.shared.b64 [%r2], 1;\n"
                       "\tfence.mbarrier_init.release.cluster;\n"
                       "\tadd.s32 %r4, %r2, 1024;\n"
                       "\tst.shared.b32 [%r4], %r1;\n"
                       "\tfence.proxy.async.shared::cta;\n"
                       "\tcp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group "
                       "[%rd2, {%r3, %r3}], [%r4];\n"
                       "\tcp.async.bulk.commit_group;\n") +
           (wait ? "\tcp.async.bulk.wait_group.read 0;\n" : "") +
           "\tmbarrier.arrive.expect_tx.shared.b64 %rd3, [%r2], 32;\n"
           "\tcp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes "
           "[%r4], [%rd2, {%r3, %r3}], [%r2];\n"
           "WAIT:\n"
           "\tmbarrier.try_wait.parity.shared.b64 %p2, [%r2], 0;\n"
           "\t@!%p2 bra WAIT;\n"
           "DONE:\n"
           "\tret;\n";
  };
  mlir::fa4::runtime::TensorMapSpec spec = narrowMap();
  spec.swizzle = mlir::fa4::runtime::TensorMapSwizzle::None;
  LaunchReport clean = runWithMap(body(true), 32, 2048, spec);
  EXPECT_EQ(clean.hazardCount, 0) << allHazards(clean);
  EXPECT_TRUE(clean.errors.empty());
  LaunchReport unwaited = runWithMap(body(false), 32, 2048, spec);
  ASSERT_GE(unwaited.hazardCount, 1);
  EXPECT_NE(allHazards(unwaited).find("the asynchronous proxy read"), std::string::npos)
      << allHazards(unwaited);
}

//===----------------------------------------------------------------------===//
// 8-bit floats: cvt's packed forms, the byte permutes LLVM packs bytes with,
// FP8 wgmma (sm_90a) and tcgen05.mma .kind::f8f6f4 (sm_100a)
//===----------------------------------------------------------------------===//

TEST(EmulatorFloat8, ConversionsPutTheFirstSourceInTheUpperByte) {
  // cvt ... d, a, b: a to d[15:8], b to d[7:0] (PTX ISA, cvt). e4m3: 1.0 is
  // 0x38, -2.0 0xc0, 1000 saturates to 448 (0x7e), .relu makes -2 +0; e5m2:
  // 1.0 is 0x3c, 448 0x5f. Back to f16x2: a[15:8] to the upper half, a NaN
  // to 0x7fff.
  const char *body =
      "\tmul.wide.u32 %rd4, %r1, 40;\n"
      "\tadd.s64 %rd5, %rd1, %rd4;\n"
      "\tcvt.rn.satfinite.e4m3x2.f32 %rs1, 0f3F800000, 0fC0000000;\n"
      "\tcvt.rn.satfinite.relu.e4m3x2.f32 %rs2, 0f447A0000, 0fC0000000;\n"
      "\tcvt.rn.satfinite.e5m2x2.f32 %rs3, 0f3F800000, 0f43E00000;\n"
      "\tmov.b32 %r2, 0x3C00C000;\n"
      "\tcvt.rn.satfinite.e4m3x2.f16x2 %rs4, %r2;\n"
      "\tcvt.rn.f16x2.e4m3x2 %r3, %rs1;\n"
      "\tcvt.rn.relu.f16x2.e4m3x2 %r4, %rs1;\n"
      "\tmov.b16 %rs5, 0x7f38;\n"
      "\tcvt.rn.f16x2.e4m3x2 %r5, %rs5;\n"
      "\tcvt.rn.f16x2.e5m2x2 %r6, %rs3;\n"
      "\tcvt.u32.u16 %r7, %rs1;\n\tst.global.b32 [%rd5], %r7;\n"
      "\tcvt.u32.u16 %r7, %rs2;\n\tst.global.b32 [%rd5+4], %r7;\n"
      "\tcvt.u32.u16 %r7, %rs3;\n\tst.global.b32 [%rd5+8], %r7;\n"
      "\tcvt.u32.u16 %r7, %rs4;\n\tst.global.b32 [%rd5+12], %r7;\n"
      "\tst.global.b32 [%rd5+16], %r3;\n"
      "\tst.global.b32 [%rd5+20], %r4;\n"
      "\tst.global.b32 [%rd5+24], %r5;\n"
      "\tst.global.b32 [%rd5+28], %r6;\n"
      "\tst.global.b32 [%rd5+32], 0;\n"
      "\tst.global.b32 [%rd5+36], 0;\n"
      "\tret;\n";
  Outcome run = launchKernel(kernel(body, "\t.reg .b16 %rs<8>;\n"), 32, 0, 10);
  ASSERT_TRUE(run.report.clean())
      << (run.report.errors.empty() ? "" : run.report.errors[0]);
  EXPECT_EQ(run.out[0], 0x38c0u);
  EXPECT_EQ(run.out[1], 0x7e00u);
  EXPECT_EQ(run.out[2], 0x3c5fu);
  EXPECT_EQ(run.out[3], 0x38c0u);
  EXPECT_EQ(run.out[4], 0x3c00c000u);
  EXPECT_EQ(run.out[5], 0x3c000000u);
  EXPECT_EQ(run.out[6], 0x7fff3c00u);
  EXPECT_EQ(run.out[7], 0x3c005f00u);
}

TEST(EmulatorFloat8, PrmtAndBfiPackBytes) {
  // prmt.b32 d, a, b, c: byte i of d is byte c[4i+2:4i] of {b, a}, its sign
  // repeated when c[4i+3] is set; bfi.b32 f, a, b, pos, len puts a's low len
  // bits into b at pos, cut at bit 31.
  const char *body = "\tmul.wide.u32 %rd4, %r1, 24;\n"
                     "\tadd.s64 %rd5, %rd1, %rd4;\n"
                     "\tmov.b32 %r2, 0x80112233;\n"
                     "\tmov.b32 %r3, 0x44556677;\n"
                     "\tprmt.b32 %r4, %r2, %r3, 0x3340U;\n"
                     "\tprmt.b32 %r5, %r2, %r3, 0x7654;\n"
                     "\tprmt.b32 %r6, %r2, %r3, 0xBA98;\n"
                     "\tbfi.b32 %r7, 0xab, 0x12345678, 8, 8;\n"
                     "\tbfi.b32 %r8, 0xab, 0x12345678, 28, 8;\n"
                     "\tbfi.b32 %r9, 0xab, 0x12345678, 8, 0;\n"
                     "\tst.global.b32 [%rd5], %r4;\n"
                     "\tst.global.b32 [%rd5+4], %r5;\n"
                     "\tst.global.b32 [%rd5+8], %r6;\n"
                     "\tst.global.b32 [%rd5+12], %r7;\n"
                     "\tst.global.b32 [%rd5+16], %r8;\n"
                     "\tst.global.b32 [%rd5+20], %r9;\n"
                     "\tret;\n";
  Outcome run = launchKernel(kernel(body), 32, 0, 6);
  ASSERT_TRUE(run.report.clean())
      << (run.report.errors.empty() ? "" : run.report.errors[0]);
  EXPECT_EQ(run.out[0], 0x80807733u);
  EXPECT_EQ(run.out[1], 0x44556677u);
  EXPECT_EQ(run.out[2], 0xff000000u);
  EXPECT_EQ(run.out[3], 0x1234ab78u);
  EXPECT_EQ(run.out[4], 0xb2345678u);
  EXPECT_EQ(run.out[5], 0x12345678u);
}

namespace {

/// The bits of the 8-bit A element that lane `lane` of warp `warp` holds in
/// byte `byte` of its register `reg` in the FP8 tests below: all different
/// within a warp up to 124 apart, and all finite in both formats.
uint32_t float8Operand(uint32_t warp, uint32_t lane, uint32_t reg,
                       uint32_t byte) {
  return (16 * lane + 4 * reg + byte + 5 * warp) % 124;
}

/// PTX that puts float8Operand(warp, lane, j, byte), `first` on (mod 124),
/// into byte `byte` of %r20 + j (tid in %r1), from scratch registers %r24 to
/// %r26.
std::string float8OperandRegisters(uint32_t first = 0) {
  std::string text = "\tand.b32 %r24, %r1, 31;\n"
                     "\tshr.u32 %r25, %r1, 5;\n"
                     "\tmul.lo.u32 %r24, %r24, 16;\n"
                     "\tmad.lo.u32 %r24, %r25, 5, %r24;\n";
  for (int j = 0; j < 4; ++j) {
    std::string word = "%r" + std::to_string(20 + j);
    text += "\tmov.b32 " + word + ", 0;\n";
    for (int e = 0; e < 4; ++e)
      text += "\tadd.u32 %r26, %r24, " + std::to_string(first + 4 * j + e) +
              ";\n\trem.u32 %r26, %r26, 124;\n\tshl.b32 %r26, %r26, " +
              std::to_string(8 * e) + ";\n\tor.b32 " + word + ", " + word +
              ", %r26;\n";
  }
  return text;
}

/// PTX that writes B = the 32 x 32 identity in 8-bit floats (`one` its 1.0)
/// at smem, K-major without swizzle: element (n, k) at (k / 16)·512 +
/// (n / 8)·128 + (n mod 8)·16 + k mod 16, so LBO 512, SBO 128. 128 threads
/// zero the kilobyte, then thread n < 32 writes (n, n). %r10 is smem, %rd8
/// B's descriptor (`tcgen05`: with the fixed bits 46-48 = 0b001 of sm_100a's
/// descriptors).
std::string float8Identity(const char *one, bool tcgen05 = false) {
  return std::string("\tmov.u32 %r10, smem;\n"
                     "\tmul.lo.u32 %r11, %r1, 8;\n"
                     "\tadd.u32 %r11, %r10, %r11;\n"
                     "\tmov.b32 %r12, 0;\n"
                     "\tst.shared.v2.b32 [%r11], {%r12, %r12};\n"
                     "\tbar.sync 0;\n"
                     "\tsetp.lt.u32 %p2, %r1, 32;\n"
                     "\tshr.u32 %r11, %r1, 4;\n"
                     "\tmul.lo.u32 %r11, %r11, 512;\n"
                     "\tshr.u32 %r12, %r1, 3;\n"
                     "\tand.b32 %r12, %r12, 3;\n"
                     "\tmad.lo.u32 %r11, %r12, 128, %r11;\n"
                     "\tand.b32 %r12, %r1, 7;\n"
                     "\tmad.lo.u32 %r11, %r12, 16, %r11;\n"
                     "\tand.b32 %r12, %r1, 15;\n"
                     "\tadd.u32 %r11, %r11, %r12;\n"
                     "\tadd.u32 %r11, %r11, %r10;\n"
                     "\tmov.b32 %r12, ") +
         one +
         ";\n"
         "\t@%p2 st.shared.b8 [%r11], %r12;\n"
         "\tfence.proxy.async.shared::cta;\n"
         "\tbar.sync 0;\n"
         // The descriptor: start >> 4, LBO 512 >> 4, SBO 128 >> 4.
         "\tshr.u32 %r14, %r10, 4;\n"
         "\tcvt.u64.u32 %rd8, %r14;\n"
         "\tor.b64 %rd8, %rd8, " +
         (tcgen05 ? "0x0000400800200000" : "0x0000000800200000") + ";\n";
}

/// An FP8 wgmma m64n32k32 with A (e4m3 or `aType`) from registers and B the
/// identity of `bType` (`bOne` its 1.0), so D = ±A: every accumulator says
/// which A element the ISA's fragment layout put at its row and column.
std::string float8Wgmma(const char *aType, const char *bType, const char *bOne,
                        const char *scaleA) {
  std::string accumulators;
  for (int i = 0; i < 16; ++i)
    accumulators += (i ? ", %f" : "%f") + std::to_string(40 + i);
  // scale-d false (%p3): D = A·B, whatever D held.
  std::string body = float8Identity(bOne) + float8OperandRegisters() +
                     "\tsetp.eq.u32 %p3, %r1, 9999;\n"
                     "\twgmma.fence.sync.aligned;\n"
                     "\twgmma.mma_async.sync.aligned.m64n32k32.f32." +
                     aType + "." + bType + " {" + accumulators +
                     "}, {%r20, %r21, %r22, %r23}, %rd8, %p3, " + scaleA +
                     ", 1;\n"
                     "\twgmma.commit_group.sync.aligned;\n"
                     "\twgmma.wait_group.sync.aligned 0;\n"
                     "\tmul.wide.u32 %rd9, %r1, 64;\n"
                     "\tadd.s64 %rd9, %rd1, %rd9;\n";
  for (int q = 0; q < 4; ++q)
    body += "\tst.global.v4.f32 [%rd9+" + std::to_string(16 * q) + "], {%f" +
            std::to_string(40 + 4 * q) + ", %f" + std::to_string(41 + 4 * q) +
            ", %f" + std::to_string(42 + 4 * q) + ", %f" +
            std::to_string(43 + 4 * q) + "};\n";
  return body + "\tret;\n";
}

/// Checks D = scale·A of float8Wgmma: thread t's accumulator i is row r =
/// l/4 + 8((i/2) mod 2), column n = 8(i/4) + 2(l mod 4) + i mod 2 of its
/// warp's 16 rows (D's layout at K = 32 as at 16), and A(r, n) is, by the
/// ISA's .m64nNk32 A fragment, byte n mod 4 of register 2(n/16) + r/8 of
/// lane 4(r mod 8) + (n mod 16)/4.
void expectFloat8Identity(const Outcome &run, Float8 aFormat, float scale) {
  for (uint32_t t = 0; t < 128; ++t)
    for (uint32_t i = 0; i < 16; ++i) {
      uint32_t warp = t / 32, lane = t % 32;
      uint32_t r = lane / 4 + 8 * ((i / 2) % 2);
      uint32_t n = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
      uint32_t bits = float8Operand(warp, 4 * (r % 8) + (n % 16) / 4,
                                    2 * (n / 16) + r / 8, n % 4);
      float expected =
          scale * float8ToFloat(aFormat, static_cast<uint8_t>(bits));
      float got;
      std::memcpy(&got, &run.out[16 * t + i], 4);
      EXPECT_EQ(got, expected) << "thread " << t << " accumulator " << i;
    }
}

} // namespace

TEST(EmulatorFloat8, WgmmaRegisterFragmentOf8BitA) {
  Outcome run = launchKernel(
      hopperKernel(float8Wgmma("e4m3", "e4m3", "0x38", "1")), 128, 2048, 16);
  ASSERT_TRUE(run.report.clean())
      << (run.report.errors.empty() ? "" : run.report.errors[0])
      << (run.report.hazards.empty() ? "" : run.report.hazards[0]);
  expectFloat8Identity(run, Float8::E4M3, 1.0f);
}

TEST(EmulatorFloat8, WgmmaMixesE5m2AndE4m3AndNegates) {
  Outcome run = launchKernel(
      hopperKernel(float8Wgmma("e5m2", "e4m3", "0x38", "-1")), 128, 2048, 16);
  ASSERT_TRUE(run.report.clean())
      << (run.report.errors.empty() ? "" : run.report.errors[0]);
  expectFloat8Identity(run, Float8::E5M2, -1.0f);
}

TEST(EmulatorFloat8, FormsOutsideTheIsaAreRefusedWhenParsed) {
  std::string error;
  std::shared_ptr<const Program> program;
  auto refused = [&](const std::string &instruction) {
    std::string text = hopperKernel("\t" + instruction + "\n\tret;\n");
    EXPECT_FALSE(succeeds(parsePtx(text), program, error)) << instruction;
    return error;
  };
  // FP8 wgmma has no transpose immediates (the ISA's transpose is for
  // .f16/.bf16 only): the 16-bit forms' 8 operands are refused.
  EXPECT_NE(refused("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
                    "{%f1, %f2, %f3, %f4}, %rd1, %rd2, %p1, 1, 1, 0, 0;")
                .find("takes 6 operands with A in shared memory (a descriptor) "
                      "(FP8 wgmma has no transpose immediates), got 8"),
            std::string::npos)
      << error;
  EXPECT_NE(
      refused("wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e4m3 "
              "{%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, %rd2, %p1, 1, 1, 0;")
          .find("takes 6 operands with A in registers"),
      std::string::npos)
      << error;
  EXPECT_NE(refused("wgmma.mma_async.sync.aligned.m64n8k16.f32.e4m3.e4m3 "
                    "{%f1, %f2, %f3, %f4}, %rd1, %rd2, %p1, 1, 1;")
                .find("the PTX ISA's K is 32 for .e4m3/.e5m2"),
            std::string::npos)
      << error;
  EXPECT_NE(refused("wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3 "
                    "{%r1, %r2}, %rd1, %rd2, %p1, 1, 1;")
                .find("types other than .f32 accumulating"),
            std::string::npos)
      << error;
  EXPECT_NE(
      refused("cvt.rn.e4m3x2.f32 %r1, %f1, %f2;").find("needs .satfinite"),
      std::string::npos)
      << error;
  EXPECT_NE(
      refused("cvt.rz.satfinite.e4m3x2.f32 %r1, %f1, %f2;").find("needs .rn"),
      std::string::npos)
      << error;
  EXPECT_NE(refused("prmt.b32.f4e %r1, %r2, %r3, %r4;").find("qualifier .f4e"),
            std::string::npos)
      << error;
}

namespace {

/// A tcgen05.mma .kind::f8f6f4 with A in TMEM: each thread stores its lane's
/// 32 elements of A (float8Operand(warp, lane, (k mod 16) / 4, k mod 4) +
/// 16·(k / 16), mod 124, at k; four a 32-bit column, the lowest k lowest)
/// with tcgen05.st, thread 0 issues
/// D = A·B with B the 32 x 32 identity in shared memory and instruction
/// descriptor `idesc`, and every thread reads its row of D back.
std::string float8TensorMma(const char *bOne, uint32_t idesc) {
  std::string loads;
  for (int i = 0; i < 32; ++i)
    loads += (i ? ", %q" : "%q") + std::to_string(i);
  std::string body =
      float8Identity(bOne, true) +
      "\tshr.u32 %r3, %r1, 5;\n"
      "\tsetp.ne.u32 %p1, %r3, 0;\n"
      "\t@%p1 bra ALLOCATED;\n"
      "\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r10+1032], "
      "64;\n"
      "\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n"
      "\tmbarrier.init.shared.b64 [%r10+1024], 1;\n"
      "\tfence.mbarrier_init.release.cluster;\n"
      "ALLOCATED:\n"
      "\ttcgen05.fence::before_thread_sync;\n"
      "\tbar.sync 0;\n"
      "\ttcgen05.fence::after_thread_sync;\n"
      "\tld.shared.b32 %r4, [%r10+1032];\n"
      // This warp's lanes: (32·warp) << 16; A at column 32.
      "\tshl.b32 %r5, %r3, 21;\n"
      "\tadd.u32 %r5, %r4, %r5;\n" +
      float8OperandRegisters() +
      "\tmov.b32 %r6, %r20;\n\tmov.b32 %r7, %r21;\n"
      "\tmov.b32 %r8, %r22;\n\tmov.b32 %r9, %r23;\n" +
      float8OperandRegisters(16) +
      "\tadd.u32 %r15, %r5, 32;\n"
      "\ttcgen05.st.sync.aligned.32x32b.x8.b32 [%r15], {%r6, %r7, %r8, %r9, "
      "%r20, %r21, %r22, %r23};\n"
      "\ttcgen05.wait::st.sync.aligned;\n"
      "\ttcgen05.fence::before_thread_sync;\n"
      "\tbar.sync 0;\n"
      "\tsetp.ne.u32 %p1, %r1, 0;\n"
      "\t@%p1 bra ISSUED;\n"
      "\ttcgen05.fence::after_thread_sync;\n"
      "\tadd.u32 %r16, %r4, 32;\n"
      "\tmov.b32 %r17, " +
      std::to_string(idesc) +
      ";\n"
      "\tsetp.eq.u32 %p3, %r1, 9999;\n"
      "\ttcgen05.mma.cta_group::1.kind::f8f6f4 [%r4], [%r16], %rd8, %r17, "
      "%p3;\n"
      "\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 "
      "[%r10+1024];\n"
      "ISSUED:\n"
      "\tmbarrier.try_wait.parity.shared.b64 %p4, [%r10+1024], 0;\n"
      "\t@!%p4 bra ISSUED;\n"
      "\ttcgen05.fence::after_thread_sync;\n"
      "\ttcgen05.ld.sync.aligned.32x32b.x32.b32 {" +
      loads +
      "}, [%r5];\n"
      "\ttcgen05.wait::ld.sync.aligned;\n"
      "\tmul.wide.u32 %rd9, %r1, 128;\n"
      "\tadd.s64 %rd9, %rd1, %rd9;\n";
  for (int q = 0; q < 8; ++q)
    body += "\tst.global.v4.b32 [%rd9+" + std::to_string(16 * q) + "], {%q" +
            std::to_string(4 * q) + ", %q" + std::to_string(4 * q + 1) +
            ", %q" + std::to_string(4 * q + 2) + ", %q" +
            std::to_string(4 * q + 3) + "};\n";
  body += "\ttcgen05.fence::before_thread_sync;\n"
          "\tbar.sync 0;\n"
          "\tsetp.ne.u32 %p1, %r3, 0;\n"
          "\t@%p1 bra DONE;\n"
          "\ttcgen05.fence::after_thread_sync;\n"
          "\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 64;\n"
          "DONE:\n"
          "\tret;\n";
  return kernel(body, "\t.reg .b32 %q<32>;\n");
}

/// kind::f8f6f4's instruction descriptor: D f32 (bit 4), A e4m3 (0), B
/// `bType` (bits 10-12), negate A (bit 13), N >> 3 (bits 17-22), M >> 4
/// (bits 24-28).
uint32_t float8Idesc(uint32_t bType, bool negateA, uint32_t n = 32,
                     uint32_t m = 128) {
  return (1u << 4) | (bType << 10) | (uint32_t(negateA) << 13) |
         ((n >> 3) << 17) | ((m >> 4) << 24);
}

} // namespace

TEST(EmulatorFloat8, TensorMmaReadsAFromTmemFourElementsAColumn) {
  // B e5m2 (1.0 is 0x3c), A negated: D = -A, row m of D in TMEM lane m.
  Outcome run = launchKernel(float8TensorMma("0x3c", float8Idesc(1, true)), 128,
                             2048, 32);
  ASSERT_TRUE(run.report.clean())
      << (run.report.errors.empty() ? "" : run.report.errors[0])
      << (run.report.hazards.empty() ? "" : run.report.hazards[0]);
  for (uint32_t t = 0; t < 128; ++t)
    for (uint32_t k = 0; k < 32; ++k) {
      // Thread t's k-th element: the sequence float8Operand gives its
      // registers, the first 16 elements then the next 16.
      uint32_t bits =
          float8Operand(t / 32, t % 32, (k % 16) / 4, k % 4) + 16 * (k / 16);
      float expected =
          -float8ToFloat(Float8::E4M3, static_cast<uint8_t>(bits % 124));
      float got;
      std::memcpy(&got, &run.out[32 * t + k], 4);
      EXPECT_EQ(got, expected) << "row " << t << " column " << k;
    }
}

TEST(EmulatorFloat8, SixAndFourBitFormatsAreRefused) {
  // B e2m1 (5): kind::f8f6f4 takes it, fa4-emu does not model it.
  Outcome run = launchKernel(float8TensorMma("0x3c", float8Idesc(5, false)),
                             128, 2048, 32);
  ASSERT_GE(run.report.errorCount, 1);
  EXPECT_NE(
      run.report.errors[0].find("B type 5 (e2m1) is a 6- or 4-bit format, "
                                "which is not modelled"),
      std::string::npos)
      << run.report.errors[0];
}
