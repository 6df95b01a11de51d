//===- cute-gemm-sm90.cu - a small TMA + wgmma GEMM from CuTe's atoms ----===//
//
// Device code for test/Emu/cute-gemm-sm90.test, compiled by nvcc to PTX for
// sm_90a and run in fa4-emu. One warpgroup (128 threads) computes
//
//   C[64 x N] (f32, row-major) = A[64 x K] (K-major) * B[N x K]^T
//
// in f16 or bf16, with B K-major (B[N x K] row-major, as K in Q·K^T) or
// MN-major (B^T[K x N] row-major, as V in P·V), and A in shared memory (the
// SS form) or in registers (the RS form, as P in fa4's P·V); and in the 8-bit
// floats e4m3 and e5m2 (A's and B's may differ), whose wgmma takes both
// operands K-major and 32 elements of K a step.
//
// Where the sm_100a kernel (cute-gemm.cu) issues its own inline PTX, this one
// lets NVIDIA's CuTe write everything the tensor core reads: the shared-memory
// layouts (CuTe's canonical 128B-swizzled GMMA atoms), the wgmma instruction
// (CuTe's SM90 MMA atom, as its op selector picks it for the tile), the
// matrix descriptor of every K step (make_gmma_desc through the atom's
// fragments, advanced along K the way CuTe's mainloops do), the RS form's A
// fragment (CuTe's partition of A for the atom, loaded from shared memory)
// and the wgmma.fence / commit_group / wait_group around them. What the
// kernel spells itself comes from the PTX ISA: the TMA loads (inline PTX, as
// fa4's kernels spell them) and the accumulator fragment layout by which each
// thread stores C, so that a misreading of NVIDIA's encodings by the emulator
// shows as a wrong C.
//
// Each tensor map's box is 128 bytes (one swizzle row: 64 16-bit or 128 8-bit
// elements) by all rows of the operand as it lies in global memory, so one
// TMA copy lands a block of columns exactly where CuTe's layout places it: a
// K-block of A or of a K-major B, an N-block of an MN-major B.
//
// Two entries are broken on purpose, so that the test can fail: one permutes
// the bytes of the RS form's A registers (each 32-bit register's halves
// swapped, as a kernel that packed its P fragment in the wrong order would),
// one steps the descriptors 16 bytes a K step where 32 elements of 8 bits
// are 32 bytes.
//
//===----------------------------------------------------------------------===//

#include "tma-load.cuh"

#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cstdint>

namespace {

using namespace cute;

/// One wgmma's M: the warpgroup's 64 rows.
constexpr int kM = 64;
constexpr int kThreads = 128;
/// Elements of one 128-byte swizzle row: the inner extent of one TMA box.
template <class Element> constexpr int kBlock = 128 / sizeof(Element);
/// One wgmma's K: 32 bytes of elements (16 of 16 bits, 32 of 8).
template <class Element> constexpr int kStep = 32 / sizeof(Element);

/// The deliberate defects of the mutant entries.
enum class Mutant { None, FragmentBytes, DescriptorStep16 };

template <class Element, int N, int K, GMMA::Major MajorB>
__device__ auto layoutOfB() {
  if constexpr (MajorB == GMMA::Major::K)
    return tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                         make_shape(Int<N>{}, Int<K>{}));
  else
    // fa4's V: the 8-row K atoms of a 64-column N-block one after another,
    // the N-blocks outermost, so that each N-block is one dense TMA box.
    return tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{},
                         make_shape(Int<N>{}, Int<K>{}), Step<_2, _1>{});
}

template <class ElementA, class ElementB, int N, int K, GMMA::Major MajorB,
          bool RegistersA, Mutant Defect = Mutant::None>
__device__ void gemm(CUtensorMap const &mapA, CUtensorMap const &mapB,
                     float *c) {
  static_assert(sizeof(ElementA) == sizeof(ElementB));
  constexpr int kBlockK = kBlock<ElementA>, kStepK = kStep<ElementA>;
  static_assert(K % kBlockK == 0 &&
                (MajorB == GMMA::Major::K || N % kBlockK == 0),
                "K and an MN-major B's N in whole 128-byte TMA boxes");

  // A in CuTe's canonical K-major 128B-swizzled layout: 8-row x 128-byte
  // atoms stacked along M, K-blocks after all rows.
  auto layoutA = tile_to_shape(GMMA::Layout_K_SW128_Atom<ElementA>{},
                               make_shape(Int<kM>{}, Int<K>{}));
  auto layoutB = layoutOfB<ElementB, N, K, MajorB>();
  constexpr int kBytesA = cosize_v<decltype(layoutA)> * sizeof(ElementA);
  constexpr int kBytesB = cosize_v<decltype(layoutB)> * sizeof(ElementB);

  // Shared memory: A, then B (both on 1024-byte swizzle-pattern repeats),
  // then the mbarrier the TMA loads complete on.
  extern __shared__ __align__(1024) uint8_t shared[];
  ElementA *a = reinterpret_cast<ElementA *>(shared);
  ElementB *b = reinterpret_cast<ElementB *>(shared + kBytesA);
  uint64_t *barrier = reinterpret_cast<uint64_t *>(shared + kBytesA + kBytesB);
  uint32_t loaded = sharedAddress(barrier);

  Tensor sA = make_tensor(make_smem_ptr(a), layoutA); // (M, K)
  Tensor sB = make_tensor(make_smem_ptr(b), layoutB); // (N, K)

  // CuTe's atom for a 64 x N x K tile: one wgmma of N columns per K step
  // (16 elements of 16 bits, 32 of 8: SM90_64xNx32_F32E4M3E4M3_SS_TN and
  // its kin for FP8). Its fragments of A (SS) and B are descriptors, one per
  // step (the first step's, advanced by the step's offset); of A (RS), this
  // thread's eight (16-bit) or sixteen (8-bit) elements of each step.
  using TileShape = Shape<Int<kM>, Int<N>, Int<K>>;
  using Atom = conditional_t<
      RegistersA,
      decltype(GMMA::rs_op_selector<ElementA, ElementB, float, TileShape,
                                    GMMA::Major::K, MajorB>()),
      decltype(GMMA::ss_op_selector<ElementA, ElementB, float, TileShape,
                                    GMMA::Major::K, MajorB>())>;
  static_assert(size<1>(typename MMA_Traits<Atom>::Shape_MNK{}) == N,
                "one wgmma covers all N columns");
  TiledMMA mma = make_tiled_mma(Atom{});
  auto slice = mma.get_thread_slice(threadIdx.x);
  Tensor partitionA = slice.partition_A(sA); // (MMA, 1, K/16)
  Tensor fragmentA = slice.make_fragment_A(partitionA);
  Tensor fragmentB = slice.make_fragment_B(slice.partition_B(sB));
  Tensor accumulator =
      partition_fragment_C(mma, make_shape(Int<kM>{}, Int<N>{}));
  static_assert(size(accumulator) == N / 2);
  static_assert(size<2>(fragmentB) * kStepK == K);

  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(loaded));
    // The async proxy (TMA) must see the initialization.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     loaded),
                 "r"(kBytesA + kBytesB)
                 : "memory");
    for (int block = 0; block < K / kBlockK; ++block)
      tmaLoad(sharedAddress(&sA(0, block * kBlockK)), mapA, block * kBlockK, 0,
              loaded);
    if constexpr (MajorB == GMMA::Major::K)
      for (int block = 0; block < K / kBlockK; ++block)
        tmaLoad(sharedAddress(&sB(0, block * kBlockK)), mapB, block * kBlockK,
                0, loaded);
    else
      for (int block = 0; block < N / kBlockK; ++block)
        tmaLoad(sharedAddress(&sB(block * kBlockK, 0)), mapB, block * kBlockK,
                0, loaded);
  }
  // wgmma is warpgroup-collective: every thread waits for the operands.
  waitParity(loaded, 0);

  // The RS form's A from shared memory into registers, all before the
  // wgmma.fence that orders those register writes before the wgmmas that
  // read them.
  if constexpr (RegistersA) {
    copy(partitionA, fragmentA);
    if constexpr (Defect == Mutant::FragmentBytes) {
      Tensor words = recast<uint32_t>(fragmentA);
      CUTE_UNROLL
      for (int i = 0; i < size(words); ++i)
        words(i) = __byte_perm(words(i), 0, 0x1032);
    }
    warpgroup_fence_operand(fragmentA);
  }
  // The first step overwrites the accumulator, the others add to it.
  mma.accumulate_ = GMMA::ScaleOut::Zero;
  warpgroup_fence_operand(accumulator);
  warpgroup_arrive();
  CUTE_UNROLL
  for (int step = 0; step < K / kStepK; ++step) {
    if constexpr (Defect == Mutant::DescriptorStep16) {
      // The first step's descriptors advanced by 16 bytes (one unit of the
      // start-address field) a step, where CuTe advances them by 32.
      Tensor stepA = make_fragment_like(fragmentA(_, _, 0));
      Tensor stepB = make_fragment_like(fragmentB(_, _, 0));
      stepA(0) = fragmentA(0, 0, 0);
      stepB(0) = fragmentB(0, 0, 0);
      stepA(0).desc_ += step;
      stepB(0).desc_ += step;
      cute::gemm(mma, stepA, stepB, accumulator);
    } else {
      cute::gemm(mma, fragmentA(_, _, step), fragmentB(_, _, step),
                 accumulator);
    }
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  warpgroup_fence_operand(accumulator);

  // The accumulator fragment by the PTX ISA ("Register fragments" of wgmma
  // .m64nNk16 and .m64nNk32, alike), not by CuTe's C layout: warp w, lane l
  // holds element i at row 16w + l/4 + 8((i/2) mod 2), column 8(i/4) +
  // 2(l mod 4) + i mod 2.
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  CUTE_UNROLL
  for (int i = 0; i < N / 2; ++i) {
    int row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
    int column = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    c[row * N + column] = accumulator(i);
  }
}

} // namespace

/// One entry per case the test runs, with an unmangled name. A launch gives
/// it 128 threads and, as dynamic shared memory, the two tiles
/// ((64 + N) * K elements) and 8 bytes for the mbarrier.
#define FA4_GEMM_ENTRY_OF(Name, ElementA, ElementB, MajorB, RegistersA, N, K, \
                          Defect)                                              \
  extern "C" __global__ void __launch_bounds__(kThreads)                       \
      Name(const __grid_constant__ CUtensorMap mapA,                           \
           const __grid_constant__ CUtensorMap mapB, float *c) {               \
    gemm<ElementA, ElementB, N, K, GMMA::Major::MajorB, RegistersA,            \
         Mutant::Defect>(mapA, mapB, c);                                       \
  }
#define FA4_GEMM_ENTRY(Name, Element, MajorB, RegistersA, N, K)                \
  FA4_GEMM_ENTRY_OF(Name, Element, Element, MajorB, RegistersA, N, K, None)

// B K-major, A in shared memory: one wgmma per K step at N = 64, 128, 256.
FA4_GEMM_ENTRY(cute_gemm_sm90_n64_k64, half_t, K, false, 64, 64)
FA4_GEMM_ENTRY(cute_gemm_sm90_n128_k128, half_t, K, false, 128, 128)
FA4_GEMM_ENTRY(cute_gemm_sm90_n256_k192, half_t, K, false, 256, 192)
// B MN-major: four N-blocks (the leading byte offset steps between them),
// and a single one (CuTe leaves the leading byte offset unused).
FA4_GEMM_ENTRY(cute_gemm_sm90_bmn_n256_k64, half_t, MN, false, 256, 64)
FA4_GEMM_ENTRY(cute_gemm_sm90_bmn_bf16_n64_k192, bfloat16_t, MN, false, 64, 192)
// A in registers: with B K-major, and as fa4's P·V at head dimension 128
// (bf16 P against 128 keys of an MN-major V).
FA4_GEMM_ENTRY(cute_gemm_sm90_rs_n128_k64, half_t, K, true, 128, 64)
FA4_GEMM_ENTRY(cute_gemm_sm90_rs_bmn_bf16_n128_k128, bfloat16_t, MN, true, 128,
               128)
// FP8, both operands K-major (the only form FP8 wgmma has): e4m3 with A in
// shared memory and in registers (CuTe's SM90_64x128x32_F32E4M3E4M3_SS_TN
// and _RS_TN), e5m2 A against e4m3 B (SM90_64x64x32_F32E5M2E4M3_SS_TN).
FA4_GEMM_ENTRY(cute_gemm_sm90_e4m3_n128_k256, float_e4m3_t, K, false, 128, 256)
FA4_GEMM_ENTRY(cute_gemm_sm90_e4m3_rs_n128_k128, float_e4m3_t, K, true, 128, 128)
FA4_GEMM_ENTRY_OF(cute_gemm_sm90_e5m2_e4m3_n64_k128, float_e5m2_t,
                  float_e4m3_t, K, false, 64, 128, None)
// The mutants: A's register bytes permuted; descriptors stepped by 16 bytes.
FA4_GEMM_ENTRY_OF(cute_gemm_sm90_e4m3_rs_mutant_fragment_n128_k128,
                  float_e4m3_t, float_e4m3_t, K, true, 128, 128, FragmentBytes)
FA4_GEMM_ENTRY_OF(cute_gemm_sm90_e4m3_mutant_step16_n128_k128, float_e4m3_t,
                  float_e4m3_t, K, false, 128, 128, DescriptorStep16)
