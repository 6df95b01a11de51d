// K and V one memref (legal IR): fa4-sim refuses to draw them apart.
func.func @attention_backward(
    %q: memref<?x?x2x64xf16>, %kv: memref<?x?x2x64xf16>, %o: memref<?x?x2x64xf16>,
    %do: memref<?x?x2x64xf16>, %lse: memref<?x2x?xf32>, %dq: memref<?x?x2x64xf16>,
    %dk: memref<?x?x2x64xf16>, %dv: memref<?x?x2x64xf16>, %delta: memref<?x2x?xf32>,
    %acc: memref<?x?x2x64xf32>) {
  fa4.attention_backward %q, %kv, %kv, %o, %do, %lse -> %dq, %dk, %dv
      workspace(%delta, %acc)
      : memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>,
        memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x2x?xf32>
      -> memref<?x?x2x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>,
         memref<?x2x?xf32>, memref<?x?x2x64xf32>
  return
}
