#!/usr/bin/env bash
# Configures and builds into ./build (incremental). BUILD_TYPE and JOBS may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >/dev/null
cmake --build build -j "$jobs"
