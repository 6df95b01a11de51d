// A score_mod computing in f16 and bf16 (as a raise of f16 linalg leaves
// it): scalar mul, add and neg on 16-bit floats in the kernel's PTX.
func.func @attention(%q: memref<?x?x2x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x2x64xf16>) {
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<causal>}
      : memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16> -> memref<?x?x2x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %t = arith.truncf %s : f32 to f16
    %c = arith.constant -1.250000e-01 : f16
    %one = arith.constant 1.0 : f16
    %m = arith.mulf %t, %c : f16
    %a = arith.addf %m, %one : f16
    %n = arith.negf %a : f16
    %tb = arith.truncf %s : f32 to bf16
    %cb = arith.constant 5.000000e-01 : bf16
    %mb = arith.mulf %tb, %cb : bf16
    %eb = arith.extf %mb : bf16 to f32
    %e = arith.extf %n : f16 to f32
    %r = arith.addf %e, %eb : f32
    fa4.yield %r : f32
  }
  return
}
