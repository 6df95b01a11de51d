// Q, K, V and O as [batch, heads, seq, head_dim] (heads_first), bf16, 4
// query heads over 2 K/V heads, head dim 64, no mask.
func.func @attention(%q: tensor<?x4x?x64xbf16>, %k: tensor<?x2x?x64xbf16>,
                     %v: tensor<?x2x?x64xbf16>) -> tensor<?x4x?x64xbf16> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %batch = tensor.dim %q, %c0 : tensor<?x4x?x64xbf16>
  %seq = tensor.dim %q, %c2 : tensor<?x4x?x64xbf16>
  %init = tensor.empty(%batch, %seq) : tensor<?x4x?x64xbf16>
  %o = fa4.attention %q, %k, %v -> %init {heads_first}
      : tensor<?x4x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16>
      -> tensor<?x4x?x64xbf16>
  return %o : tensor<?x4x?x64xbf16>
}
