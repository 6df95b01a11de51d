// RUN: fa4-opt %s --fa4-pipeline="stop-after=scheduler" | FileCheck %s
// RUN: fa4-opt %s --fa4-pipeline="stop-after=tile rescale-threshold=2.0" | FileCheck %s --check-prefix=OPTIONS
// RUN: fa4-opt %s --fa4-pipeline=target=sm_100a | FileCheck %s --check-prefix=BINARY
// RUN: not fa4-opt %s --fa4-pipeline=stop-after=bogus 2>&1 | FileCheck %s --check-prefix=BAD-STAGE

// CHECK-LABEL: func.func @attention
// CHECK-NOT: fa4.attention
// CHECK: fa4.warp_specialize
// CHECK: fa4.online_softmax {{.*}}rescale_threshold = 8.000000e+00
// The whole pipeline ends in a cubin assembled by CUDA's ptxas.
// BINARY: gpu.binary @fa4_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_100a", features = "+ptx88">, {{.*}}bin = "
// OPTIONS: fa4.online_softmax {{.*}}rescale_threshold = 2.000000e+00
// BAD-STAGE: fa4-pipeline: unknown stage 'bogus' (expected one of: bufferize, tile, warp-roles, pipeline, barriers, tmem, correction, scheduler, nvvm, binary)
func.func @attention(%q: memref<?x?x8x128xf16>, %k: memref<?x?x8x128xf16>,
                     %v: memref<?x?x8x128xf16>, %o: memref<?x?x8x128xf16>) {
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<causal>}
      : memref<?x?x8x128xf16>, memref<?x?x8x128xf16>, memref<?x?x8x128xf16>
      -> memref<?x?x8x128xf16>
  return
}
