// A heads-first entry on tensors ([batch, heads, seq, dim]): fa4c bufferizes
// it to strided memrefs of the [batch, seq, heads, dim] view
// (test/Emu/backward-derived.test derives its backward).
func.func @attention(%q: tensor<?x4x?x64xf16>, %k: tensor<?x2x?x64xf16>,
                     %v: tensor<?x2x?x64xf16>, %o: tensor<?x4x?x64xf16>) -> tensor<?x4x?x64xf16> {
  %r = fa4.attention %q, %k, %v -> %o {heads_first}
      : tensor<?x4x?x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16>
      -> tensor<?x4x?x64xf16>
  return %r : tensor<?x4x?x64xf16>
}
