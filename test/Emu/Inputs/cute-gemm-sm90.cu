//===- cute-gemm-sm90.cu - a small TMA + wgmma GEMM from CuTe's atoms ----===//
//
// Device code for test/Emu/cute-gemm-sm90.test, compiled by nvcc to PTX for
// sm_90a and run in fa4-emu. One warpgroup (128 threads) computes
//
//   C[64 x N] (f32, row-major) = A[64 x K] (K-major) * B[N x K]^T
//
// in f16 or bf16, with B K-major (B[N x K] row-major, as K in Q·K^T) or
// MN-major (B^T[K x N] row-major, as V in P·V), and A in shared memory (the
// SS form) or in registers (the RS form, as P in fa4's P·V).
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
// Each tensor map's box is 64 elements (128 bytes, one swizzle row) by all
// rows of the operand as it lies in global memory, so one TMA copy lands a
// 64-column block exactly where CuTe's layout places it: a K-block of A or
// of a K-major B, a 64-column N-block of an MN-major B.
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
constexpr int kBlock = 64;

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

template <class Element, int N, int K, GMMA::Major MajorB, bool RegistersA>
__device__ void gemm(CUtensorMap const &mapA, CUtensorMap const &mapB,
                     float *c) {
  static_assert(K % kBlock == 0 && N % kBlock == 0,
                "K and N in whole 64-element TMA boxes");

  // A in CuTe's canonical K-major 128B-swizzled layout: 8-row x 64-column
  // atoms stacked along M, K-blocks after all rows.
  auto layoutA = tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                               make_shape(Int<kM>{}, Int<K>{}));
  auto layoutB = layoutOfB<Element, N, K, MajorB>();
  constexpr int kBytesA = cosize_v<decltype(layoutA)> * sizeof(Element);
  constexpr int kBytesB = cosize_v<decltype(layoutB)> * sizeof(Element);

  // Shared memory: A, then B (both on 1024-byte swizzle-pattern repeats),
  // then the mbarrier the TMA loads complete on.
  extern __shared__ __align__(1024) uint8_t shared[];
  Element *a = reinterpret_cast<Element *>(shared);
  Element *b = reinterpret_cast<Element *>(shared + kBytesA);
  uint64_t *barrier = reinterpret_cast<uint64_t *>(shared + kBytesA + kBytesB);
  uint32_t loaded = sharedAddress(barrier);

  Tensor sA = make_tensor(make_smem_ptr(a), layoutA); // (M, K)
  Tensor sB = make_tensor(make_smem_ptr(b), layoutB); // (N, K)

  // CuTe's atom for a 64 x N x K tile: one wgmma of N columns per K = 16
  // step. Its fragments of A (SS) and B are descriptors, one per step (the
  // first step's, advanced by the step's offset); of A (RS), this thread's
  // eight elements of each step.
  using TileShape = Shape<Int<kM>, Int<N>, Int<K>>;
  using Atom = conditional_t<
      RegistersA,
      decltype(GMMA::rs_op_selector<Element, Element, float, TileShape,
                                    GMMA::Major::K, MajorB>()),
      decltype(GMMA::ss_op_selector<Element, Element, float, TileShape,
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
  static_assert(size<2>(fragmentB) * 16 == K);

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
    for (int block = 0; block < K / kBlock; ++block)
      tmaLoad(sharedAddress(&sA(0, block * kBlock)), mapA, block * kBlock, 0,
              loaded);
    if constexpr (MajorB == GMMA::Major::K)
      for (int block = 0; block < K / kBlock; ++block)
        tmaLoad(sharedAddress(&sB(0, block * kBlock)), mapB, block * kBlock, 0,
                loaded);
    else
      for (int block = 0; block < N / kBlock; ++block)
        tmaLoad(sharedAddress(&sB(block * kBlock, 0)), mapB, block * kBlock, 0,
                loaded);
  }
  // wgmma is warpgroup-collective: every thread waits for the operands.
  waitParity(loaded, 0);

  // The RS form's A from shared memory into registers, all before the
  // wgmma.fence that orders those register writes before the wgmmas that
  // read them.
  if constexpr (RegistersA) {
    copy(partitionA, fragmentA);
    warpgroup_fence_operand(fragmentA);
  }
  // The first step overwrites the accumulator, the others add to it.
  mma.accumulate_ = GMMA::ScaleOut::Zero;
  warpgroup_fence_operand(accumulator);
  warpgroup_arrive();
  CUTE_UNROLL
  for (int step = 0; step < K / 16; ++step) {
    cute::gemm(mma, fragmentA(_, _, step), fragmentB(_, _, step), accumulator);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  warpgroup_fence_operand(accumulator);

  // The accumulator fragment by the PTX ISA ("Register fragments" of wgmma
  // .m64nNk16), not by CuTe's C layout: warp w, lane l holds element i at
  // row 16w + l/4 + 8((i/2) mod 2), column 8(i/4) + 2(l mod 4) + i mod 2.
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
/// (2 * (64 + N) * K bytes) and 8 bytes for the mbarrier.
#define FA4_GEMM_ENTRY(Name, Element, MajorB, RegistersA, N, K)                \
  extern "C" __global__ void __launch_bounds__(kThreads)                       \
      Name(const __grid_constant__ CUtensorMap mapA,                           \
           const __grid_constant__ CUtensorMap mapB, float *c) {               \
    gemm<Element, N, K, GMMA::Major::MajorB, RegistersA>(mapA, mapB, c);       \
  }

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
