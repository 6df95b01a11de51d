//===- tma-load.cuh - TMA tile loads onto an mbarrier, in inline PTX ------===//
//
// What the GEMM kernels of cute-gemm.cu (sm_100a) and cute-gemm-sm90.cu
// (sm_90a) share: a 2-d TMA tile load whose bytes complete on an mbarrier's
// transaction count, and the wait for that mbarrier's phase. Both chips
// spell them alike, as fa4's own kernels do.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TEST_EMU_INPUTS_TMA_LOAD_CUH
#define FA4_TEST_EMU_INPUTS_TMA_LOAD_CUH

#include <cuda.h>

#include <cstdint>

namespace {

__device__ uint32_t sharedAddress(void const *pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

/// Waits until the phase of parity `parity` of the mbarrier at shared
/// address `barrier` has completed.
__device__ void waitParity(uint32_t barrier, uint32_t parity) {
  asm volatile("{\n\t"
               ".reg .pred done;\n"
               "WAIT:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
               "@!done bra WAIT;\n\t"
               "}" ::"r"(barrier),
               "r"(parity)
               : "memory");
}

/// A 2-d TMA tile load of the box at element (inner, outer) of `map` into
/// `destination`; its bytes complete on `barrier`'s transaction count.
__device__ void tmaLoad(uint32_t destination, CUtensorMap const &map,
                        int32_t inner, int32_t outer, uint32_t barrier) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile."
               "mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
                   destination),
               "l"(reinterpret_cast<uint64_t>(&map)), "r"(inner), "r"(outer),
               "r"(barrier)
               : "memory");
}

} // namespace

#endif // FA4_TEST_EMU_INPUTS_TMA_LOAD_CUH
