"""Reads a backward tile program on stdin and writes it with the constant
0.05 changed to 0.2 inside every fa4.score_mod_grad body only (the
forward's score_mod copies keep theirs): backward.test's sensitivity
check."""
import sys

inside = False
for line in sys.stdin:
    if "fa4.score_mod_grad" in line:
        inside = True
    if inside:
        line = line.replace("5.000000e-02", "2.000000e-01")
    if inside and "fa4.yield" in line:
        inside = False
    sys.stdout.write(line)
