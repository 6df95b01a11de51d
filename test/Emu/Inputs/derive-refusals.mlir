// Forward entries whose backward is not derived, each refused as the
// forward is, and a few that are (test/Emu/backward-derived.test splits
// them with split-file).

//--- same.mlir
// Q, K and V one argument: the launch binds three tensors.
func.func @same(%x: memref<?x?x4x64xf16>, %o: memref<?x?x4x64xf16>) {
  fa4.attention %x, %x, %x -> %o
      : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>
      -> memref<?x?x4x64xf16>
  return
}

//--- global.mlir
// An extra that is a constant of the module, not a parameter.
memref.global "private" constant @slopes : memref<4xf32> = dense<[0.5, 0.25, 0.125, 0.0625]>
func.func @global(%q: memref<?x?x4x64xf16>, %k: memref<?x?x4x64xf16>,
                  %v: memref<?x?x4x64xf16>, %o: memref<?x?x4x64xf16>) {
  %slopes = memref.get_global @slopes : memref<4xf32>
  fa4.attention %q, %k, %v -> %o extras(%slopes : memref<4xf32>)
      : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>
      -> memref<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %slope_of: memref<4xf32>):
    %slope = memref.load %slope_of[%h] : memref<4xf32>
    %r = arith.addf %s, %slope : f32
    fa4.yield %r : f32
  }
  return
}

//--- trunc.mlir
// A score_mod the score flows through math.trunc in: no derivative rule.
func.func @trunc(%q: memref<?x?x4x64xf16>, %k: memref<?x?x4x64xf16>,
                 %v: memref<?x?x4x64xf16>, %o: memref<?x?x4x64xf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>
      -> memref<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %t = math.trunc %s : f32
    fa4.yield %t : f32
  }
  return
}

//--- target.mlir
// The module names its chip: the backward is compiled for it too.
module attributes {fa4.target = #fa4.target<sm_90a>} {
  func.func @target(%q: memref<?x?x4x64xf16>, %k: memref<?x?x4x64xf16>,
                    %v: memref<?x?x4x64xf16>, %o: memref<?x?x4x64xf16>) {
    fa4.attention %q, %k, %v -> %o
        : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>
        -> memref<?x?x4x64xf16>
    return
  }
}

//--- bitcast.mlir
// The score's bits reinterpreted: no derivative.
func.func @bitcast(%q: memref<?x?x4x64xf16>, %k: memref<?x?x4x64xf16>,
                   %v: memref<?x?x4x64xf16>, %o: memref<?x?x4x64xf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>
      -> memref<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %x = arith.bitcast %s : f32 to i32
    %c = arith.constant 1 : i32
    %y = arith.addi %x, %c : i32
    %r = arith.bitcast %y : i32 to f32
    fa4.yield %r : f32
  }
  return
}

//--- returns.mlir
// A value the kernel does not compute, returned.
func.func @returns(%q: memref<?x?x4x64xf16>, %k: memref<?x?x4x64xf16>,
                   %v: memref<?x?x4x64xf16>, %o: memref<?x?x4x64xf16>) -> index {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>
      -> memref<?x?x4x64xf16>
  %c = arith.constant 7 : index
  return %c : index
}

//--- mixed-static.mlir
// Not a refusal: sizes fixed in K, V and O but not in Q, which the
// backward's manifest records all the same.
func.func @mixed(%q: memref<?x?x4x64xf16>, %k: memref<2x90x2x64xf16>,
                 %v: memref<2x90x2x64xf16>, %o: memref<2x150x4x64xf16>) {
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<causal>}
      : memref<?x?x4x64xf16>, memref<2x90x2x64xf16>, memref<2x90x2x64xf16>
      -> memref<2x150x4x64xf16>
  return
}

//--- remf.mlir
// Not a refusal: a remainder by the score (its derivative reads floor; the
// kernels' frem expansion tests the divisor with testp.infinite).
func.func @rem(%q: memref<?x?x4x64xf16>, %k: memref<?x?x4x64xf16>,
               %v: memref<?x?x4x64xf16>, %o: memref<?x?x4x64xf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x4x64xf16>, memref<?x?x4x64xf16>, memref<?x?x4x64xf16>
      -> memref<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index):
    %c = arith.constant 10.0 : f32
    %two = arith.constant 2.0 : f32
    %d = arith.addf %s, %c : f32
    %r0 = arith.remf %two, %d : f32
    %r = arith.addf %r0, %s : f32
    fa4.yield %r : f32
  }
  return
}
