// Strided layouts: entry IR over [batch, heads, seq, head_dim] storage
// compiles to the same kind of kernel (it reaches Q, K, V and O only through
// tensor maps), runs in fa4-sim at levels A, B and C, and its manifest says
// the layout it was compiled for; a launch binds the tensors' strides into
// the tensor maps and holds the tensors to the declared static strides.
// RUN: rm -rf %t && mkdir -p %t
// RUN: fa4-sim %s --seq-q 150 --seq-k 200 | FileCheck %s --check-prefix=SIM
// RUN: fa4c %s --stop-after=tile | fa4-sim --seq-q 150 --seq-k 200 | FileCheck %s --check-prefix=SIM
// RUN: fa4c %s | fa4-sim --seq-q 150 --seq-k 200 --interleavings 3 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true

// RUN: fa4c %s -o %t/bhsd.cubin
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/bhsd.cubin.json
// MANIFEST: "tensor": "q", {{.*}} "strides_bytes": [128, 1024, "1024 * seq_q"], {{.*}} "axes": [3, 2, 1, 0], "layout_strides": [null, 64, null, 1]
// MANIFEST: "tensor": "k", {{.*}} "layout_strides": [null, 64, null, 1]

// RUN: fa4-runtime-check %t/bhsd.cubin.json --batch 2 --seq-q 150 --seq-k 200 --layout bhsd | FileCheck %s --check-prefix=LAUNCH
// LAUNCH: backend fa4-emu {{.*}} ok true
// RUN: not fa4-runtime-check %t/bhsd.cubin.json --seq-q 150 --seq-k 200 2>&1 | FileCheck %s --check-prefix=DENSE
// DENSE: error: q: strides [76800, 512, 64, 1] differ from the [?, 64, ?, 1] the kernel was compiled for


// Q, K, V and O stored [batch, heads, seq, head_dim] (what torch-mlir and
// most front ends produce), seen as fa4's [batch, seq, heads, head_dim]:
// the seq stride is head_dim, the heads stride seq·head_dim (dynamic).
func.func @attention(%q: memref<?x?x8x64xf16, strided<[?, 64, ?, 1]>>,
                     %k: memref<?x?x4x64xf16, strided<[?, 64, ?, 1]>>,
                     %v: memref<?x?x4x64xf16, strided<[?, 64, ?, 1]>>,
                     %o: memref<?x?x8x64xf16, strided<[?, 64, ?, 1]>>,
                     %lse: memref<?x8x?xf32>) {
  fa4.attention %q, %k, %v -> %o, lse %lse {mask = #fa4.mask<causal>}
      : memref<?x?x8x64xf16, strided<[?, 64, ?, 1]>>, memref<?x?x4x64xf16, strided<[?, 64, ?, 1]>>,
        memref<?x?x4x64xf16, strided<[?, 64, ?, 1]>>
      -> memref<?x?x8x64xf16, strided<[?, 64, ?, 1]>>, memref<?x8x?xf32>
  return
}
