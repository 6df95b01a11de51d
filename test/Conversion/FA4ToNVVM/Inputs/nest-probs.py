"""Level-C IR edit for hopper-nested-probs.test: the first pipelined loop
that carries P yields it through a loop nested in its body (a form fa4's
schedule never builds, but valid level C that fa4-sim runs)."""
import re
import sys

source, target = sys.argv[1:3]
lines = open(source).read().split("\n")
for i, line in enumerate(lines):
    m = re.match(r"(\s*)scf\.yield (%new_row_max_\w+, %new_row_sum_\w+, %\w+, )(%probs_\w+)"
                 r" : (.*), (tensor<64x128x(?:f16|bf16)>)$", line)
    if not m:
        continue
    indent, head, probs, types, probs_type = m.groups()
    loop = next(l for l in reversed(lines[:i]) if "scf.for" in l and "iter_args" in l)
    carried = re.findall(r"(%arg\d+) = ", loop)[-1]
    lines[i:i + 1] = [
        f"{indent}%c0_nest = arith.constant 0 : index",
        f"{indent}%c1_nest = arith.constant 1 : index",
        f"{indent}%nested = scf.for %i_nest = %c0_nest to %c1_nest step %c1_nest "
        f"iter_args(%p_nest = {carried}) -> ({probs_type}) {{",
        f"{indent}  scf.yield {probs} : {probs_type}",
        f"{indent}}}",
        f"{indent}scf.yield {head}%nested : {types}, {probs_type}",
    ]
    open(target, "w").write("\n".join(lines))
    sys.exit(0)
sys.exit("nest-probs.py: no pipelined loop yielding P")
