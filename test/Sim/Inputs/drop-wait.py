"""Deletes one role's waits on one mbarrier of a level-C schedule.

Usage: drop-wait.py BARRIER ROLE < schedule.mlir > mutated.mlir

BARRIER is the name fa4-insert-barriers gave the mbarrier ("do_full"), ROLE
the fa4.role whose `fa4.mbarrier_wait`s on it go. A test input that breaks a
correct schedule on purpose, so that a test can show fa4-sim catches it.
"""
import re
import sys

barrier, role = sys.argv[1], sys.argv[2]
text = sys.stdin.read()
found = re.search(r'(%\w+) = fa4\.mbarrier_alloc "' + re.escape(barrier) + '"',
                  text)
if not found:
    sys.exit(f"no mbarrier named {barrier}")
name = found.group(1)
out, inside, dropped = [], False, 0
for line in text.splitlines(keepends=True):
    if 'fa4.role "' in line:
        inside = f'fa4.role "{role}"' in line
    if inside and re.search(r'fa4\.mbarrier_wait ' + re.escape(name) + r'\[',
                            line):
        dropped += 1
        continue
    out.append(line)
if not dropped:
    sys.exit(f"role {role} never waits on {barrier}")
sys.stdout.write("".join(out))
