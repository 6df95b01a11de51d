// A mask_mod whose index arithmetic divides INT64_MIN by -1 (undefined).
func.func @attention(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                     %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>) {
  fa4.attention %q, %k, %v -> %o {mask = #fa4.mask<none>}
      : memref<?x?x2x64xf16>, memref<?x?x1x64xf16>, memref<?x?x1x64xf16>
      -> memref<?x?x2x64xf16>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %min = arith.constant -9223372036854775808 : index
    %minus1 = arith.constant -1 : index
    %d = arith.divsi %min, %minus1 : index
    %m = arith.cmpi slt, %d, %j : index
    fa4.yield %m : i1
  }
  return
}
