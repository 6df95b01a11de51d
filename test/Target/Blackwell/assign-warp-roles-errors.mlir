// RUN: fa4-opt %s --fa4-assign-warp-roles -split-input-file -verify-diagnostics

// expected-error @+1 {{fa4-assign-warp-roles expects the tile program fa4-tile writes}}
func.func @not_a_tile_program(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                              %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1, scale = 0.125,
                         softcap = 0.0, lse = false, arguments = [0, 1, 2, 3]>} {
  return
}

// -----

// A function without fa4.spec is not a kernel and is left alone.
func.func @not_a_kernel() {
  return
}
