#!/usr/bin/env bash
# Builds fa4 and runs every test: GoogleTest unit tests, then the lit suite
# (dialect, passes, simulator, tools), then the Python package's pytest
# suite. Exits non-zero on any failure and ends with one line "N passed, M
# failed".
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# --asan: the same suite, built with AddressSanitizer and UBSan in its own
# build directory (a full build: by hand, not in CI).
# --quick: the fast tier for iteration (a few minutes after a build): the
# unit tests, the lit tests but the long matrices, emulations and fuzzing
# runs (their names below), and the Python tests but the numerics and the
# fuzzer. CI and the README's test command run everything.
asan=0
quick=0
if [[ ${1:-} == --quick ]]; then
  quick=1
elif [[ ${1:-} == --asan ]]; then
  asan=1
  export FA4_BUILD_DIR=${FA4_BUILD_DIR:-$root/build-asan}
  export FA4_CMAKE_ARGS="-DFA4_SANITIZE=ON"
  # LLVM's own objects live until exit; their allocations are not fa4's leaks.
  # fa4's instrumented code inlines LLVM's BumpPtrAllocator, which then
  # poisons the unused part of slabs that the uninstrumented libMLIR hands
  # out again without unpoisoning (a false use-after-poison in MLIR's
  # storage uniquer): user poisoning off, as it is in libMLIR itself.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allow_user_poisoning=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--quick | --asan]" >&2
  exit 2
fi
build=${FA4_BUILD_DIR:-$root/build}
# ccache (CMakeLists.txt uses it when installed) hashes paths relative to the
# checkout, so a second clone on the same machine reuses the first one's
# objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
# The precompiled header (cmake/Precompiled.h) is cached too only with these
# (ccache's "PRECOMPILED HEADERS"); without them ccache compiles those
# sources itself.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}
"$root/scripts/setup.sh"

# The Python package's build and test dependencies (nanobind, torch, pytest)
# in a venv of the build directory, from PyPI; the package is then built
# (FA4_ENABLE_PYTHON) and its pytest suite runs with the rest. Without
# network the Python tests are skipped, with a line saying so.
python_venv="$build/python-venv"
python_requirements=(nanobind==3.1.0 torch==2.15.0 numpy pytest==9.2.0)
if ((asan)); then
  # An instrumented extension cannot load into an uninstrumented python.
  echo "fa4: --asan builds no Python package; its tests are skipped"
elif [[ ! -x $python_venv/bin/python ]] ||
   ! "$python_venv/bin/python" -c "import nanobind, torch, pytest" >/dev/null 2>&1; then
  if ! { python3 -m venv "$python_venv" >/dev/null 2>&1 &&
         "$python_venv/bin/pip" install -q "${python_requirements[@]}" >/dev/null 2>&1; }; then
    echo "fa4: nanobind/torch/pytest not installable from PyPI; the Python package and its tests will be skipped"
  fi
fi
if ((!asan)) && "$python_venv/bin/python" -c "import nanobind, torch, pytest" >/dev/null 2>&1; then
  python_enabled=ON
  cmake -S "$root" -B "$build" -DFA4_ENABLE_PYTHON=ON \
    -DPython_EXECUTABLE="$python_venv/bin/python" >/dev/null
else
  python_enabled=OFF
  cmake -S "$root" -B "$build" -DFA4_ENABLE_PYTHON=OFF >/dev/null
fi

cmake --build "$build"
cmake --build "$build" --target fa4-doc >/dev/null

# NVIDIA's disassembler for the SASS test, from PyPI (the CUDA toolkit here
# ships none); without network the test is reported unsupported.
tools_venv="$build/cuda-tools"
tools_bin=$(ls -d "$tools_venv"/lib/python3*/site-packages/nvidia/cu13/bin 2>/dev/null | head -n 1 || true)
if [[ -z $tools_bin || ! -x $tools_bin/cuobjdump || ! -x $tools_bin/nvdisasm ]]; then
  if python3 -m venv "$tools_venv" >/dev/null 2>&1 &&
     "$tools_venv/bin/pip" install -q nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >/dev/null 2>&1; then
    tools_bin=$(ls -d "$tools_venv"/lib/python3*/site-packages/nvidia/cu13/bin | head -n 1)
  else
    echo "fa4: cuobjdump/nvdisasm not installable from PyPI; the SASS test will be skipped"
    tools_bin=""
  fi
fi
export FA4_CUDA_TOOLS_BIN=$tools_bin

# NVIDIA's CuTe headers, which PyPI's nvidia-cutlass ships, for the CuTe
# cross-check of the emulator and the descriptor encoders; without network
# that test is reported unsupported. Only the headers are wanted, hence
# --no-deps (the package's Python side would pull in ~300 MB); the version
# is the one the cross-check was written against, whose host route to
# shared-memory addresses it relies on.
cutlass_venv="$build/cutlass"
cutlass_headers() {
  ls -d "$cutlass_venv"/lib/python3*/site-packages/cutlass_library/source/include 2>/dev/null |
    head -n 1 || true
}
cutlass_include=$(cutlass_headers)
if [[ -z $cutlass_include || ! -f $cutlass_include/cute/tensor.hpp ]]; then
  if python3 -m venv "$cutlass_venv" >/dev/null 2>&1 &&
     "$cutlass_venv/bin/pip" install -q --no-deps nvidia-cutlass==4.2.0.0 >/dev/null 2>&1; then
    cutlass_include=$(cutlass_headers)
  else
    cutlass_include=""
  fi
  if [[ -z $cutlass_include || ! -f $cutlass_include/cute/tensor.hpp ]]; then
    echo "fa4: the CuTe headers (nvidia-cutlass) are not installable from PyPI; the CuTe cross-check will be skipped"
    cutlass_include=""
  fi
fi
export FA4_CUTLASS_INCLUDE=$cutlass_include

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# The test commands are defined once, by the check-fa4-* targets.
set +e
echo "== unit tests"
cmake --build "$build" --target check-fa4-unit 2>&1 | tee "$logs/unit"
unit_status=${PIPESTATUS[0]}
echo "== lit tests"
if ((quick)); then
  # The tests that take more than ~20 s each on this project's two-core
  # machine (lit keeps their times in <build>/test/.lit_test_times.txt).
  slow='Pipeline/(hopper-)?matrix|Pipeline/(mods-d|window-bounds)|Emu/(cute-|hopper-hang|seed|long-cta|sync-mutants|mutations|hopper-mutations|nonfinite)|Sim/(block-mask|dtypes|examples|gqa)|fuzz/'
  export LIT_OPTS="${LIT_OPTS:-} --filter-out=$slow"
fi
cmake --build "$build" --target check-fa4-lit 2>&1 | tee "$logs/lit"
lit_status=${PIPESTATUS[0]}
python_status=0
: >"$logs/python"
if [[ $python_enabled == ON ]] && ((quick)); then
  echo "== Python tests (quick: no numerics, no fuzzer)"
  (cd "$build" &&
   PYTHONPATH="$build/python" FA4_CACHE_DIR="$build/python-tests-cache" \
   FA4RT_LIBRARY="$build/lib/libfa4rt.so" \
   "$python_venv/bin/python" -m pytest -q -p no:cacheprovider \
     "$root/python/tests/test_errors.py" "$root/python/tests/test_targets.py" \
     "$root/python/tests/test_compile.py" "$root/python/tests/test_arguments.py") 2>&1 |
    tee "$logs/python"
  python_status=${PIPESTATUS[0]}
elif [[ $python_enabled == ON ]]; then
  echo "== Python tests"
  cmake --build "$build" --target check-fa4-python 2>&1 | tee "$logs/python"
  python_status=${PIPESTATUS[0]}
fi
set -e

count() {
  local n
  n=$(grep -oE "$1" "$2" | grep -oE '[0-9]+' | tail -n 1 || true)
  echo "${n:-0}"
}
# pytest's closing line: "3 failed, 16 passed, 1 error in 12.0s".
pytest_count() {
  local n
  n=$(grep -E '^(=+ )?[0-9]+ (passed|failed|errors?|skipped).* in [0-9.]+s' "$logs/python" |
      grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' | tail -n 1 || true)
  echo "${n:-0}"
}
passed=$(( $(count '\[  PASSED  \] [0-9]+' "$logs/unit") + $(count 'Passed *: *[0-9]+' "$logs/lit") +
           $(pytest_count passed) ))
failed=$(( $(count '\[  FAILED  \] [0-9]+ test' "$logs/unit") + $(count 'Failed *: *[0-9]+' "$logs/lit") +
           $(pytest_count failed) + $(pytest_count 'errors?') ))
if ((unit_status != 0 || lit_status != 0 || python_status != 0)) && ((failed == 0)); then
  failed=1 # a runner died before it could count
fi
echo "$passed passed, $failed failed"
((unit_status == 0 && lit_status == 0 && python_status == 0))
