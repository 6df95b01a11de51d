//===- cute-gemm-2cta.cu - a 2-CTA tcgen05 GEMM, CuTe's 2-SM descriptors --===//
//
// Device code for a cross-check of fa4-emu's thread-block clusters and
// tcgen05's .cta_group::2, compiled by nvcc to PTX for sm_100a. A cluster of
// two CTAs of 128 threads, a CTA pair, computes
//
//   C[256 x N] (f32, row-major) = A[256 x K] (f16, K-major) * B[N x K]^T
//
// with one tcgen05.mma.cta_group::2.kind::f16 (M = 256, K = 16) per K step,
// issued by one thread of the even CTA (cluster rank 0, the leader) only.
// CuTe's SM100_MMA_F16BF16_2x1SM_SS atom splits the operands between the
// two CTAs, and the kernel lays them out as it says:
//
//   - CTA r holds rows [128 r, 128 r + 128) of A and rows
//     [r N/2, r N/2 + N/2) of B, each in CuTe's canonical K-major
//     128B-swizzled layout, at the same shared-memory offsets in both CTAs;
//   - the accumulator's rows [128 r, 128 r + 128) are TMEM lanes 0-127 of
//     CTA r (the ISA's data-path Layout A, M = 256), N f32 columns each.
//
// The leader's descriptors, computed on the device by CuTe (make_umma_desc
// through the atom's fragments, make_instr_desc with M = 256) from its own
// tiles, stand for both CTAs' tiles: the pair's MMA reads the peer's halves at
// the same shared-memory offsets. That is CuTe's convention (the atom's
// layouts, one descriptor per operand); the PTX ISA says only that the
// descriptor locates the matrix "in the shared memory of the current CTA",
// that B lies "in Shared Memory of the current CTA and optionally in peer
// CTA", and that .cta_group::2 performs the MMA "on the Tensor Memory of the
// executing thread's CTA and its peer CTA" (data-path Layout A for M = 256).
//
// The sequence, every tcgen05 instruction .cta_group::2 as the ISA requires
// of a kernel that has one:
//
//   1. warp 0 of each CTA: tcgen05.alloc (collective across the pair: both
//      allocations are one, held jointly) and relinquish_alloc_permit;
//      thread 0 of each CTA initializes its two mbarriers (`loaded`,
//      `computed`, one arrival each); barrier.cluster.arrive.release / wait
//      .acquire, so that each CTA sees the other's initialized mbarriers and
//      the allocation before anything signals them.
//   2. one thread of each CTA issues its TMA loads (its A half, its B half)
//      with .cta_group::2, completing on the LEADER's `loaded` (reached
//      through mapa); the leader alone expects both CTAs' bytes on it.
//   3. the leader waits on `loaded`, issues the MMAs and a tcgen05.commit
//      .multicast::cluster with mask 0b11: one arrival on `computed` at the
//      same offset in both CTAs once the MMAs are done.
//   4. each CTA waits on its own `computed`, and each of its warps loads its
//      32 TMEM lanes (tcgen05.ld) and stores C's rows 128 r + 32 w + lane.
//   5. a cluster barrier (no CTA deallocates while the other still reads
//      TMEM), then warp 0 of each CTA deallocates, collectively again.
//
// Two spellings of steps 2 and 3: fa4's (inline PTX, the ISA's qualifier
// order, the leader's mbarrier through mapa, one elected thread issuing the
// MMAs) and CuTe's own (SM100_TMA_2SM_LOAD_2D::copy, which finds the leader's
// mbarrier by clearing bit 24 of the CTA's own shared address, and the atom's
// fma, which elects a lane itself and passes the 8-word disable-output-lane
// vector). Only the instructions differ; the descriptors are the same.
//
// The tensor maps arrive as __grid_constant__ parameters, as in
// cute-gemm.cu, but their boxes are one CTA's share: 128 bytes of K (64
// elements) by 128 rows for A, by N/2 rows for B. A launch is one cluster:
// grid (2, 1, 1), block (128, 1, 1), cluster (2, 1, 1) (compiled in, PTX's
// .reqnctapercluster), and per CTA (128 + N/2) * K * 2 + 20 bytes of dynamic
// shared memory.
//
//===----------------------------------------------------------------------===//

#include "tcgen05-gemm.cuh"
#include "tma-load.cuh"

#include <cute/arch/copy_sm100_tma.hpp>
#include <cute/arch/mma_sm100_desc.hpp>
#include <cute/arch/mma_sm100_umma.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>

#include <cstdint>

namespace {

using namespace cute;

/// Rows of C: both CTAs' together, and each one's.
constexpr int kM = 256;
constexpr int kRowsPerCta = kM / 2;
constexpr int kThreads = 128;
/// f16 elements of one 128-byte swizzle row (a TMA box's inner extent), and
/// of one tcgen05.mma's K (32 bytes).
constexpr int kBlockK = 64;
constexpr int kStepK = 16;

/// Which instructions steps 2 and 3 use (see the header).
enum class Spelling { Fa4, Cute };

template <int N>
using Mma2Sm = SM100_MMA_F16BF16_2x1SM_SS<half_t, half_t, float, kM, N,
                                          UMMA::Major::K, UMMA::Major::K>;

__device__ uint32_t clusterRank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

/// Every thread of both CTAs: what each did before is visible to the other
/// after.
__device__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/// The shared::cluster address of the variable at shared address `address`
/// in the CTA of cluster rank `rank`.
__device__ uint32_t mapShared(uint32_t address, uint32_t rank) {
  uint32_t mapped;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(mapped)
               : "r"(address), "r"(rank));
  return mapped;
}

/// A 2-d TMA tile load of the box at (inner, outer) of `map` into this CTA's
/// `destination`, its bytes completing on the mbarrier at shared::cluster
/// address `barrier`, which .cta_group::2 lets be the peer CTA's.
__device__ void tmaLoadPair(uint32_t destination, CUtensorMap const &map,
                            int32_t inner, int32_t outer, uint32_t barrier) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile."
               "mbarrier::complete_tx::bytes.cta_group::2 [%0], [%1, {%2, "
               "%3}], [%4];" ::"r"(destination),
               "l"(reinterpret_cast<uint64_t>(&map)), "r"(inner), "r"(outer),
               "r"(barrier)
               : "memory");
}

template <int N, int K, Spelling How>
__device__ void gemm2Cta(CUtensorMap const &mapA, CUtensorMap const &mapB,
                         float *c) {
  static_assert(K % kBlockK == 0 && N % 32 == 0 && N >= 32 && N <= 256,
                "K in whole 128-byte blocks, N in whole 32-column loads "
                "(and N / 2 rows of B a CTA)");
  constexpr uint32_t kColumns = N <= 32 ? 32 : N <= 64 ? 64 : N <= 128 ? 128 : 256;

  // CuTe's 2-SM atom and one CTA's share of the 256 x N x K tile: A's
  // ((128, 16), 1, K / 16), B's ((N / 2, 16), 1, K / 16), laid out as CuTe's
  // tutorial for this atom lays them (UMMA::tile_to_mma_shape of the K-major
  // 128B-swizzled atom): 8-row x 128-byte atoms down the rows, K-blocks after
  // all rows, the same bytes as cute-gemm.cu's (rows, K) layouts.
  auto tiledMma = make_tiled_mma(Mma2Sm<N>{});
  auto shapeA = partition_shape_A(tiledMma, make_shape(Int<kM>{}, Int<K>{}));
  auto shapeB = partition_shape_B(tiledMma, make_shape(Int<N>{}, Int<K>{}));
  static_assert(decltype(size<0, 0>(shapeA))::value == kRowsPerCta &&
                decltype(size<0, 0>(shapeB))::value == N / 2);
  auto layoutA = UMMA::tile_to_mma_shape(UMMA::Layout_K_SW128_Atom<half_t>{},
                                         shapeA);
  auto layoutB = UMMA::tile_to_mma_shape(UMMA::Layout_K_SW128_Atom<half_t>{},
                                         shapeB);
  constexpr int kBytesA = cosize_v<decltype(layoutA)> * sizeof(half_t);
  constexpr int kBytesB = cosize_v<decltype(layoutB)> * sizeof(half_t);
  static_assert(kBytesA == kRowsPerCta * K * 2 && kBytesB == N / 2 * K * 2);

  // Shared memory, the same in both CTAs: A's half, B's half (both on
  // 1024-byte swizzle-pattern repeats), the two mbarriers, the TMEM address.
  extern __shared__ __align__(1024) uint8_t shared[];
  half_t *a = reinterpret_cast<half_t *>(shared);
  half_t *b = reinterpret_cast<half_t *>(shared + kBytesA);
  uint64_t *barriers = reinterpret_cast<uint64_t *>(shared + kBytesA + kBytesB);
  uint32_t *tmemSlot = reinterpret_cast<uint32_t *>(barriers + 2);
  uint32_t loaded = sharedAddress(&barriers[0]);
  uint32_t computed = sharedAddress(&barriers[1]);

  Tensor sA = make_tensor(make_smem_ptr(a), layoutA); // ((128, 16), 1, steps)
  Tensor sB = make_tensor(make_smem_ptr(b), layoutB); // ((N/2, 16), 1, steps)

  // CuTe's descriptors, one per K step, from this CTA's own tiles (only the
  // leader's are issued). The slice is this CTA's peer coordinate in the
  // atom (its rank in the pair), as CuTe's tutorial takes it; the fragments
  // are descriptors of the tiles it is given either way.
  const uint32_t rank = clusterRank();
  const uint32_t peer = rank & 1; // 0: the leader (even), 1: its peer (odd)
  const uint32_t leader = rank & ~1u;
  auto slice = tiledMma.get_slice(peer);
  Tensor descA = slice.make_fragment_A(sA); // (1, 1, steps)
  Tensor descB = slice.make_fragment_B(sB); // (1, 1, steps)
  constexpr int kSteps = K / kStepK;
  static_assert(decltype(size<2>(descA))::value == kSteps &&
                decltype(size<2>(descB))::value == kSteps);
  UMMA::InstrDescriptor idesc =
      UMMA::make_instr_desc<half_t, half_t, float, kM, N, UMMA::Major::K,
                            UMMA::Major::K>();

  // 1. The pair's TMEM, the mbarriers, and a cluster barrier.
  int warp = threadIdx.x / 32;
  if (warp == 0) {
    asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 "
                 "[%0], %1;" ::"r"(sharedAddress(tmemSlot)),
                 "r"(kColumns)
                 : "memory");
    asm volatile(
        "tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;");
  }
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(loaded));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(computed));
    // The other CTA's TMA and the leader's tcgen05.commit must see them.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  clusterSync();
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  uint32_t tmem = *reinterpret_cast<uint32_t volatile *>(tmemSlot);

  if (warp == 0) {
    const uint32_t elected = electedLane();
    // 2. Each CTA loads its shares, onto the leader's `loaded`, which
    // expects both CTAs' bytes. (A peer's bytes may land before the
    // leader's expect_tx: the phase still waits for the leader's arrival.)
    if (elected) {
      if (peer == 0)
        asm volatile(
            "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                loaded),
            "r"(2 * (kBytesA + kBytesB))
            : "memory");
      const int32_t rowA = int32_t(peer) * kRowsPerCta;
      const int32_t rowB = int32_t(peer) * (N / 2);
      uint32_t leaderLoaded = 0;
      if constexpr (How == Spelling::Fa4)
        leaderLoaded = mapShared(loaded, leader);
      for (int block = 0; block < K / kBlockK; ++block) {
        const int step = block * (kBlockK / kStepK);
        half_t *blockA = raw_pointer_cast(&sA(make_coord(0, 0), 0, step));
        half_t *blockB = raw_pointer_cast(&sB(make_coord(0, 0), 0, step));
        if constexpr (How == Spelling::Fa4) {
          tmaLoadPair(sharedAddress(blockA), mapA, block * kBlockK, rowA,
                      leaderLoaded);
          tmaLoadPair(sharedAddress(blockB), mapB, block * kBlockK, rowB,
                      leaderLoaded);
        } else {
          // CuTe's: given this CTA's own mbarrier, it clears bit 24 of its
          // shared address to name the even CTA's.
          SM100_TMA_2SM_LOAD_2D::copy(
              &mapA, &barriers[0],
              uint64_t(TMA::CacheHintSm90::EVICT_NORMAL), blockA,
              block * kBlockK, rowA);
          SM100_TMA_2SM_LOAD_2D::copy(
              &mapB, &barriers[0],
              uint64_t(TMA::CacheHintSm90::EVICT_NORMAL), blockB,
              block * kBlockK, rowB);
        }
      }
    }
    __syncwarp();

    // 3. The leader: wait for both CTAs' tiles, one MMA per K step over the
    // pair, and one commit that arrives on both CTAs' `computed`.
    if (peer == 0) {
      waitParity(loaded, 0);
      asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
      for (int step = 0; step < kSteps; ++step) {
        uint64_t da = descA(0, 0, step);
        uint64_t db = descB(0, 0, step);
        if constexpr (How == Spelling::Fa4) {
          if (elected)
            asm volatile("{\n\t"
                         ".reg .pred accumulate;\n\t"
                         "setp.ne.b32 accumulate, %4, 0;\n\t"
                         "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, "
                         "%3, accumulate;\n\t"
                         "}" ::"r"(tmem),
                         "l"(da), "l"(db), "r"(uint32_t(idesc)), "r"(step)
                         : "memory");
        } else {
          // The whole warp: the atom elects its issuing lane.
          Mma2Sm<N>::fma(da, db, tmem, uint32_t(step != 0),
                         UMMA::make_runtime_instr_desc<>(idesc));
        }
      }
      if (elected)
        asm volatile(
            "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::"
            "cluster.multicast::cluster.b64 [%0], %1;" ::"r"(computed),
            "h"(uint16_t(0b11u << leader))
            : "memory");
      __syncwarp();
    }
  }

  // 4. Every warp of each CTA reads its 32 TMEM lanes: row 128 r + 32 w +
  // lane of C.
  waitParity(computed, 0);
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  // A TMEM address holds the lane in bits 16-31, the column in 0-15.
  uint32_t quadrant = static_cast<uint32_t>(warp * 32) << 16;
  float *row =
      c + (int(peer) * kRowsPerCta + warp * 32 + int(threadIdx.x % 32)) * N;
  for (int column = 0; column < N; column += 32)
    storeColumns(tmem + quadrant, row, column);

  // 5. Neither CTA deallocates while the other may still read its TMEM.
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  clusterSync();
  if (warp == 0) {
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    asm volatile(
        "tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;" ::"r"(tmem),
        "r"(kColumns)
        : "memory");
  }
}

} // namespace

/// One entry per case, with an unmangled name: (A's map, B's map, C), as
/// cute-gemm.cu's, launched as one cluster of two CTAs (see the header).
#define FA4_GEMM_2CTA_ENTRY_OF(Name, N, K, How)                                \
  extern "C" __global__ void __cluster_dims__(2, 1, 1)                         \
      __launch_bounds__(kThreads)                                              \
          Name(const __grid_constant__ CUtensorMap mapA,                       \
               const __grid_constant__ CUtensorMap mapB, float *c) {           \
    gemm2Cta<N, K, Spelling::How>(mapA, mapB, c);                              \
  }
#define FA4_GEMM_2CTA_ENTRY(Columns, Depth)                                    \
  FA4_GEMM_2CTA_ENTRY_OF(cute_gemm_2cta_n##Columns##_k##Depth, Columns, Depth, \
                         Fa4)

FA4_GEMM_2CTA_ENTRY(128, 128)
// N = 256: 128 rows of B a CTA, as tall as a TMA box may be.
FA4_GEMM_2CTA_ENTRY(256, 64)
// N = 64: 32 rows of B a CTA, over three K-blocks.
FA4_GEMM_2CTA_ENTRY(64, 192)
// CuTe's own spelling of the loads and the MMA (bit 24 for the leader's
// mbarrier, the atom's elect and disable-output-lane form).
FA4_GEMM_2CTA_ENTRY_OF(cute_gemm_2cta_cute_n128_k128, 128, 128, Cute)
