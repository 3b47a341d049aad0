#!/usr/bin/env bash
# Plain CMake, as a site's engineer types it: `cmake -S . -B build` with the default generator
# (Unix Makefiles), once as this machine is (with nvcc, when it has one) and once as a machine
# without it (CUDACXX pointing nowhere: CMake then finds no CUDA compiler, wherever nvcc is
# installed). Both must configure and generate. Argument: the source directory.
set -euo pipefail
source="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
no_cuda_path="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -i cuda | paste -sd: -)"
check() {  # name, then env assignments for cmake
  local name="$1"
  shift
  if ! env "$@" cmake -S "$source" -B "$work/$name" -DCMAKE_BUILD_TYPE=Release \
      -DFL_BUILD_TESTS=OFF -DFL_BUILD_BENCH=OFF >"$work/$name.log" 2>&1; then
    echo "the default generator fails to configure ($name):" >&2
    grep -A8 'CMake Error' "$work/$name.log" >&2 || tail -n 20 "$work/$name.log" >&2
    exit 1
  fi
  grep -q 'CMAKE_GENERATOR:INTERNAL=Unix Makefiles' "$work/$name/CMakeCache.txt"
  echo "$name: $(grep -m1 'fl: CUDA backend' "$work/$name.log" | sed 's/^-- //')"
}
check as-is PATH="$PATH"
check without-nvcc PATH="$no_cuda_path" CUDACXX=/nonexistent/nvcc
grep -q 'fl: CUDA backend: not built' "$work/without-nvcc.log"
