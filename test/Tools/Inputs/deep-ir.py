"""deep-ir.py KIND DEPTH OUT: a function nested DEPTH levels deep, in
regions (KIND `region`) or in an attribute's brackets (KIND `attribute`)."""
import sys

kind, depth, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if kind == "region":
    text = ("func.func @f() {\n" + "scf.execute_region {\n" * depth +
            "scf.yield\n}\n" * depth + "return\n}\n")
else:
    text = ("func.func @f() attributes {a = " + "[" * depth + "]" * depth +
            "} {\nreturn\n}\n")
open(out, "w").write(text)
