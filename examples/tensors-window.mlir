// What a front end hands over: a function on tensors that makes its own
// destination (tensor.empty) and returns O. The pipeline's bufferize stage
// turns it into memrefs, O's allocation into a kernel parameter. 16 query
// heads share 4 K/V heads, head dim 64, bf16, a sliding window of 256 keys
// to the left.
func.func @attention(%q: tensor<?x?x16x64xbf16>, %k: tensor<?x?x4x64xbf16>,
                     %v: tensor<?x?x4x64xbf16>) -> tensor<?x?x16x64xbf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %batch = tensor.dim %q, %c0 : tensor<?x?x16x64xbf16>
  %seq = tensor.dim %q, %c1 : tensor<?x?x16x64xbf16>
  %init = tensor.empty(%batch, %seq) : tensor<?x?x16x64xbf16>
  %o = fa4.attention %q, %k, %v -> %init
      {mask = #fa4.mask<window>, window_left = 256, window_right = 0}
      : tensor<?x?x16x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>
      -> tensor<?x?x16x64xbf16>
  return %o : tensor<?x?x16x64xbf16>
}
