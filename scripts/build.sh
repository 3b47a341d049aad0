#!/usr/bin/env bash
# Configures and builds into ./build (incremental). BUILD_TYPE and JOBS may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc)}"
# The Python SDK builds with the install step's venv (it has nanobind); without it, it is skipped.
python_args=()
[ -x .venv/bin/python ] && python_args=(-DPython_EXECUTABLE="$PWD/.venv/bin/python")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "${python_args[@]}" \
  >/dev/null
cmake --build build -j "$jobs"
