#!/usr/bin/env python3
"""Where a kernel's warps wait, from the SASS pages profile.sh writes
(NAME-sass.csv: Nsight Compute's source view with each instruction's
sampled stall reasons): per kernel, the share of samples by stall reason
and by opcode, the warp instructions executed by opcode, and the hottest
instructions with their top reasons. Compare two kernels side by side by
naming both:

  python3 bench/h200/ncu_stalls.py OUT/fa4-hd128-full-sass.csv \\
      OUT/FA4-hd128-full-sass.csv [--top 20]
"""

import argparse
import collections
import csv
import sys


REQUIRED = ("Address", "Source", "# Samples", "Instructions Executed")


def load(path):
    """(header, rows) of an ncu --page source --csv export: the header is
    the first line naming the sampled columns (ncu's own lines, and any
    warning profile.sh captured with it, come before it)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"ncu_stalls: cannot read {path}: {e}")
    for at, row in enumerate(rows):
        if "# Samples" in row:
            missing = [name for name in REQUIRED if name not in row]
            if missing:
                sys.exit(f"ncu_stalls: {path} has no {', '.join(missing)} column: "
                         "not ncu's SASS source page (profile.sh's NAME-sass.csv)")
            return row, [r for r in rows[at + 1:] if len(r) == len(row)]
    sys.exit(f"ncu_stalls: {path} is not ncu's SASS source page as CSV "
             "(profile.sh's NAME-sass.csv): no '# Samples' column")


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):  # a predicate guard
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def summarize(path, top):
    header, rows = load(path)
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def number(row, name):
        try:
            return int(row[col[name]] or 0)
        except ValueError:
            return 0

    samples = sum(number(r, "# Samples") for r in rows)
    if not samples:
        print(f"== {path}: no samples")
        return
    by_reason, by_op, executed = (collections.Counter() for _ in range(3))
    for r in rows:
        for name in reasons:
            by_reason[name[len("stall_"):]] += number(r, name)
        op = opcode(r[col["Source"]])
        by_op[op] += number(r, "# Samples")
        executed[op] += number(r, "Instructions Executed")
    total = sum(executed.values()) or 1  # a page of samples alone
    print(f"== {path}: {samples} samples, {total} warp instructions")
    print("  stall reasons: " + ", ".join(
        f"{k} {100 * v / samples:.1f}%" for k, v in by_reason.most_common(9)))
    print("  samples by opcode: " + ", ".join(
        f"{k} {100 * v / samples:.1f}%" for k, v in by_op.most_common(10)))
    print("  executed by opcode: " + ", ".join(
        f"{k} {100 * v / total:.1f}%" for k, v in executed.most_common(10)))
    for r in sorted(rows, key=lambda r: -number(r, "# Samples"))[:top]:
        worst = sorted(((number(r, n), n[len("stall_"):]) for n in reasons), reverse=True)[:3]
        print(f"  {100 * number(r, '# Samples') / samples:5.1f}%  {r[col['Address']][-5:]}  "
              f"{r[col['Source']].strip()[:58]:58}  x{number(r, 'Instructions Executed')}  "
              + ", ".join(f"{n} {c}" for c, n in worst if c))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="+", help="NAME-sass.csv files of profile.sh")
    parser.add_argument("--top", type=int, default=15, help="hottest instructions shown")
    args = parser.parse_args()
    if args.top < 0:
        parser.error("--top must be 0 or more")
    for path in args.pages:
        summarize(path, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
