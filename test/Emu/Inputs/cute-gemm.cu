//===- cute-gemm.cu - a small TMA + tcgen05 GEMM with CuTe's descriptors --===//
//
// Device code for test/Emu/cute-gemm.test, compiled by nvcc to PTX for
// sm_100a and run in fa4-emu. One CTA of 128 threads computes
//
//   C[128 x N] (f32, row-major) = A[128 x K] (K-major) * B[N x K]^T
//
// in f16 (kind::f16, one tcgen05.mma per K = 16 step) or in the 8-bit floats
// e4m3 and e5m2 (kind::f8f6f4, K = 32 a step; A's and B's types may differ,
// and B may be MN-major, B^T[K x N] row-major, as fa4's V). The instructions
// are inline PTX, as fa4's own kernels spell them; what the kernel takes from
// NVIDIA's CuTe is the part fa4 and the emulator must agree with CuTe on: the
// shared-memory layouts of A and B (CuTe's canonical 128B-swizzled UMMA
// atoms), the shared-memory descriptor of every K step (CuTe's
// make_umma_desc through the fragments of its SM100 MMA atom,
// SM100_MMA_F16BF16_SS or SM100_MMA_F8F6F4_SS, advanced along K the way
// CuTe's mainloops do), and the instruction descriptor (CuTe's
// make_instr_desc). CuTe computes all three on the device, so the emulator
// runs CuTe's own descriptor arithmetic as nvcc compiled it. One entry is
// broken on purpose, so that the test can fail: its 8-bit descriptors step
// 16 bytes a K step where 32 elements of 8 bits are 32 bytes.
//
// The tensor maps arrive as __grid_constant__ kernel parameters: the host
// encodes them (in the test, fa4-emu's encoder), the kernel never builds one.
// Each map's box is 128 bytes (one swizzle row: 64 16-bit or 128 8-bit
// elements) by all rows of the operand, so a block of columns (a K-block, or
// an MN-major B's N-block) is one TMA copy that lands exactly where CuTe's
// layout places it.
//
//===----------------------------------------------------------------------===//

#include "tcgen05-gemm.cuh"
#include "tma-load.cuh"

#include <cute/arch/mma_sm100_desc.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>

#include <cstdint>

namespace {

using namespace cute;

constexpr int kM = 128;
constexpr int kThreads = 128;
/// Elements of one 128-byte swizzle row: the inner extent of one TMA box.
template <class Element> constexpr int kBlock = 128 / sizeof(Element);
/// One tcgen05.mma's K: 32 bytes of elements (16 of 16 bits, 32 of 8).
template <class Element> constexpr int kStep = 32 / sizeof(Element);

/// CuTe's SM100 atom for A and B of these types: kind::f16 for 16-bit
/// elements, kind::f8f6f4 for 8-bit ones.
template <class TA, class TB, int N, UMMA::Major MajorB>
using MmaOf = conditional_t<
    sizeof(TA) == 2,
    SM100_MMA_F16BF16_SS<TA, TB, float, kM, N, UMMA::Major::K, MajorB>,
    MMA_Traits<SM100_MMA_F8F6F4_SS, TA, TB, float, C<kM>, C<N>,
               integral_constant<UMMA::Major, UMMA::Major::K>,
               integral_constant<UMMA::Major, MajorB>,
               integral_constant<UMMA::ScaleIn, UMMA::ScaleIn::One>,
               integral_constant<UMMA::ScaleIn, UMMA::ScaleIn::One>>>;

template <class Element, int N, int K, UMMA::Major MajorB>
__device__ auto layoutOfB() {
  if constexpr (MajorB == UMMA::Major::K)
    return tile_to_shape(UMMA::Layout_K_SW128_Atom<Element>{},
                         make_shape(Int<N>{}, Int<K>{}));
  else
    // fa4's V: the 8-row K atoms of an N-block one after another, the
    // N-blocks outermost, so that each N-block is one dense TMA box.
    return tile_to_shape(UMMA::Layout_MN_SW128_Atom<Element>{},
                         make_shape(Int<N>{}, Int<K>{}), Step<_2, _1>{});
}

template <class TA, class TB, int N, int K, UMMA::Major MajorB,
          bool Step16 = false>
__device__ void gemm(CUtensorMap const &mapA, CUtensorMap const &mapB,
                     float *c) {
  static_assert(sizeof(TA) == sizeof(TB));
  constexpr int kBlockK = kBlock<TA>, kStepK = kStep<TA>;
  static_assert(K % kBlockK == 0 && N % 32 == 0 && N >= 32 && N <= 256 &&
                    (MajorB == UMMA::Major::K || N % kBlockK == 0),
                "K (and an MN-major B's N) in whole 128-byte blocks, N in "
                "whole 32-column loads");
  // TMEM is allocated in powers of two of at least 32 columns.
  constexpr uint32_t kColumns = N <= 32 ? 32 : N <= 64 ? 64 : N <= 128 ? 128 : 256;

  // A in CuTe's canonical K-major 128B-swizzled layout: 8-row x 128-byte
  // atoms stacked along M, K-blocks after all rows; B likewise, or MN-major.
  auto layoutA = tile_to_shape(UMMA::Layout_K_SW128_Atom<TA>{},
                               make_shape(Int<kM>{}, Int<K>{}));
  auto layoutB = layoutOfB<TB, N, K, MajorB>();
  constexpr int kBytesA = cosize_v<decltype(layoutA)> * sizeof(TA);
  constexpr int kBytesB = cosize_v<decltype(layoutB)> * sizeof(TB);

  // Shared memory: A, then B (both on 1024-byte swizzle-pattern repeats),
  // then the two mbarriers and the word tcgen05.alloc writes.
  extern __shared__ __align__(1024) uint8_t shared[];
  TA *a = reinterpret_cast<TA *>(shared);
  TB *b = reinterpret_cast<TB *>(shared + kBytesA);
  uint64_t *barriers = reinterpret_cast<uint64_t *>(shared + kBytesA + kBytesB);
  uint32_t *tmemSlot = reinterpret_cast<uint32_t *>(barriers + 2);
  uint32_t loaded = sharedAddress(&barriers[0]);
  uint32_t computed = sharedAddress(&barriers[1]);

  Tensor sA = make_tensor(make_smem_ptr(a), layoutA); // (M, K)
  Tensor sB = make_tensor(make_smem_ptr(b), layoutB); // (N, K)

  // CuTe's descriptors: its SM100 MMA atom partitions the tiles and makes
  // one descriptor per K step (the first step's descriptor, advanced by the
  // step's offset).
  auto slice = make_tiled_mma(MmaOf<TA, TB, N, MajorB>{}).get_slice(0);
  Tensor descA = slice.make_fragment_A(slice.partition_A(sA)); // (1, 1, steps)
  Tensor descB = slice.make_fragment_B(slice.partition_B(sB)); // (1, 1, steps)
  static_assert(decltype(size<2>(descA))::value * kStepK == K);
  uint32_t idesc = static_cast<uint32_t>(
      UMMA::make_instr_desc<TA, TB, float, kM, N, UMMA::Major::K, MajorB>());

  int warp = threadIdx.x / 32;
  if (warp == 0) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 "
                 "[%0], %1;" ::"r"(sharedAddress(tmemSlot)),
                 "r"(kColumns)
                 : "memory");
    asm volatile(
        "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;");
  }
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(loaded));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(computed));
    // The async proxy (TMA, tcgen05.commit) must see the initializations.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  uint32_t tmem = *reinterpret_cast<uint32_t volatile *>(tmemSlot);

  if (warp == 0) {
    const uint32_t elected = electedLane();
    if (elected) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                       loaded),
                   "r"(kBytesA + kBytesB)
                   : "memory");
      for (int block = 0; block < K / kBlockK; ++block)
        tmaLoad(sharedAddress(&sA(0, block * kBlockK)), mapA, block * kBlockK,
                0, loaded);
      if constexpr (MajorB == UMMA::Major::K)
        for (int block = 0; block < K / kBlockK; ++block)
          tmaLoad(sharedAddress(&sB(0, block * kBlockK)), mapB,
                  block * kBlockK, 0, loaded);
      else
        for (int block = 0; block < N / kBlockK; ++block)
          tmaLoad(sharedAddress(&sB(block * kBlockK, 0)), mapB,
                  block * kBlockK, 0, loaded);
      waitParity(loaded, 0);
      asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
      for (int step = 0; step < K / kStepK; ++step) {
        uint64_t da = descA(0, 0, step);
        uint64_t db = descB(0, 0, step);
        // The mutant: the first step's descriptors advanced by 16 bytes (one
        // unit of the start-address field) a step, where CuTe advances them
        // by 32.
        if constexpr (Step16) {
          da = uint64_t(descA(0, 0, 0)) + step;
          db = uint64_t(descB(0, 0, 0)) + step;
        }
        if constexpr (sizeof(TA) == 2)
          asm volatile("{\n\t"
                       ".reg .pred accumulate;\n\t"
                       "setp.ne.b32 accumulate, %4, 0;\n\t"
                       "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, "
                       "accumulate;\n\t"
                       "}" ::"r"(tmem),
                       "l"(da), "l"(db), "r"(idesc), "r"(step)
                       : "memory");
        else
          asm volatile("{\n\t"
                       ".reg .pred accumulate;\n\t"
                       "setp.ne.b32 accumulate, %4, 0;\n\t"
                       "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, "
                       "%3, accumulate;\n\t"
                       "}" ::"r"(tmem),
                       "l"(da), "l"(db), "r"(idesc), "r"(step)
                       : "memory");
      }
      asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one."
                   "shared::cluster.b64 [%0];" ::"r"(computed)
                   : "memory");
    }
    // The lanes that did not issue wait for the one that did: the
    // tcgen05.ld below is .sync.aligned, for the whole warp at once.
    __syncwarp();
  }

  // Every warp reads its 32 TMEM lanes: row (lane quadrant + lane) of C.
  waitParity(computed, 0);
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  // A TMEM address holds the lane in bits 16-31, the column in 0-15.
  uint32_t quadrant = static_cast<uint32_t>(warp * 32) << 16;
  float *row = c + (warp * 32 + threadIdx.x % 32) * N;
  for (int column = 0; column < N; column += 32)
    storeColumns(tmem + quadrant, row, column);

  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncthreads();
  if (warp == 0) {
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    asm volatile(
        "tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(tmem),
        "r"(kColumns)
        : "memory");
  }
}

} // namespace

/// One entry per case the test runs, with an unmangled name. A launch gives
/// it 128 threads and, as dynamic shared memory, the two tiles ((128 + N) *
/// K elements) and 20 bytes for the mbarriers and the TMEM address.
#define FA4_GEMM_ENTRY_OF(Name, TA, TB, MajorB, N, K, Step16)                  \
  extern "C" __global__ void __launch_bounds__(kThreads)                       \
      Name(const __grid_constant__ CUtensorMap mapA,                           \
           const __grid_constant__ CUtensorMap mapB, float *c) {               \
    gemm<TA, TB, N, K, UMMA::Major::MajorB, Step16>(mapA, mapB, c);            \
  }
#define FA4_GEMM_ENTRY(Columns, Depth)                                         \
  FA4_GEMM_ENTRY_OF(cute_gemm_n##Columns##_k##Depth, half_t, half_t, K,       \
                    Columns, Depth, false)

FA4_GEMM_ENTRY(128, 128)
FA4_GEMM_ENTRY(64, 64)
FA4_GEMM_ENTRY(256, 192)
// kind::f8f6f4: e4m3; e5m2 A against e4m3 B; an MN-major e4m3 B (fa4's V,
// which Blackwell's tensor core may read transposed in 8 bits too); and the
// mutant whose descriptors step 16 bytes.
FA4_GEMM_ENTRY_OF(cute_gemm_e4m3_n128_k256, float_e4m3_t, float_e4m3_t, K, 128,
                  256, false)
FA4_GEMM_ENTRY_OF(cute_gemm_e5m2_e4m3_n64_k128, float_e5m2_t, float_e4m3_t, K,
                  64, 128, false)
FA4_GEMM_ENTRY_OF(cute_gemm_e4m3_bmn_n128_k128, float_e4m3_t, float_e4m3_t, MN,
                  128, 128, false)
FA4_GEMM_ENTRY_OF(cute_gemm_e4m3_mutant_step16_n128_k128, float_e4m3_t,
                  float_e4m3_t, K, 128, 128, true)
