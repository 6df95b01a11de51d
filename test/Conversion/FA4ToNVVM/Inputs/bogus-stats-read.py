"""Adds to a backward schedule (stdin) a shared-memory buffer of TYPE and, in
the grad role, a read of part of its row 0 like the LSE's:
bogus-stats-read.py '<[2, 128], f16, stages = 2>' f16."""
import re
import sys

buffer_type, element = sys.argv[1], sys.argv[2]
lines = sys.stdin.read().split("\n")
out, added_alloc, added_read = [], False, False
for line in lines:
    out.append(line)
    if not added_alloc and 'fa4.smem_alloc "stats"' in line:
        indent = line[:len(line) - len(line.lstrip())]
        out.append(f'{indent}%bogus = fa4.smem_alloc "bogus" : {buffer_type}')
        added_alloc = True
    m = re.search(r"= fa4\.smem_load %\w+\[(%\w+)\] row 0 column 0 \{transposed\}", line)
    if added_alloc and not added_read and m:
        indent = line[:len(line) - len(line.lstrip())]
        out.append(f"{indent}%bogus_read = fa4.smem_load %bogus[{m.group(1)}] row 0 column 4 "
                   f"{{transposed}} : {buffer_type} -> tensor<32x{element}>")
        added_read = True
if not (added_alloc and added_read):
    sys.exit("bogus-stats-read.py: no stats ring or no read of it")
sys.stdout.write("\n".join(out))
