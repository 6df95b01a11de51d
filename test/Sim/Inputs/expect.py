"""Reads fa4-sim's JSON report from stdin and asserts a Python expression over
its fields, e.g. `expect.py "rescales_skipped > 4 * rescales_done"`."""
import json
import sys

report = json.loads(sys.stdin.read())
expression = sys.argv[1]
if not eval(expression, {}, dict(report)):
    sys.exit(f"expected {expression}, got {report}")
print(f"holds: {expression}")
