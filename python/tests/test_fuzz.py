"""Short runs of the argument-layer fuzzer (fuzz_arguments.py, which runs
longer by hand): its batches in child processes, no finding, no crash, no
hang."""

import json
import os
import subprocess
import sys

FUZZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_arguments.py")


def _run(*arguments):
    """The fuzzer's report of a run with `arguments`, checked clean."""
    run = subprocess.run([sys.executable, FUZZER, *arguments], capture_output=True,
                         text=True, timeout=1800)
    report = json.loads(run.stdout)
    total = report["total"]
    assert (total["findings"], total["crashes"], total["hangs"]) == (0, 0, 0), \
        json.dumps(report["findings"], indent=1)
    assert run.returncode == 0
    return report


def test_argument_fuzzer_short_run():
    total = _run("--seed", "24", "--batches", "2", "--cases", "30")["total"]
    assert total["cases"] == 60
    # Both answers occur: the run reaches launches, not only refusals.
    assert total["results"] > 0 and total["refusals"] > 0


def test_argument_fuzzer_plan_only_run():
    # --execute-every: the kernel runs in every 50th case only; the others
    # make every check and the launch plan, and count as "planned".
    report = _run("--seed", "25", "--batches", "2", "--cases", "100",
                  "--execute-every", "50", "--jobs", "2")
    total = report["total"]
    assert total["cases"] == 200
    assert total["planned"] > 0 and total["refusals"] > 0
    # Both entries (fa4.Kernel and fa4._capi.Kernel, one C API beneath).
    assert report["by_entry"]["fa4.Kernel"]["planned"] > 0
    assert report["by_entry"]["fa4._capi.Kernel"]["planned"] > 0
