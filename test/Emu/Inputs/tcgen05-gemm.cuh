//===- tcgen05-gemm.cuh - what the sm_100a GEMM kernels share -------------===//
//
// Device helpers of the tcgen05 GEMM kernels in cute-gemm.cu (one CTA) and
// cute-gemm-2cta.cu (a CTA pair): one elected lane of a warp, and a warp's
// load of 32 TMEM columns of its lane quadrant into a row of C.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TEST_EMU_TCGEN05_GEMM_CUH
#define FA4_TEST_EMU_TCGEN05_GEMM_CUH

#include <cstdint>

/// 1 in the one lane elect.sync picks among the whole warp, 0 elsewhere.
__device__ uint32_t electedLane() {
  uint32_t elected;
  asm volatile("{\n\t"
               ".reg .pred p;\n\t"
               "elect.sync _|p, 0xffffffff;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t"
               "}"
               : "=r"(elected));
  return elected;
}

/// Loads 32 consecutive TMEM columns of this warp's lane quadrant and stores
/// them to row `row` of C, from column `column`.
__device__ void storeColumns(uint32_t tmem, float *row, int column) {
  uint32_t v[32];
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31}, [%32];"
      : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]),
        "=r"(v[5]), "=r"(v[6]), "=r"(v[7]), "=r"(v[8]), "=r"(v[9]),
        "=r"(v[10]), "=r"(v[11]), "=r"(v[12]), "=r"(v[13]), "=r"(v[14]),
        "=r"(v[15]), "=r"(v[16]), "=r"(v[17]), "=r"(v[18]), "=r"(v[19]),
        "=r"(v[20]), "=r"(v[21]), "=r"(v[22]), "=r"(v[23]), "=r"(v[24]),
        "=r"(v[25]), "=r"(v[26]), "=r"(v[27]), "=r"(v[28]), "=r"(v[29]),
        "=r"(v[30]), "=r"(v[31])
      : "r"(tmem + column));
  asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
  for (int i = 0; i < 32; ++i)
    row[column + i] = __uint_as_float(v[i]);
}

#endif // FA4_TEST_EMU_TCGEN05_GEMM_CUH
