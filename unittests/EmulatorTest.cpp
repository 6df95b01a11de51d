//===- EmulatorTest.cpp - fa4-emu's semantics on small kernels ------------===//
//
// Hand-written PTX whose results are worked out from the PTX ISA: SIMT
// divergence and reconvergence, packed conversions, and the reports for
// divergent collectives, deadlocks, bad addresses and TMEM leaks.
//
//===----------------------------------------------------------------------===//

#include "fa4/Emu/Emulator.h"

#include "gtest/gtest.h"

#include <cstring>

using namespace mlir::fa4::emu;

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

Outcome launchKernel(const std::string &ptx, uint32_t threads, uint32_t smem = 0) {
  Outcome run;
  std::string error;
  auto program = parsePtx(ptx, error);
  EXPECT_TRUE(program) << error;
  if (!program)
    return run;
  Device device;
  uint64_t out = device.allocate(threads * 4);
  LaunchConfig config;
  config.kernel = "k";
  config.block[0] = threads;
  config.dynamicSmemBytes = smem;
  std::vector<uint8_t> pointer(8);
  std::memcpy(pointer.data(), &out, 8);
  config.arguments = {pointer};
  EXPECT_TRUE(launch(*program, device, config, run.report, error)) << error;
  run.out.resize(threads);
  std::memcpy(run.out.data(), device.host(out, threads * 4), threads * 4);
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
  ASSERT_TRUE(encodeTensorMap(spec, bytes, error)) << error;
  mlir::fa4::runtime::TensorMapSpec decoded;
  ASSERT_TRUE(decodeTensorMap(bytes, decoded, error)) << error;
  EXPECT_EQ(decoded.boxDims[0], 64u);
  EXPECT_EQ(decoded.globalStrides[0], 256u);
  // A 128-element f16 inner box is 256 bytes: wider than the 128B swizzle.
  spec.boxDims[0] = 128;
  EXPECT_FALSE(encodeTensorMap(spec, bytes, error));
  EXPECT_NE(error.find("more than the 128-byte swizzle span"), std::string::npos);
  spec.boxDims[0] = 64;
  spec.globalStrides[0] = 200;
  EXPECT_FALSE(encodeTensorMap(spec, bytes, error));
  EXPECT_NE(error.find("a multiple of 16"), std::string::npos);
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
  auto program = parsePtx(ptx, run.error);
  if (!program)
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
  run.launched = launch(*program, device, config, run.report, run.error);
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
  EXPECT_TRUE(parsePtx(declared, error)) << error;
  std::string used = std::string(kHead) + ".global .align 4 .b32 counter;\n" +
                     pointerKernel("\tmov.u64 %rd4, counter;\n").substr(std::string(kHead).size());
  EXPECT_FALSE(parsePtx(used, error));
  EXPECT_NE(error.find("'counter' is a module-scope .global variable, which fa4-emu "
                       "does not place in global memory"),
            std::string::npos)
      << error;
  EXPECT_FALSE(parsePtx(std::string(kHead) + ".const .align 4 .b32 c;\n" +
                            pointerKernel("").substr(std::string(kHead).size()),
                        error));
  EXPECT_NE(error.find("module-scope .const variables are not supported"), std::string::npos)
      << error;
}
