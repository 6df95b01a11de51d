// Prefix-LM (affine mask_mod): keys below 100 are visible to every
// query, the rest causally; a window of 300 keys on top.
func.func @attention_backward(
    %q: memref<?x?x2x128xbf16>, %k: memref<?x?x1x128xbf16>, %v: memref<?x?x1x128xbf16>, %o: memref<?x?x2x128xbf16>, %do: memref<?x?x2x128xbf16>, %lse: memref<?x2x?xf32>,
    %dq: memref<?x?x2x128xbf16>, %dk: memref<?x?x1x128xbf16>, %dv: memref<?x?x1x128xbf16>, %delta: memref<?x2x?xf32>, %acc: memref<?x?x2x128xf32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) {mask = #fa4.mask<window>, window_left = 300, window_right = 0}
      : memref<?x?x2x128xbf16>, memref<?x?x1x128xbf16>, memref<?x?x1x128xbf16>, memref<?x?x2x128xbf16>, memref<?x?x2x128xbf16>, memref<?x2x?xf32>
      -> memref<?x?x2x128xbf16>, memref<?x?x1x128xbf16>, memref<?x?x1x128xbf16>, memref<?x2x?xf32>, memref<?x?x2x128xf32>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %c100 = arith.constant 100 : index
    %prefix = arith.cmpi ult, %j, %c100 : index
    %causal = arith.cmpi ule, %j, %i : index
    %visible = arith.ori %prefix, %causal : i1
    fa4.yield %visible : i1
  }
  return
}
