"""Lays TMEM view VIEW over buffer BUFFER instead of its own (a mutation of
a level-C schedule read from stdin): retarget-view.py VIEW BUFFER."""
import re
import sys

view, buffer = sys.argv[1], sys.argv[2]
text = sys.stdin.read()
found = re.search(r'(%[0-9]+) = fa4\.tmem_alloc "' + re.escape(buffer) + '"', text)
if not found:
    sys.exit(f"retarget-view.py: no tmem_alloc \"{buffer}\"")
text, count = re.subn(r'(fa4\.tmem_view "' + re.escape(view) + r'" )%[0-9]+ :',
                      lambda m: m.group(1) + found.group(1) + " :", text)
if count != 1:
    sys.exit(f"retarget-view.py: {count} tmem_view \"{view}\"")
sys.stdout.write(text)
