// Document masking (examples/document.mlir's mask_mod, not affine: it
// reads the ids): every visited block is masked element by element.
func.func @attention_backward(
    %q: memref<?x?x8x64xf16>, %k: memref<?x?x2x64xf16>, %v: memref<?x?x2x64xf16>, %o: memref<?x?x8x64xf16>, %do: memref<?x?x8x64xf16>, %lse: memref<?x8x?xf32>,
    %dq: memref<?x?x8x64xf16>, %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x8x?xf32>, %acc: memref<?x?x8x64xf32>, %doc: memref<?x?xi32>) {
  fa4.attention_backward %q, %k, %v, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc) extras(%doc : memref<?x?xi32>)
      : memref<?x?x8x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x8x64xf16>, memref<?x?x8x64xf16>, memref<?x8x?xf32>
      -> memref<?x?x8x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x8x?xf32>, memref<?x?x8x64xf32>
  mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index, %ids: memref<?x?xi32>):
    %query_doc = memref.load %ids[%b, %i] : memref<?x?xi32>
    %key_doc = memref.load %ids[%b, %j] : memref<?x?xi32>
    %same_doc = arith.cmpi eq, %query_doc, %key_doc : i32
    %causal = arith.cmpi ule, %j, %i : index
    %visible = arith.andi %same_doc, %causal : i1
    fa4.yield %visible : i1
  }
  return
}
