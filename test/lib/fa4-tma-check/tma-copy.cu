// A TMA round trip, compiled by nvcc to PTX for compute_90 (the tensor-map
// and bulk-tensor instructions fa4's kernels use exist there unchanged, and
// the driver JIT-compiles it for any GPU from sm_90 on), which
// fa4-tma-check runs both on a GPU, through maps the driver encoded, and in
// fa4-emu, through maps the emulator encoded: each CTA loads one box of
// `src` at its coordinates into 1024-byte aligned shared memory (swizzled as
// the map says), copies the shared-memory bytes as they lie to `out`, then
// stores the box back through `dst` (the same map over another buffer) at
// the same coordinates (boxes that start at a negative coordinate are only
// loaded). Equal `out` and `dst` bytes on both sides mean the
// two encoders describe the same boxes, swizzles, bounds and fills.

#include <cstdint>

struct alignas(64) TensorMap {
  unsigned char bytes[128];
};

__device__ __forceinline__ uint32_t sharedAddress(const void *pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

extern "C" __global__ void __launch_bounds__(128)
    fa4_tma_copy(const __grid_constant__ TensorMap src,
                 const __grid_constant__ TensorMap dst, const int *coords,
                 int rank, unsigned boxBytes, unsigned char *out) {
  // The mbarrier first, the box at the next 1024-byte boundary (what the
  // 128B swizzle's pattern is anchored to); the launch gives boxBytes + 2048.
  extern __shared__ __align__(16) unsigned char dynamicSmem[];
  unsigned char *box = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(dynamicSmem) + 8 + 1023) & ~uintptr_t(1023));
  // Bit 8 of `rank`: store every box, also those at negative coordinates
  // (fa4-tma-check --store-negative, which the emulator must refuse).
  bool storeAll = rank & 0x100;
  rank &= 0xff;
  const int *c = coords + blockIdx.x * 5;
  uint32_t bar = sharedAddress(dynamicSmem), smem = sharedAddress(box);
  uint64_t srcMap = reinterpret_cast<uint64_t>(&src);
  uint64_t dstMap = reinterpret_cast<uint64_t>(&dst);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(boxBytes)
                 : "memory");
    switch (rank) {
    case 1:
      asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::"
                   "complete_tx::bytes [%0], [%1, {%2}], [%3];" ::"r"(smem),
                   "l"(srcMap), "r"(c[0]), "r"(bar)
                   : "memory");
      break;
    case 2:
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
                   "complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(smem),
                   "l"(srcMap), "r"(c[0]), "r"(c[1]), "r"(bar)
                   : "memory");
      break;
    case 3:
      asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::"
                   "complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(smem),
                   "l"(srcMap), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(bar)
                   : "memory");
      break;
    case 4:
      asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::"
                   "complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(smem),
                   "l"(srcMap), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(bar)
                   : "memory");
      break;
    default:
      asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::"
                   "complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" ::"r"(smem),
                   "l"(srcMap), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]),
                   "r"(bar)
                   : "memory");
      break;
    }
  }
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done)
                 : "r"(bar)
                 : "memory");
  const uint4 *from = reinterpret_cast<const uint4 *>(box);
  uint4 *to = reinterpret_cast<uint4 *>(out + uint64_t(blockIdx.x) * boxBytes);
  for (unsigned i = threadIdx.x; i < boxBytes / 16; i += blockDim.x)
    to[i] = from[i];
  // The box goes back out through the async proxy — unless it starts
  // before the tensor: a TMA store at a negative coordinate faults (an
  // illegal instruction on an H200), where a load fills.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  bool negative = false;
  for (int d = 0; d < rank; ++d)
    negative |= c[d] < 0 && !storeAll;
  if (threadIdx.x == 0 && !negative) {
    switch (rank) {
    case 1:
      asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group "
                   "[%0, {%1}], [%2];" ::"l"(dstMap), "r"(c[0]), "r"(smem)
                   : "memory");
      break;
    case 2:
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group "
                   "[%0, {%1, %2}], [%3];" ::"l"(dstMap), "r"(c[0]), "r"(c[1]), "r"(smem)
                   : "memory");
      break;
    case 3:
      asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group "
                   "[%0, {%1, %2, %3}], [%4];" ::"l"(dstMap), "r"(c[0]), "r"(c[1]),
                   "r"(c[2]), "r"(smem)
                   : "memory");
      break;
    case 4:
      asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group "
                   "[%0, {%1, %2, %3, %4}], [%5];" ::"l"(dstMap), "r"(c[0]), "r"(c[1]),
                   "r"(c[2]), "r"(c[3]), "r"(smem)
                   : "memory");
      break;
    default:
      asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group "
                   "[%0, {%1, %2, %3, %4, %5}], [%6];" ::"l"(dstMap), "r"(c[0]), "r"(c[1]),
                   "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(smem)
                   : "memory");
      break;
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}
