// fa4.attention on tensors: destination-style, it bufferizes with upstream
// one-shot-bufferize (its BufferizableOpInterface) into the memref form,
// writing O and the LSE into the destinations' buffers; the pipeline's
// first stage does the same, so fa4c, fa4-opt --fa4-pipeline and fa4-sim
// take tensor-level entry IR.
// RUN: fa4-opt %s --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" | FileCheck %s
// RUN: fa4c %s --stop-after=bufferize | FileCheck %s
// RUN: fa4-sim %s --batch 2 --seq-q 100 --seq-k 120 | FileCheck %s --check-prefix=SIM
// RUN: fa4c %s --stop-after=tile | fa4-sim --batch 2 --seq-q 100 --seq-k 120 | FileCheck %s --check-prefix=SIM
// RUN: fa4c %s | fa4-sim --seq-q 100 --seq-k 120 --interleavings 2 | FileCheck %s --check-prefix=SIM
// RUN: fa4-opt %s --fa4-pipeline=stop-after=bufferize | FileCheck %s
// RUN: fa4c %s -o %t.cubin && FileCheck %s --check-prefix=CUBIN < %t.cubin.json
// RUN: fa4-emu %t.cubin.json --seq-q 130 --seq-k 150 | FileCheck %s --check-prefix=SIM
// RUN: not fa4-opt %s --fa4-tile 2>&1 | FileCheck %s --check-prefix=UNBUFFERIZED

// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[Q:.*]]: memref<?x?x8x64xbf16>, %[[K:.*]]: memref<?x?x2x64xbf16>, %[[V:.*]]: memref<?x?x2x64xbf16>, %[[O:.*]]: memref<?x?x8x64xbf16>, %[[L:.*]]: memref<?x8x?xf32>)
// CHECK-NEXT: fa4.attention %[[Q]], %[[K]], %[[V]] -> %[[O]], lse %[[L]] {mask = #fa4.mask<causal>} : memref<?x?x8x64xbf16>, memref<?x?x2x64xbf16>, memref<?x?x2x64xbf16> -> memref<?x?x8x64xbf16>, memref<?x8x?xf32>
// CHECK-NEXT: return %[[O]], %[[L]]
// SIM: "lse_max_abs_err":{{[0-9]}}{{.*}}"ok":true
// CUBIN: "ptxas": {"registers": {{[0-9]+}}, "spill_store_bytes": 0, "spill_load_bytes": 0
// UNBUFFERIZED: error: 'fa4.attention' op on tensors must be bufferized first (the pipeline's 'bufferize' stage, or one-shot-bufferize)
func.func @attention(%q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x2x64xbf16>,
                     %v: tensor<?x?x2x64xbf16>, %o: tensor<?x?x8x64xbf16>,
                     %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) {
  %out, %l = fa4.attention %q, %k, %v -> %o, lse %lse {mask = #fa4.mask<causal>}
      : tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>
      -> tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>
  return %out, %l : tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>
}
