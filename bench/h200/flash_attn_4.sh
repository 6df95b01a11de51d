#!/usr/bin/env bash
# FlashAttention-4 (PyPI flash-attn-4, CuTe DSL) for bench.py and profile.py
# to time beside fa4 on the GPU machine, which has no package index. Its
# wheels travel from here, and the largest (the CuTe DSL's compiler,
# nvidia-cutlass-dsl-libs-cu12, 92 MB) is repacked as an xz tarball in parts
# small enough for a transfer each.
#
#   bench/h200/flash_attn_4.sh fetch DIR     here: download the wheels into
#                                            DIR/a, DIR/b, DIR/c (about 22 MB
#                                            of parts and wheels each)
#   bench/h200/flash_attn_4.sh stage PART    there: keep PART's files in
#                                            TMP/flash-attn-4 (the machine
#                                            keeps its temporary directory
#                                            between calls while it is warm)
#   bench/h200/flash_attn_4.sh install       there: install everything staged
#                                            into TMP/site (then
#                                            PYTHONPATH=TMP/site)
#
# TMP is the temporary directory (mktemp's: $TMPDIR or the system's).
#
# Versions: flash-attn-4 4.0.0b36 and nvidia-cutlass-dsl 4.8.1 (those the
# issue's figures came from), their dependencies for CPython 3.12.
set -euo pipefail

tmp=$(dirname "$(mktemp -u)")
stage=$tmp/flash-attn-4
site=$tmp/site
packages=(flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1
  nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1
  quack-kernels apache-tvm-ffi torch-c-dlpack-ext einops "cuda-bindings>=12.8,<13"
  protobuf)
compiler=nvidia-cutlass-dsl-libs-cu12==4.8.1

case "${1:-}" in
fetch)
  out=${2:?usage: $0 fetch DIR}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  download() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$1" "${@:2}"
  }
  download "$tmp/wheels" "${packages[@]}"
  download "$tmp/compiler" "$compiler"
  mkdir -p "$tmp/tree"
  (cd "$tmp/tree" && unzip -q "$tmp"/compiler/*.whl)
  tar -C "$tmp/tree" -cf - . | xz -T0 -6 >"$tmp/compiler.tar.xz"
  (cd "$tmp" && split -b 22000000 -d compiler.tar.xz compiler.part)
  # One part a transfer: DIR/a, DIR/b, ... (as many as the compiler needs;
  # three for 4.8.1), the other wheels beside the first two.
  dirs=()
  for part in "$tmp"/compiler.part*; do
    dir=$out/$(printf "\\$(printf '%03o' $((97 + ${#dirs[@]})))")
    mkdir -p "$dir"
    mv "$part" "$dir/"
    dirs+=("$dir")
  done
  mv "$tmp"/wheels/cuda_bindings-*.whl "$tmp"/wheels/protobuf-*.whl "${dirs[0]}/"
  mv "$tmp"/wheels/*.whl "${dirs[1]:-${dirs[0]}}/"
  du -sh "${dirs[@]}"
  ;;
stage)
  part=${2:?usage: $0 stage PART}
  if ! compgen -G "$part/*" >/dev/null; then
    echo "$0: $part holds nothing to stage (a directory that fetch wrote)" >&2
    exit 1
  fi
  mkdir -p "$stage"
  cp "$part"/* "$stage/"
  ls "$stage"
  ;;
install)
  if ! compgen -G "$stage/*.whl" >/dev/null || ! compgen -G "$stage/compiler.part*" >/dev/null; then
    echo "$0: nothing staged in $stage: stage every part fetch wrote first" >&2
    exit 1
  fi
  parts=("$stage"/compiler.part*)
  last=${parts[-1]##*.part}
  if ((10#$last + 1 != ${#parts[@]})); then
    echo "$0: compiler parts missing: ${#parts[@]} staged, the last is part$last" >&2
    exit 1
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$site" "$stage"/*.whl
  # After the wheels: pip --target replaces the top-level directories it
  # installs, the compiler's files share nvidia_cutlass_dsl/ with them.
  cat "$stage"/compiler.part* | xz -d | tar -C "$site" -xf -
  PYTHONPATH=$site python3 -c "import sys; sys.path.insert(0, '$site/nvidia_cutlass_dsl/dsl_packages'); \
import cutlass, flash_attn.cute.interface; print('flash-attn-4 imports')"
  ;;
*)
  echo "usage: $0 fetch DIR | stage PART | install" >&2
  exit 2
  ;;
esac
