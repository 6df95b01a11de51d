// RUN: fa4-opt %s --fa4-assign-warp-roles -split-input-file -verify-diagnostics

// expected-error @+1 {{fa4-assign-warp-roles expects the tile program fa4-tile writes}}
func.func @not_a_tile_program(%q: memref<?x?x2x64xf16>) attributes {
    fa4.spec = {arguments = array<i64: 0, 0, 0, 0>, mask = #fa4.mask<none>}} {
  return
}

// -----

// A function without fa4.spec is not a kernel and is left alone.
func.func @not_a_kernel() {
  return
}
