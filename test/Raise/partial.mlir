// RUN: fa4-opt --fa4-raise-attention --split-input-file --verify-diagnostics %s | FileCheck %s
//
// Raises that leave something around the op.

// The result transposed to [batch, seq, heads, head_dim] while the inputs
// are heads-first: the op cannot take that form, so the attention inside it
// is raised (heads_first) and the transpose stays; no remark.
// CHECK-LABEL: func.func @attention
// CHECK: %[[O:.*]] = fa4.attention %arg0, %arg1, %arg2 -> %{{.*}} {heads_first, scale = 1.250000e-01 : f32}
// CHECK: linalg.transpose ins(%[[O]] : tensor<1x2x32x64xf16>)

func.func @attention(%q: tensor<1x2x32x64xf16>, %k: tensor<1x2x48x64xf16>, %v: tensor<1x2x48x64xf16>) -> tensor<1x32x2x64xf16> {
  %zero = arith.constant 0.0 : f32
  %scale = arith.constant 0.125 : f32
  %e = tensor.empty() : tensor<1x2x32x48xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x32x48xf32>) -> tensor<1x2x32x48xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(b, h, i, j, d) -> (b, h, i, d)>, affine_map<(b, h, i, j, d) -> (b, h, j, d)>, affine_map<(b, h, i, j, d) -> (b, h, i, j)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%q, %k : tensor<1x2x32x64xf16>, tensor<1x2x48x64xf16>) outs(%z : tensor<1x2x32x48xf32>) {
  ^bb0(%a: f16, %b: f16, %acc: f32):
    %x = arith.extf %a : f16 to f32
    %y = arith.extf %b : f16 to f32
    %m = arith.mulf %x, %y : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  } -> tensor<1x2x32x48xf32>
  %scaled = linalg.generic {indexing_maps = [affine_map<(b, h, i, j) -> (b, h, i, j)>, affine_map<(b, h, i, j) -> (b, h, i, j)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s : tensor<1x2x32x48xf32>) outs(%e : tensor<1x2x32x48xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.mulf %in, %scale : f32
    linalg.yield %t : f32
  } -> tensor<1x2x32x48xf32>
  %p = linalg.softmax dimension(3) ins(%scaled : tensor<1x2x32x48xf32>) outs(%e : tensor<1x2x32x48xf32>) -> tensor<1x2x32x48xf32>
  %eo = tensor.empty() : tensor<1x2x32x64xf32>
  %zo = linalg.fill ins(%zero : f32) outs(%eo : tensor<1x2x32x64xf32>) -> tensor<1x2x32x64xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(b, h, i, e, j) -> (b, h, i, j)>, affine_map<(b, h, i, e, j) -> (b, h, j, e)>, affine_map<(b, h, i, e, j) -> (b, h, i, e)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%p, %v : tensor<1x2x32x48xf32>, tensor<1x2x48x64xf16>) outs(%zo : tensor<1x2x32x64xf32>) {
  ^bb0(%a: f32, %b: f16, %acc: f32):
    %y = arith.extf %b : f16 to f32
    %m = arith.mulf %a, %y : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  } -> tensor<1x2x32x64xf32>
  %eh = tensor.empty() : tensor<1x2x32x64xf16>
  %oh = linalg.generic {indexing_maps = [affine_map<(b, h, i, e) -> (b, h, i, e)>, affine_map<(b, h, i, e) -> (b, h, i, e)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%o : tensor<1x2x32x64xf32>) outs(%eh : tensor<1x2x32x64xf16>) {
  ^bb0(%in: f32, %out: f16):
    %t = arith.truncf %in : f32 to f16
    linalg.yield %t : f16
  } -> tensor<1x2x32x64xf16>
  %et = tensor.empty() : tensor<1x32x2x64xf16>
  %ot = linalg.transpose ins(%oh : tensor<1x2x32x64xf16>) outs(%et : tensor<1x32x2x64xf16>) permutation = [0, 2, 1, 3]
  return %ot : tensor<1x32x2x64xf16>
}

// -----

// A negative scale is no `scale` the op takes: it stays in the score_mod.
// CHECK-LABEL: func.func @attention
// CHECK: fa4.attention {{.*}} {heads_first, scale = 1.000000e+00 : f32} {{.*}} score_mod {
// CHECK-NEXT: ^bb0(%[[S:.*]]: f32,
// CHECK: %[[C:.*]] = arith.constant -1.250000e-01 : f32
// CHECK-NEXT: %[[R:.*]] = arith.mulf %[[S]], %[[C]] : f32
// CHECK-NEXT: fa4.yield %[[R]] : f32

func.func @attention(%q: tensor<1x2x32x64xf16>, %k: tensor<1x2x48x64xf16>, %v: tensor<1x2x48x64xf16>) -> tensor<1x2x32x64xf16> {
  %zero = arith.constant 0.0 : f32
  %scale = arith.constant -0.125 : f32
  %e = tensor.empty() : tensor<1x2x32x48xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x32x48xf32>) -> tensor<1x2x32x48xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(b, h, i, j, d) -> (b, h, i, d)>, affine_map<(b, h, i, j, d) -> (b, h, j, d)>, affine_map<(b, h, i, j, d) -> (b, h, i, j)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%q, %k : tensor<1x2x32x64xf16>, tensor<1x2x48x64xf16>) outs(%z : tensor<1x2x32x48xf32>) {
  ^bb0(%a: f16, %b: f16, %acc: f32):
    %x = arith.extf %a : f16 to f32
    %y = arith.extf %b : f16 to f32
    %m = arith.mulf %x, %y : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  } -> tensor<1x2x32x48xf32>
  %scaled = linalg.generic {indexing_maps = [affine_map<(b, h, i, j) -> (b, h, i, j)>, affine_map<(b, h, i, j) -> (b, h, i, j)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s : tensor<1x2x32x48xf32>) outs(%e : tensor<1x2x32x48xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.mulf %in, %scale : f32
    linalg.yield %t : f32
  } -> tensor<1x2x32x48xf32>
  %p = linalg.softmax dimension(3) ins(%scaled : tensor<1x2x32x48xf32>) outs(%e : tensor<1x2x32x48xf32>) -> tensor<1x2x32x48xf32>
  %eo = tensor.empty() : tensor<1x2x32x64xf32>
  %zo = linalg.fill ins(%zero : f32) outs(%eo : tensor<1x2x32x64xf32>) -> tensor<1x2x32x64xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(b, h, i, e, j) -> (b, h, i, j)>, affine_map<(b, h, i, e, j) -> (b, h, j, e)>, affine_map<(b, h, i, e, j) -> (b, h, i, e)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%p, %v : tensor<1x2x32x48xf32>, tensor<1x2x48x64xf16>) outs(%zo : tensor<1x2x32x64xf32>) {
  ^bb0(%a: f32, %b: f16, %acc: f32):
    %y = arith.extf %b : f16 to f32
    %m = arith.mulf %a, %y : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  } -> tensor<1x2x32x64xf32>
  %eh = tensor.empty() : tensor<1x2x32x64xf16>
  %oh = linalg.generic {indexing_maps = [affine_map<(b, h, i, e) -> (b, h, i, e)>, affine_map<(b, h, i, e) -> (b, h, i, e)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%o : tensor<1x2x32x64xf32>) outs(%eh : tensor<1x2x32x64xf16>) {
  ^bb0(%in: f32, %out: f16):
    %t = arith.truncf %in : f32 to f16
    linalg.yield %t : f16
  } -> tensor<1x2x32x64xf16>
  return %oh : tensor<1x2x32x64xf16>
}
