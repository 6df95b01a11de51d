//===- EmulatorClusterTest.cpp - fa4-emu's thread-block clusters ----------===//
//
// Hand-written PTX run as clusters of CTAs: the cluster's special
// registers, distributed shared memory through mapa and .shared::cluster
// accesses, barrier.cluster's phases and ordering, arrives on a peer CTA's
// mbarrier, TMA loads multicast to several CTAs and tcgen05.commit
// multicast, with the reports a missing synchronization earns. Expected
// values are worked out from the PTX ISA.
//
//===----------------------------------------------------------------------===//

#include "fa4/Emu/Emulator.h"

#include "Succeeds.h"

#include "gtest/gtest.h"

#include <cstring>

using namespace mlir::fa4::emu;
using fa4test::succeeds;

namespace {

/// An sm_100a entry k(u64 out[, map]) whose threads have %r1 = %tid.x,
/// %r2 = the CTA's shared variable `smem`, %r3 = %cluster_ctarank, %r4 =
/// the block's thread count, %r5 = this thread's linear index in the grid
/// and %rd3 = &out[%r5].
std::string clusterKernel(const std::string &body, bool withMap = false,
                          const std::string &directives = "") {
  return std::string(".version 8.8\n.target sm_100a\n.address_size 64\n"
                     ".extern .shared .align 1024 .b8 smem[];\n"
                     ".visible .entry k(\n\t.param .u64 k_param_0") +
         (withMap ? ",\n\t.param .align 64 .b8 k_param_1[128]" : "") + "\n)\n" +
         directives +
         "{\n"
         "\t.reg .pred %p<8>;\n\t.reg .b16 %rs<8>;\n\t.reg .b32 %r<40>;\n"
         "\t.reg .b64 %rd<16>;\n"
         "\tld.param.u64 %rd1, [k_param_0];\n"
         "\tmov.u32 %r1, %tid.x;\n"
         "\tmov.b32 %r2, smem;\n"
         "\tmov.u32 %r3, %cluster_ctarank;\n"
         "\tmov.u32 %r4, %ntid.x;\n"
         "\tmov.u32 %r6, %ctaid.x;\n"
         "\tmad.lo.u32 %r5, %r6, %r4, %r1;\n"
         "\tmul.wide.u32 %rd2, %r5, 4;\n"
         "\tadd.s64 %rd3, %rd1, %rd2;\n" +
         body + "}\n";
}

struct Outcome {
  LaunchReport report;
  std::vector<uint32_t> out;
  std::string launchError;
};

/// Runs k over `grid` CTAs of `threads` threads in clusters of `cluster`
/// along x; out has a word per thread of the grid. With `map`, the second
/// parameter is a tensor map over a 4 KB global buffer of bytes 0, 1, 2...
Outcome launchCluster(const std::string &ptx, uint32_t threads, uint32_t grid,
                      uint32_t cluster, uint32_t smem = 4096,
                      const mlir::fa4::runtime::TensorMapSpec *map = nullptr,
                      uint64_t seed = 0, bool lazy = false) {
  Outcome run;
  std::string error;
  std::shared_ptr<const Program> program;
  EXPECT_TRUE(succeeds(parsePtx(ptx), program, error)) << error;
  if (!program)
    return run;
  Device device;
  uint32_t words = threads * grid;
  uint64_t out = device.allocate(words * 4);
  LaunchConfig config;
  config.kernel = "k";
  config.block[0] = threads;
  config.grid[0] = grid;
  config.cluster[0] = cluster;
  config.dynamicSmemBytes = smem;
  config.seed = seed;
  config.lazyCompletion = lazy;
  std::vector<uint8_t> pointer(8);
  std::memcpy(pointer.data(), &out, 8);
  config.arguments = {pointer};
  if (map) {
    mlir::fa4::runtime::TensorMapSpec spec = *map;
    spec.globalAddress = device.allocate(4096);
    uint8_t *bytes = device.host(spec.globalAddress, 4096);
    for (uint32_t i = 0; i < 4096; ++i)
      bytes[i] = static_cast<uint8_t>(i);
    std::vector<uint8_t> encoded(128);
    EXPECT_TRUE(succeeds(encodeTensorMap(spec, encoded.data()), error)) << error;
    config.arguments.push_back(encoded);
  }
  llvm::Expected<LaunchReport> report = launch(*program, device, config);
  if (!report) {
    run.launchError = llvm::toString(report.takeError());
    return run;
  }
  run.report = *report;
  run.out.resize(words);
  std::memcpy(run.out.data(), device.host(out, words * 4), words * 4);
  return run;
}

std::string all(const std::vector<std::string> &messages) {
  std::string text;
  for (const std::string &m : messages)
    text += m + "\n";
  return text;
}

/// Each thread stores its grid index into its CTA's shared memory, the
/// cluster synchronizes (`sync`: the arrive and wait lines), and each
/// thread reads its partner's word in the next CTA of the cluster through
/// mapa and ld.shared::cluster.
std::string exchange(const std::string &sync) {
  return clusterKernel("\tshl.b32 %r7, %r1, 2;\n"
                       "\tadd.u32 %r8, %r2, %r7;\n"
                       "\tst.shared.u32 [%r8], %r5;\n" +
                       sync +
                       "\tmov.u32 %r9, %cluster_nctarank;\n"
                       "\tadd.u32 %r10, %r3, 1;\n"
                       "\trem.u32 %r10, %r10, %r9;\n"
                       "\tmapa.shared::cluster.u32 %r11, %r8, %r10;\n"
                       "\tld.shared::cluster.u32 %r12, [%r11];\n"
                       "\tst.global.u32 [%rd3], %r12;\n"
                       "\tbarrier.cluster.arrive.aligned;\n"
                       "\tbarrier.cluster.wait.aligned;\n"
                       "\tret;\n");
}

} // namespace

TEST(EmulatorCluster, SpecialRegistersNameTheCluster) {
  // A grid of 6 CTAs in clusters of 3: CTA 4 is rank 1 of cluster 1.
  Outcome run = launchCluster(
      clusterKernel("\tmov.u32 %r7, %cluster_nctarank;\n"
                    "\tmov.u32 %r8, %clusterid.x;\n"
                    "\tmov.u32 %r9, %nclusterid.x;\n"
                    "\tmov.u32 %r10, %cluster_ctaid.x;\n"
                    "\tmov.u32 %r11, %cluster_nctaid.x;\n"
                    "\tmov.u32 %r12, %is_explicit_cluster;\n"
                    "\tmad.lo.u32 %r13, %r3, 10, %r7;\n"
                    "\tmad.lo.u32 %r13, %r13, 10, %r8;\n"
                    "\tmad.lo.u32 %r13, %r13, 10, %r9;\n"
                    "\tmad.lo.u32 %r13, %r13, 10, %r10;\n"
                    "\tmad.lo.u32 %r13, %r13, 10, %r11;\n"
                    "\tmad.lo.u32 %r13, %r13, 10, %r12;\n"
                    "\tst.global.u32 [%rd3], %r13;\n"
                    "\tret;\n"),
      128, 6, 3);
  ASSERT_TRUE(run.launchError.empty()) << run.launchError;
  EXPECT_TRUE(run.report.clean()) << all(run.report.errors);
  EXPECT_EQ(run.report.ctas, 6);
  for (uint32_t cta = 0; cta < 6; ++cta) {
    uint32_t rank = cta % 3, id = cta / 3;
    uint32_t expected = ((((rank * 10 + 3) * 10 + id) * 10 + 2) * 10 + rank) * 10 + 3;
    EXPECT_EQ(run.out[cta * 128 + 5], expected * 10 + 1) << "cta " << cta;
  }
}

TEST(EmulatorCluster, DistributedSharedMemoryAfterTheClusterBarrier) {
  for (uint64_t seed = 0; seed < 4; ++seed) {
    Outcome run = launchCluster(exchange("\tbarrier.cluster.arrive.release.aligned;\n"
                                         "\tbarrier.cluster.wait.acquire.aligned;\n"),
                                128, 4, 2, 4096, nullptr, seed);
    ASSERT_TRUE(run.launchError.empty()) << run.launchError;
    EXPECT_TRUE(run.report.clean())
        << all(run.report.errors) << all(run.report.hazards) << all(run.report.deadlock);
    // Thread t of CTA c reads what thread t of its partner stored.
    for (uint32_t cta = 0; cta < 4; ++cta)
      for (uint32_t t = 0; t < 128; t += 37) {
        uint32_t partner = cta / 2 * 2 + (cta % 2 + 1) % 2;
        EXPECT_EQ(run.out[cta * 128 + t], partner * 128 + t);
      }
  }
}

TEST(EmulatorCluster, ReadingAPeerWithoutTheClusterBarrierIsAHazard) {
  Outcome run = launchCluster(exchange(""), 128, 2, 2);
  ASSERT_TRUE(run.launchError.empty()) << run.launchError;
  ASSERT_GE(run.report.hazardCount, 1);
  EXPECT_NE(all(run.report.hazards).find("ld.shared::cluster"), std::string::npos)
      << all(run.report.hazards);
}

TEST(EmulatorCluster, ARelaxedArriveReleasesNothing) {
  Outcome run = launchCluster(exchange("\tbarrier.cluster.arrive.relaxed.aligned;\n"
                                       "\tbarrier.cluster.wait.aligned;\n"),
                              128, 2, 2);
  ASSERT_TRUE(run.launchError.empty()) << run.launchError;
  EXPECT_GE(run.report.hazardCount, 1) << "a relaxed arrive orders no store";
}

TEST(EmulatorCluster, ExitedThreadsDoNotHoldTheClusterBarrier) {
  // Rank 1 exits at once; rank 0's arrive and wait complete without it.
  Outcome run = launchCluster(clusterKernel("\tsetp.ne.u32 %p1, %r3, 0;\n"
                                            "\t@%p1 bra DONE;\n"
                                            "\tbarrier.cluster.arrive.aligned;\n"
                                            "\tbarrier.cluster.wait.aligned;\n"
                                            "\tst.global.u32 [%rd3], 7;\n"
                                            "DONE:\n"
                                            "\tret;\n"),
                              128, 2, 2);
  EXPECT_TRUE(run.report.clean()) << all(run.report.deadlock);
  EXPECT_EQ(run.out[0], 7u);
}

namespace {
/// Rank 1's thread 0 stores a word into rank 0's shared memory and arrives
/// on rank 0's mbarrier with `arrive` (after `before`); rank 0's thread 0
/// waits and reads the word.
std::string handOver(const std::string &before, const std::string &arrive) {
  return clusterKernel("\tsetp.ne.u32 %p1, %r1, 0;\n"
                       "\tsetp.ne.u32 %p2, %r3, 0;\n"
                       "\tor.pred %p4, %p1, %p2;\n"
                       "\t@%p4 bra SKIPINIT;\n"
                       "\tmbarrier.init.shared.b64 [%r2+8], 1;\n"
                       "\tfence.mbarrier_init.release.cluster;\n"
                       "SKIPINIT:\n"
                       "\tbarrier.cluster.arrive.aligned;\n"
                       "\tbarrier.cluster.wait.aligned;\n"
                       "\t@%p1 bra DONE;\n"
                       "\t@%p2 bra PEER;\n"
                       "WAIT:\n"
                       "\tmbarrier.try_wait.parity.shared::cta.b64 %p3, [%r2+8], 0;\n"
                       "\t@!%p3 bra WAIT;\n"
                       "\tld.shared.u32 %r7, [%r2+16];\n"
                       "\tst.global.u32 [%rd3], %r7;\n"
                       "\tbra.uni DONE;\n"
                       "PEER:\n"
                       "\tmov.u32 %r8, 0;\n"
                       "\tmapa.shared::cluster.u32 %r9, %r2, %r8;\n"
                       "\tst.shared::cluster.u32 [%r9+16], 4242;\n" +
                       before + "\t" + arrive + " _, [%r9+8];\n"
                       "DONE:\n"
                       "\tret;\n");
}
} // namespace

TEST(EmulatorCluster, ThePeersArriveOnAnMbarrierOfTheFirstCta) {
  // Rank 1's thread 0 stores a word into rank 0's shared memory and
  // arrives on rank 0's mbarrier (release, cluster scope); rank 0 waits on
  // it (acquire) and reads the word.
  const std::string arrive = "mbarrier.arrive.release.cluster.shared::cluster.b64";
  std::string body = handOver("", arrive);
  // Only thread 0 of each CTA goes on past the cluster barrier.
  for (uint64_t seed = 0; seed < 4; ++seed) {
    Outcome run = launchCluster(body, 128, 2, 2, 4096, nullptr, seed);
    ASSERT_TRUE(run.launchError.empty()) << run.launchError;
    EXPECT_TRUE(run.report.clean())
        << all(run.report.errors) << all(run.report.hazards) << all(run.report.deadlock);
    EXPECT_EQ(run.out[0], 4242u);
  }
  // Without the peer's arrive, rank 0 waits forever: a deadlock of the
  // cluster.
  std::string noArrive = body;
  noArrive.erase(noArrive.find("\t" + arrive),
                 ("\t" + arrive + " _, [%r9+8];\n").size());
  Outcome stuck = launchCluster(noArrive, 128, 2, 2);
  ASSERT_FALSE(stuck.report.deadlock.empty());
  EXPECT_NE(stuck.report.deadlock[0].find("and its cluster deadlocked"), std::string::npos)
      << all(stuck.report.deadlock);
}

TEST(EmulatorCluster, AMulticastTmaLoadLandsInEveryCtaOfTheMask) {
  // 64 bytes of a row-major byte tensor; rank 0 loads the box once for
  // both CTAs, each CTA's mbarrier told of the 64 bytes.
  mlir::fa4::runtime::TensorMapSpec spec;
  spec.rank = 2;
  spec.dataType = mlir::fa4::runtime::TensorMapDataType::UInt8;
  spec.globalDims[0] = 64;
  spec.globalDims[1] = 64;
  spec.globalStrides[0] = 64;
  spec.boxDims[0] = 64;
  spec.boxDims[1] = 1;
  auto body = [](const std::string &mask) {
    return "\tmov.b64 %rd5, k_param_1;\n"
           "\tcvta.param.u64 %rd6, %rd5;\n"
           "\tsetp.ne.u32 %p1, %r1, 0;\n"
           "\t@%p1 bra SYNC;\n"
           "\tmbarrier.init.shared.b64 [%r2+1024], 1;\n"
           "\tfence.mbarrier_init.release.cluster;\n"
           "\tmbarrier.arrive.expect_tx.shared.b64 %rd7, [%r2+1024], 64;\n"
           "SYNC:\n"
           "\tbarrier.cluster.arrive.aligned;\n"
           "\tbarrier.cluster.wait.aligned;\n"
           "\t@%p1 bra DONE;\n"
           "\tsetp.ne.u32 %p2, %r3, 0;\n"
           "\t@%p2 bra WAIT;\n"
           "\tmov.u16 %rs1, " + mask + ";\n"
           "\tmov.u32 %r10, 3;\n"
           "\tcp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
           " [%r2], [%rd6, {%r3, %r10}], [%r2+1024], %rs1;\n"
           "WAIT:\n"
           "\tmbarrier.try_wait.parity.shared::cta.b64 %p3, [%r2+1024], 0;\n"
           "\t@!%p3 bra WAIT;\n"
           "\tld.shared.u32 %r11, [%r2+4];\n"
           "\tst.global.u32 [%rd3], %r11;\n"
           "DONE:\n"
           "\tret;\n";
  };
  for (bool lazy : {false, true}) {
    Outcome run = launchCluster(clusterKernel(body("3"), true), 128, 2, 2, 4096, &spec,
                                lazy ? 5 : 0, lazy);
    ASSERT_TRUE(run.launchError.empty()) << run.launchError;
    EXPECT_TRUE(run.report.clean())
        << all(run.report.errors) << all(run.report.hazards) << all(run.report.deadlock);
    EXPECT_EQ(run.report.tmaLoadBytes, 128);
    // Row 3's bytes 4..7 (3 * 64 + 4 = 196) in both CTAs.
    for (uint32_t cta = 0; cta < 2; ++cta)
      EXPECT_EQ(run.out[cta * 128], 0xc7c6c5c4u) << "cta " << cta;
  }
  // A mask of rank 0 only leaves rank 1 waiting: a deadlock.
  Outcome one = launchCluster(clusterKernel(body("1"), true), 128, 2, 2, 4096, &spec);
  EXPECT_FALSE(one.report.deadlock.empty());
  // A rank past the cluster is an error.
  Outcome past = launchCluster(clusterKernel(body("4"), true), 128, 2, 2, 4096, &spec);
  EXPECT_NE(all(past.report.errors).find("CTA mask 0x4"), std::string::npos)
      << all(past.report.errors);
}

TEST(EmulatorCluster, ACommitMulticastArrivesOnEveryCtaOfTheMask) {
  // Rank 0's thread 0 commits (no MMA before it: the arrive alone) to the
  // mbarrier at the same offset in each CTA of the mask.
  auto body = [](const std::string &mask) {
    return "\tsetp.ne.u32 %p1, %r1, 0;\n"
           "\t@%p1 bra SYNC;\n"
           "\tmbarrier.init.shared.b64 [%r2+8], 1;\n"
           "\tfence.mbarrier_init.release.cluster;\n"
           "SYNC:\n"
           "\tbarrier.cluster.arrive.aligned;\n"
           "\tbarrier.cluster.wait.aligned;\n"
           "\t@%p1 bra DONE;\n"
           "\tsetp.ne.u32 %p2, %r3, 0;\n"
           "\t@%p2 bra WAIT;\n"
           "\tmov.u16 %rs1, " + mask + ";\n"
           "\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"
           " [%r2+8], %rs1;\n"
           "WAIT:\n"
           "\tmbarrier.try_wait.parity.shared::cta.b64 %p3, [%r2+8], 0;\n"
           "\t@!%p3 bra WAIT;\n"
           "\tst.global.u32 [%rd3], 9;\n"
           "DONE:\n"
           "\tret;\n";
  };
  Outcome run = launchCluster(clusterKernel(body("3")), 128, 2, 2);
  EXPECT_TRUE(run.report.clean())
      << all(run.report.errors) << all(run.report.barrierMisuse) << all(run.report.deadlock);
  EXPECT_EQ(run.out[0], 9u);
  EXPECT_EQ(run.out[128], 9u);
  Outcome one = launchCluster(clusterKernel(body("1")), 128, 2, 2);
  EXPECT_FALSE(one.report.deadlock.empty());
}

TEST(EmulatorCluster, SharedAddressesCarryTheRankAboveBit24) {
  // A CTA's own shared variable is at rank << 24 plus its offset, and mapa
  // of it to rank r differs only there (CUTLASS's 2-SM TMA clears bit 24 of
  // its own mbarrier's address to name the even CTA's).
  Outcome run = launchCluster(clusterKernel("\tmov.u32 %r7, 0;\n"
                                            "\tmapa.shared::cluster.u32 %r8, %r2, %r7;\n"
                                            "\tsub.u32 %r9, %r2, %r8;\n"
                                            "\tst.global.u32 [%rd3], %r9;\n"
                                            "\tret;\n"),
                              128, 2, 2);
  EXPECT_TRUE(run.report.clean()) << all(run.report.errors);
  EXPECT_EQ(run.out[0], 0u);
  EXPECT_EQ(run.out[128], 1u << 24);
}

TEST(EmulatorCluster, GetctarankNamesTheOwner) {
  // Each CTA maps its variable to the next rank and asks whose it is, in the
  // cluster's window and through generic addresses.
  Outcome run = launchCluster(clusterKernel("\tadd.u32 %r7, %r3, 1;\n"
                                            "\trem.u32 %r7, %r7, 4;\n"
                                            "\tmapa.shared::cluster.u32 %r8, %r2, %r7;\n"
                                            "\tgetctarank.shared::cluster.u32 %r9, %r8;\n"
                                            "\tcvt.u64.u32 %rd6, %r2;\n"
                                            "\tcvta.shared.u64 %rd5, %rd6;\n"
                                            "\tmapa.u64 %rd7, %rd5, %r7;\n"
                                            "\tgetctarank.u64 %r10, %rd7;\n"
                                            "\tmad.lo.u32 %r11, %r9, 10, %r10;\n"
                                            "\tst.global.u32 [%rd3], %r11;\n"
                                            "\tret;\n"),
                              128, 4, 4);
  EXPECT_TRUE(run.report.clean()) << all(run.report.errors);
  for (uint32_t cta = 0; cta < 4; ++cta)
    EXPECT_EQ(run.out[cta * 128], (cta + 1) % 4 * 11) << "cta " << cta;
}

TEST(EmulatorCluster, MisusesAreNamed) {
  // A peer's address given to a .shared::cta load.
  Outcome cta = launchCluster(clusterKernel("\tmov.u32 %r7, 1;\n"
                                            "\tmapa.shared::cluster.u32 %r8, %r2, %r7;\n"
                                            "\tsetp.ne.u32 %p1, %r3, 0;\n"
                                            "\t@%p1 bra DONE;\n"
                                            "\tld.shared.u32 %r9, [%r8];\n"
                                            "DONE:\n"
                                            "\tret;\n"),
                              128, 2, 2);
  EXPECT_NE(all(cta.report.errors).find("given to a .shared::cta access"), std::string::npos)
      << all(cta.report.errors);
  // mapa to a rank the cluster does not have.
  Outcome rank = launchCluster(clusterKernel("\tmov.u32 %r7, 2;\n"
                                             "\tmapa.shared::cluster.u32 %r8, %r2, %r7;\n"
                                             "\tret;\n"),
                               128, 2, 2);
  EXPECT_NE(all(rank.report.errors).find("mapa to CTA rank 2 of a 2-CTA cluster"),
            std::string::npos)
      << all(rank.report.errors);
  // A wait without an arrive; a second arrive before the wait.
  Outcome wait = launchCluster(clusterKernel("\tbarrier.cluster.wait.aligned;\n"
                                             "\tret;\n"),
                               128, 2, 2);
  EXPECT_NE(all(wait.report.errors).find("without a barrier.cluster.arrive"),
            std::string::npos);
  Outcome twice = launchCluster(clusterKernel("\tbarrier.cluster.arrive.aligned;\n"
                                              "\tbarrier.cluster.arrive.aligned;\n"
                                              "\tbarrier.cluster.wait.aligned;\n"
                                              "\tret;\n"),
                                128, 2, 2);
  EXPECT_GE(twice.report.barrierMisuseCount, 1);
}

TEST(EmulatorCluster, LaunchesThatCannotBeClustersAreRefused) {
  std::string ptx = clusterKernel("\tret;\n");
  EXPECT_NE(launchCluster(ptx, 128, 3, 2).launchError.find("not a multiple of the cluster's"),
            std::string::npos);
  EXPECT_NE(launchCluster(ptx, 128, 17, 17).launchError.find("a cluster of 17 CTAs"),
            std::string::npos);
  EXPECT_NE(launchCluster(ptx, 96, 2, 2).launchError.find("whole warpgroups"),
            std::string::npos);
  // .reqnctapercluster is the launch's cluster unless it gives another.
  std::string fixed = clusterKernel("\tmov.u32 %r7, %cluster_nctarank;\n"
                                    "\tst.global.u32 [%rd3], %r7;\n"
                                    "\tret;\n",
                                    false, ".reqnctapercluster 2, 1, 1\n");
  Outcome implied = launchCluster(fixed, 128, 2, 1);
  ASSERT_TRUE(implied.launchError.empty()) << implied.launchError;
  EXPECT_EQ(implied.out[0], 2u);
  EXPECT_NE(launchCluster(fixed, 128, 4, 4).launchError.find("requires .reqnctapercluster 2,1,1"),
            std::string::npos);
}

TEST(EmulatorCluster, PairCollectivesNeedBothCtasToAgree) {
  // Warp 0 of each CTA allocates; rank 1 asks for `peerColumns`.
  auto alloc = [](const std::string &peerColumns) {
    return clusterKernel("\tshr.u32 %r7, %r1, 5;\n"
                         "\tsetp.ne.u32 %p1, %r7, 0;\n"
                         "\t@%p1 bra DONE;\n"
                         "\tmov.u32 %r8, 64;\n"
                         "\tsetp.ne.u32 %p2, %r3, 0;\n"
                         "\t@%p2 mov.u32 %r8, " + peerColumns + ";\n"
                         "\ttcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%r2], %r8;\n"
                         "\tld.shared.u32 %r9, [%r2];\n"
                         "\ttcgen05.dealloc.cta_group::2.sync.aligned.b32 %r9, %r8;\n"
                         "\tst.global.u32 [%rd3], %r8;\n"
                         "DONE:\n"
                         "\tret;\n");
  };
  Outcome agree = launchCluster(alloc("64"), 128, 2, 2);
  EXPECT_TRUE(agree.report.clean())
      << all(agree.report.errors) << all(agree.report.deadlock);
  EXPECT_EQ(agree.out[128], 64u);
  Outcome differ = launchCluster(alloc("128"), 128, 2, 2);
  EXPECT_NE(all(differ.report.errors).find("must issue the same instruction"),
            std::string::npos)
      << all(differ.report.errors);
  // A CTA without a peer.
  Outcome alone = launchCluster(alloc("64"), 128, 1, 1);
  EXPECT_NE(all(alone.report.errors).find("needs the peer CTA of rank 1"), std::string::npos)
      << all(alone.report.errors);
}

TEST(EmulatorCluster, AKernelNamesOneCtaGroup) {
  std::string error;
  std::shared_ptr<const Program> program;
  EXPECT_FALSE(succeeds(
      parsePtx(clusterKernel("\ttcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%r2], 32;\n"
                             "\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n"
                             "\tret;\n")),
      program, error));
  EXPECT_NE(error.find("names another .cta_group"), std::string::npos) << error;
}


TEST(EmulatorCluster, ARelaxedRemoteArriveReleasesOnlyWhatAFenceOrdered) {
  Outcome release = launchCluster(
      handOver("", "mbarrier.arrive.release.cluster.shared::cluster.b64"), 128, 2, 2);
  EXPECT_TRUE(release.report.clean()) << all(release.report.hazards);
  Outcome relaxed = launchCluster(
      handOver("", "mbarrier.arrive.relaxed.cluster.shared::cluster.b64"), 128, 2, 2);
  EXPECT_NE(all(relaxed.report.hazards).find("that warp 0 of CTA rank 1 wrote"),
            std::string::npos)
      << all(relaxed.report.hazards);
  Outcome fenced = launchCluster(handOver("\tfence.acq_rel.cluster;\n",
                                          "mbarrier.arrive.relaxed.cluster.shared::cluster.b64"),
                                 128, 2, 2);
  EXPECT_TRUE(fenced.report.clean()) << all(fenced.report.hazards);
}

TEST(EmulatorCluster, AnMbarrierUsedBeforeItsInitIsOrderedIsAHazard) {
  // Rank 1 arrives on rank 0's mbarrier with no cluster barrier after the
  // init: whatever the schedule, the use is unordered with the init.
  std::string body = handOver("", "mbarrier.arrive.release.cluster.shared::cluster.b64");
  body.erase(body.find("\tbarrier.cluster.arrive.aligned;\n"),
             std::string("\tbarrier.cluster.arrive.aligned;\n"
                         "\tbarrier.cluster.wait.aligned;\n").size());
  for (uint64_t seed = 0; seed < 4; ++seed) {
    Outcome run = launchCluster(body, 128, 2, 2, 4096, nullptr, seed);
    bool named = all(run.report.hazards).find("mbarrier.init") != std::string::npos ||
                 all(run.report.errors).find("before mbarrier.init") != std::string::npos;
    EXPECT_TRUE(named) << "seed " << seed << "\n"
                       << all(run.report.hazards) << all(run.report.errors);
  }
}

TEST(EmulatorCluster, ClusterQualifiersOnlyWhereThePtxIsaHasThem) {
  std::string error;
  std::shared_ptr<const Program> program;
  for (const char *line : {"\tld.shared::cluster.multicast::cluster.u32 %r7, [%r2];\n",
                           "\tst.shared.cta_group::2.u32 [%r2], %r1;\n",
                           "\ttcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned %r2;\n",
                           "\tbarrier.cluster.arrive.release.relaxed;\n"}) {
    EXPECT_FALSE(succeeds(parsePtx(clusterKernel(std::string(line) + "\tret;\n")),
                          program, error))
        << line;
  }
  // mapa.shared::cluster takes .u64 too.
  Outcome wide = launchCluster(clusterKernel("\tcvt.u64.u32 %rd5, %r2;\n"
                                             "\tmov.u32 %r7, 1;\n"
                                             "\tmapa.shared::cluster.u64 %rd6, %rd5, %r7;\n"
                                             "\tcvt.u32.u64 %r8, %rd6;\n"
                                             "\tsub.u32 %r9, %r8, %r2;\n"
                                             "\tst.global.u32 [%rd3], %r9;\n"
                                             "\tret;\n"),
                               128, 2, 2);
  EXPECT_TRUE(wide.report.clean()) << all(wide.report.errors);
  EXPECT_EQ(wide.out[0], 1u << 24);
  EXPECT_EQ(wide.out[128], 0u);
}

TEST(EmulatorCluster, EachCtaHasItsOwnRegisterFile) {
  // 512 threads a CTA start with 128 registers a thread (64K / 512), in a
  // cluster as alone: a decrease to 96 is one.
  Outcome run = launchCluster(clusterKernel("\tsetmaxnreg.dec.sync.aligned.u32 96;\n"
                                            "\tret;\n"),
                              512, 2, 2);
  ASSERT_TRUE(run.launchError.empty()) << run.launchError;
  EXPECT_TRUE(run.report.clean()) << all(run.report.errors);
}

TEST(EmulatorCluster, FenceMbarrierInitReleasesOnlyTheInits) {
  // Rank 0's thread 0 stores a word, then fence.mbarrier_init and a relaxed
  // cluster arrive: the store is not released; rank 1's read of it races.
  std::string body = "\tsetp.ne.u32 %p1, %r1, 0;\n"
                     "\tsetp.ne.u32 %p2, %r3, 0;\n"
                     "\tor.pred %p4, %p1, %p2;\n"
                     "\t@%p4 bra SYNC;\n"
                     "\tst.shared.u32 [%r2+64], 99;\n"
                     "\tFENCE;\n"
                     "SYNC:\n"
                     "\tbarrier.cluster.arrive.relaxed.aligned;\n"
                     "\tbarrier.cluster.wait.aligned;\n"
                     "\tmov.u32 %r7, 0;\n"
                     "\tmapa.shared::cluster.u32 %r8, %r2, %r7;\n"
                     "\tld.shared::cluster.u32 %r9, [%r8+64];\n"
                     "\tst.global.u32 [%rd3], %r9;\n"
                     "\tbarrier.cluster.arrive.aligned;\n"
                     "\tbarrier.cluster.wait.aligned;\n"
                     "\tret;\n";
  auto with = [&](const std::string &fence) {
    std::string text = body;
    text.replace(text.find("FENCE"), 5, fence);
    return launchCluster(clusterKernel(text), 128, 2, 2);
  };
  Outcome light = with("fence.mbarrier_init.release.cluster");
  EXPECT_NE(all(light.report.hazards).find("st.shared.u32 [%r2+64], 99"), std::string::npos)
      << all(light.report.hazards);
  Outcome full = with("fence.acq_rel.cluster");
  EXPECT_TRUE(full.report.clean()) << all(full.report.hazards);
}

TEST(EmulatorCluster, APeersSharedMemoryEndsWithItsCta) {
  // Rank 0 exits after one cluster barrier; rank 1 then stores into rank
  // 0's shared memory: an error if rank 0 has exited, a hazard at its exit
  // if not (the store is not ordered before it) — either way reported.
  std::string body = "\tbarrier.cluster.arrive.aligned;\n"
                     "\tbarrier.cluster.wait.aligned;\n"
                     "\tsetp.eq.u32 %p1, %r3, 0;\n"
                     "\t@%p1 bra DONE;\n"
                     "\tmov.u32 %r7, 0;\n"
                     "\tmapa.shared::cluster.u32 %r8, %r2, %r7;\n"
                     "\tst.shared::cluster.u32 [%r8+64], %r1;\n"
                     "DONE:\n"
                     "\tret;\n";
  for (uint64_t seed = 0; seed < 4; ++seed) {
    Outcome run = launchCluster(clusterKernel(body), 128, 2, 2, 4096, nullptr, seed);
    bool named = all(run.report.errors).find("which has exited") != std::string::npos ||
                 all(run.report.hazards).find("not ordered before the exit") !=
                     std::string::npos;
    EXPECT_TRUE(named) << "seed " << seed << "\n"
                       << all(run.report.errors) << all(run.report.hazards);
  }
}

TEST(EmulatorCluster, TheTmemAddressAllocWritesIsRaced) {
  // Warp 0 allocates; warp 1 reads the address with no synchronization.
  Outcome run = launchCluster(
      clusterKernel("\tshr.u32 %r7, %r1, 5;\n"
                    "\tsetp.ne.u32 %p1, %r7, 0;\n"
                    "\t@%p1 bra READ;\n"
                    "\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r2], 32;\n"
                    "\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n"
                    "\tbar.sync 1, 64;\n"
                    "\tld.shared.u32 %r8, [%r2];\n"
                    "\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r8, 32;\n"
                    "\tret;\n"
                    "READ:\n"
                    "\tsetp.ne.u32 %p2, %r7, 1;\n"
                    "\t@%p2 bra DONE;\n"
                    "\tld.shared.u32 %r9, [%r2];\n"
                    "\tbar.sync 1, 64;\n"
                    "DONE:\n"
                    "\tret;\n"),
      128, 1, 1);
  bool named = all(run.report.hazards).find("tcgen05.alloc") != std::string::npos;
  EXPECT_TRUE(named) << all(run.report.hazards) << all(run.report.errors);
}

TEST(EmulatorCluster, ARelaxedWaitAcquiresAtTheNextFence) {
  // Rank 0 waits relaxed for rank 1's release arrive, then reads the word
  // rank 1 stored: a race, unless a fence comes between the wait and the
  // read.
  auto waitedWith = [](const std::string &after) {
    std::string body = handOver("", "mbarrier.arrive.release.cluster.shared::cluster.b64");
    const std::string wait =
        "\tmbarrier.try_wait.parity.shared::cta.b64 %p3, [%r2+8], 0;\n";
    body.replace(body.find(wait), wait.size(),
                 "\tmbarrier.try_wait.parity.relaxed.cluster.shared::cta.b64 %p3, "
                 "[%r2+8], 0;\n");
    const std::string read = "\tld.shared.u32 %r7, [%r2+16];\n";
    body.replace(body.find(read), read.size(), after + read);
    return launchCluster(body, 128, 2, 2);
  };
  Outcome bare = waitedWith("");
  EXPECT_NE(all(bare.report.hazards).find("ld.shared.u32 %r7, [%r2+16]"), std::string::npos)
      << all(bare.report.hazards);
  Outcome fenced = waitedWith("\tfence.acq_rel.cluster;\n");
  EXPECT_TRUE(fenced.report.clean()) << all(fenced.report.hazards);
}

TEST(EmulatorCluster, FencesOutsideTheModelledFormsAreRefused) {
  std::string error;
  std::shared_ptr<const Program> program;
  for (const char *line : {"\tfence.bogus;\n", "\tmembar.foo;\n",
                           "\tfence.acquire.sync_restrict::shared::cluster.cluster;\n",
                           "\tfence.mbarrier_init.acquire.cta;\n",
                           "\tfence.sc.acq_rel;\n"}) {
    EXPECT_FALSE(succeeds(parsePtx(clusterKernel(std::string(line) + "\tret;\n")),
                          program, error))
        << line;
  }
  for (const char *line : {"\tfence.sc.cluster;\n", "\tfence.acq_rel.gpu;\n",
                           "\tmembar.gl;\n", "\tfence.mbarrier_init.release.cluster;\n",
                           "\tfence.proxy.async.shared::cta;\n"})
    EXPECT_TRUE(succeeds(parsePtx(clusterKernel(std::string(line) + "\tret;\n")),
                         program, error))
        << line << error;
}
