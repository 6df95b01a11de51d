// A mask_mod whose index arithmetic depends on index being 64-bit, as it is
// where linalg.index comes from: kv <= q + 2^32 holds for every key in 64
// bits (wrapped to 32 bits it is kv <= q), and (kv - q) remui 7 of a negative
// difference is (2^64 + d) mod 7 = (d + 2) mod 7 in 64 bits but (d + 4) mod 7
// in 32.
func.func @attention(%q: memref<?x?x2x64xf16>, %k: memref<?x?x2x64xf16>,
                     %v: memref<?x?x2x64xf16>, %o: memref<?x?x2x64xf16>) {
  fa4.attention %q, %k, %v -> %o
      : memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>
      -> memref<?x?x2x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %far = arith.constant 4294967296 : index
    %reach = arith.addi %i, %far : index
    %near = arith.cmpi ule, %j, %reach : index
    %d = arith.subi %j, %i : index
    %c7 = arith.constant 7 : index
    %c3 = arith.constant 3 : index
    %r = arith.remui %d, %c7 : index
    %kept = arith.cmpi ne, %r, %c3 : index
    %visible = arith.andi %near, %kept : i1
    fa4.yield %visible : i1
  }
  return
}
