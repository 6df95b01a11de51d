"""recursive-ir.py KIND DEPTH OUT [invalid]: an attention entry carrying one
construct that MLIR's parser, printer or diagnostics recurse on DEPTH levels
deep without a bracket in the text:

  minus      an affine map with DEPTH unary minus signs (`---...d0`)
  chain      an affine map `d0 + d0 + ...` of DEPTH terms
  callsite   the attention's location, a DEPTH-deep callsite chain of
             location aliases
  type       a function type through DEPTH aliases `!b = tuple<!a>`
  attribute  a function attribute through DEPTH aliases `#b = [#a]`

With `invalid`, the attention has a window the verifier refuses, so that a
diagnostic is printed at it (through its location)."""
import itertools
import string
import sys

kind, depth, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
invalid = len(sys.argv) > 4 and sys.argv[4] == "invalid"


def names():
    for length in itertools.count(1):
        for letters in itertools.product(string.ascii_letters, repeat=length):
            yield "".join(letters)


name = list(itertools.islice(names(), depth))
window = ", window_left = -7 : i64" if invalid else ""
location = ""
aliases = ""
extra = ""
if kind == "minus":
    aliases = "#m = affine_map<(d0) -> (" + "-" * depth + "d0)>\n"
elif kind == "chain":
    aliases = "#m = affine_map<(d0) -> (" + " + ".join(["d0"] * depth) + ")>\n"
elif kind == "callsite":
    aliases = f'#{name[0]} = loc("deep.mlir":1:1)\n' + "".join(
        f'#{name[i]} = loc(callsite(#{name[i - 1]} at "deep.mlir":{i}:1))\n'
        for i in range(1, depth))
    location = f" loc(#{name[-1]})"
elif kind == "type":
    aliases = f"!{name[0]} = i32\n" + "".join(
        f"!{name[i]} = tuple<!{name[i - 1]}>\n" for i in range(1, depth))
    extra = f"func.func private @deep(!{name[-1]})\n"
elif kind == "attribute":
    aliases = f"#{name[0]} = 1\n" + "".join(
        f"#{name[i]} = [#{name[i - 1]}]\n" for i in range(1, depth))
    extra = f"func.func private @deep() attributes {{deep = #{name[-1]}}}\n"
else:
    sys.exit(f"unknown kind {kind}")

text = aliases + extra + f"""func.func @attention(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>,
                     %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>) {{
  fa4.attention %q, %k, %v -> %o {{mask = #fa4.mask<causal>{window}}}
      : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>, memref<?x?x2x64xf16>
      -> memref<?x?x4x64xf16>{location}
  return
}}
"""
with open(out, "w") as f:
    f.write(text)
