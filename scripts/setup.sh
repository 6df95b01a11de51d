#!/usr/bin/env bash
# Installs what fa4 builds with, when it is missing (Debian 12, run as root or
# through sudo), and configures the build directory. Idempotent.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FA4_BUILD_DIR:-$root/build}
llvm_prefix=${FA4_LLVM_PREFIX:-/usr/lib/llvm-22}

packages=(cmake ninja-build ccache g++ python3 libgtest-dev
          llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "fa4: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFA4_LLVM_PREFIX="$llvm_prefix" -DFA4_WERROR=ON ${FA4_CMAKE_ARGS:-} >/dev/null
fi
