// The collapsed [batch·heads, seq, head_dim] form with dynamic sizes (the
// views' sizes read the arguments' dimensions), and rank-3 arguments whose
// result is expanded back to one head (the expand of the collapsed O folds
// away): both raise, compile with the views as the kernel's parameters,
// and run in fa4-sim and fa4-emu at odd sizes.
//
// RUN: fa4-opt --fa4-raise-attention %s --split-input-file -o %t.mlir
// RUN: FileCheck %s --input-file %t.mlir
// CHECK-LABEL: func.func @attention
// CHECK: fa4.attention {{.*}} : tensor<?x?x1x64xf16>, tensor<?x?x1x64xf16>, tensor<?x?x1x64xf16> -> tensor<?x?x1x64xf16>
// CHECK: tensor.collapse_shape
// CHECK-NOT: linalg.
// CHECK-LABEL: func.func @attention
// CHECK: %[[O:.*]] = fa4.attention
// CHECK-NOT: tensor.collapse_shape
// CHECK: return %[[O]] : tensor<4x32x1x64xf16>
//
// RUN: awk 'BEGIN{p=1} /^\/\/ -----/{p=0} p' %s | fa4-opt --fa4-raise-attention -o %t.dyn.mlir
// RUN: fa4c %t.dyn.mlir --stop-after=bufferize | FileCheck %s --check-prefix=PARAMS
// PARAMS: func.func @attention(%arg0: memref<?x?x1x64xf16>, %arg1: memref<?x?x1x64xf16>, %arg2: memref<?x?x1x64xf16>, %arg3: memref<?x?x1x64xf16>) {
// RUN: fa4c %t.dyn.mlir -o %t.dyn.cubin
// RUN: fa4-sim %t.dyn.mlir --batch 5 --seq-q 133 --seq-k 71 | FileCheck %s --check-prefix=SIM
// SIM: "ok":true
// RUN: fa4-emu %t.dyn.cubin.json --entry %t.dyn.mlir --batch 3 --seq-q 133 --seq-k 71 --interleavings 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0
// RUN: awk 'BEGIN{p=0} /^\/\/ -----/{p=1; next} p' %s | fa4-opt --fa4-raise-attention -o %t.out4.mlir
// RUN: fa4c %t.out4.mlir -o %t.out4.cubin
// RUN: fa4-sim %t.out4.mlir --batch 4 --seq-q 32 --seq-k 48 | FileCheck %s --check-prefix=SIM
// RUN: fa4-emu %t.out4.cubin.json --entry %t.out4.mlir --batch 4 --seq-q 32 --seq-k 48 | FileCheck %s --check-prefix=EMU

#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#q4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#k4 = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#s4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#p4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#v4 = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#o4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module {
  func.func @attention(%q: tensor<?x?x64xf16>, %k: tensor<?x?x64xf16>, %v: tensor<?x?x64xf16>) -> tensor<?x?x64xf16> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %dbh = tensor.dim %q, %c0 : tensor<?x?x64xf16>
    %dsq = tensor.dim %q, %c1 : tensor<?x?x64xf16>
    %dsk = tensor.dim %k, %c1 : tensor<?x?x64xf16>
    %zacc = arith.constant 0.000000e+00 : f16
    %zpv = arith.constant 0.000000e+00 : f16
    %ninf = arith.constant 0xFC00 : f16
    %es = tensor.empty(%dbh, %dsq, %dsk) : tensor<?x?x?xf16>
    %sf = linalg.fill ins(%zacc : f16) outs(%es : tensor<?x?x?xf16>) -> tensor<?x?x?xf16>
    %ekt = tensor.empty(%dbh, %dsk) : tensor<?x64x?xf16>
    %kt = linalg.transpose ins(%k : tensor<?x?x64xf16>) outs(%ekt : tensor<?x64x?xf16>) permutation = [0, 2, 1]
    %s0 = linalg.batch_matmul ins(%q, %kt : tensor<?x?x64xf16>, tensor<?x64x?xf16>) outs(%sf : tensor<?x?x?xf16>) -> tensor<?x?x?xf16>
    %s1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s0 : tensor<?x?x?xf16>) outs(%es : tensor<?x?x?xf16>) {
    ^bb0(%in0: f16, %out: f16):
      %sc = arith.constant 0.125 : f16
      %t1 = arith.mulf %in0, %sc : f16
      linalg.yield %t1 : f16
    } -> tensor<?x?x?xf16>
    %er = tensor.empty(%dbh, %dsq) : tensor<?x?x1xf16>
    %rf = linalg.fill ins(%ninf : f16) outs(%er : tensor<?x?x1xf16>) -> tensor<?x?x1xf16>
    %mx = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s1 : tensor<?x?x?xf16>) outs(%rf : tensor<?x?x1xf16>) {
    ^bb0(%x: f16, %o: f16):
      %r = arith.maximumf %x, %o : f16
      linalg.yield %r : f16
    } -> tensor<?x?x1xf16>
    %e = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s1, %mx : tensor<?x?x?xf16>, tensor<?x?x1xf16>) outs(%es : tensor<?x?x?xf16>) {
    ^bb0(%x: f16, %y: f16, %o: f16):
      %r0 = arith.subf %x, %y : f16
      %r = math.exp %r0 : f16
      linalg.yield %r : f16
    } -> tensor<?x?x?xf16>
    %zf = linalg.fill ins(%zacc : f16) outs(%er : tensor<?x?x1xf16>) -> tensor<?x?x1xf16>
    %z = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%e : tensor<?x?x?xf16>) outs(%zf : tensor<?x?x1xf16>) {
    ^bb0(%x: f16, %o: f16):
      %r = arith.addf %x, %o : f16
      linalg.yield %r : f16
    } -> tensor<?x?x1xf16>
    %p0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%e, %z : tensor<?x?x?xf16>, tensor<?x?x1xf16>) outs(%es : tensor<?x?x?xf16>) {
    ^bb0(%x: f16, %y: f16, %o: f16):
      %r = arith.divf %x, %y : f16
      linalg.yield %r : f16
    } -> tensor<?x?x?xf16>
    %eo = tensor.empty(%dbh, %dsq) : tensor<?x?x64xf16>
    %of = linalg.fill ins(%zpv : f16) outs(%eo : tensor<?x?x64xf16>) -> tensor<?x?x64xf16>
    %o0 = linalg.batch_matmul ins(%p0, %v : tensor<?x?x?xf16>, tensor<?x?x64xf16>) outs(%of : tensor<?x?x64xf16>) -> tensor<?x?x64xf16>
    return %o0 : tensor<?x?x64xf16>
  }
}

// -----

#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#q4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#k4 = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#s4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#p4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#v4 = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#o4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module {
  func.func @attention(%q: tensor<4x32x64xf16>, %k: tensor<4x48x64xf16>, %v: tensor<4x48x64xf16>) -> tensor<4x32x1x64xf16> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %zacc = arith.constant 0.000000e+00 : f16
    %zpv = arith.constant 0.000000e+00 : f16
    %ninf = arith.constant 0xFC00 : f16
    %es = tensor.empty() : tensor<4x32x48xf16>
    %sf = linalg.fill ins(%zacc : f16) outs(%es : tensor<4x32x48xf16>) -> tensor<4x32x48xf16>
    %ekt = tensor.empty() : tensor<4x64x48xf16>
    %kt = linalg.transpose ins(%k : tensor<4x48x64xf16>) outs(%ekt : tensor<4x64x48xf16>) permutation = [0, 2, 1]
    %s0 = linalg.batch_matmul ins(%q, %kt : tensor<4x32x64xf16>, tensor<4x64x48xf16>) outs(%sf : tensor<4x32x48xf16>) -> tensor<4x32x48xf16>
    %s1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s0 : tensor<4x32x48xf16>) outs(%es : tensor<4x32x48xf16>) {
    ^bb0(%in0: f16, %out: f16):
      %sc = arith.constant 0.125 : f16
      %t1 = arith.mulf %in0, %sc : f16
      linalg.yield %t1 : f16
    } -> tensor<4x32x48xf16>
    %er = tensor.empty() : tensor<4x32x1xf16>
    %rf = linalg.fill ins(%ninf : f16) outs(%er : tensor<4x32x1xf16>) -> tensor<4x32x1xf16>
    %mx = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s1 : tensor<4x32x48xf16>) outs(%rf : tensor<4x32x1xf16>) {
    ^bb0(%x: f16, %o: f16):
      %r = arith.maximumf %x, %o : f16
      linalg.yield %r : f16
    } -> tensor<4x32x1xf16>
    %e = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s1, %mx : tensor<4x32x48xf16>, tensor<4x32x1xf16>) outs(%es : tensor<4x32x48xf16>) {
    ^bb0(%x: f16, %y: f16, %o: f16):
      %r0 = arith.subf %x, %y : f16
      %r = math.exp %r0 : f16
      linalg.yield %r : f16
    } -> tensor<4x32x48xf16>
    %zf = linalg.fill ins(%zacc : f16) outs(%er : tensor<4x32x1xf16>) -> tensor<4x32x1xf16>
    %z = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%e : tensor<4x32x48xf16>) outs(%zf : tensor<4x32x1xf16>) {
    ^bb0(%x: f16, %o: f16):
      %r = arith.addf %x, %o : f16
      linalg.yield %r : f16
    } -> tensor<4x32x1xf16>
    %p0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%e, %z : tensor<4x32x48xf16>, tensor<4x32x1xf16>) outs(%es : tensor<4x32x48xf16>) {
    ^bb0(%x: f16, %y: f16, %o: f16):
      %r = arith.divf %x, %y : f16
      linalg.yield %r : f16
    } -> tensor<4x32x48xf16>
    %eo = tensor.empty() : tensor<4x32x64xf16>
    %of = linalg.fill ins(%zpv : f16) outs(%eo : tensor<4x32x64xf16>) -> tensor<4x32x64xf16>
    %o0 = linalg.batch_matmul ins(%p0, %v : tensor<4x32x48xf16>, tensor<4x48x64xf16>) outs(%of : tensor<4x32x64xf16>) -> tensor<4x32x64xf16>
    %ox = tensor.expand_shape %o0 [[0], [1], [2, 3]] output_shape [4, 32, 1, 64] : tensor<4x32x64xf16> into tensor<4x32x1x64xf16>
    return %ox : tensor<4x32x1x64xf16>
  }
}
