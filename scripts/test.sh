#!/usr/bin/env bash
# Builds fa4 and runs every test: GoogleTest unit tests, then the lit suite
# (dialect, passes, simulator, tools). Exits non-zero on any failure and ends
# with one line "N passed, M failed".
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FA4_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"

cmake --build "$build"
cmake --build "$build" --target fa4-doc >/dev/null

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# The test commands are defined once, by the check-fa4-* targets.
set +e
echo "== unit tests"
cmake --build "$build" --target check-fa4-unit 2>&1 | tee "$logs/unit"
unit_status=${PIPESTATUS[0]}
echo "== lit tests"
cmake --build "$build" --target check-fa4-lit 2>&1 | tee "$logs/lit"
lit_status=${PIPESTATUS[0]}
set -e

count() {
  local n
  n=$(grep -oE "$1" "$2" | grep -oE '[0-9]+' | tail -n 1 || true)
  echo "${n:-0}"
}
passed=$(( $(count '\[  PASSED  \] [0-9]+' "$logs/unit") + $(count 'Passed *: *[0-9]+' "$logs/lit") ))
failed=$(( $(count '\[  FAILED  \] [0-9]+ test' "$logs/unit") + $(count 'Failed *: *[0-9]+' "$logs/lit") ))
if ((unit_status != 0 || lit_status != 0)) && ((failed == 0)); then
  failed=1 # a runner died before it could count
fi
echo "$passed passed, $failed failed"
((unit_status == 0 && lit_status == 0))
