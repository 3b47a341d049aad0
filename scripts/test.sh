#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit and integration) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
./scripts/install-deps.sh
./scripts/build.sh
cd build
ctest --output-on-failure --timeout 300 -j "${JOBS:-$(nproc)}"
echo "test.sh: finished in $(( $(date +%s) - start )) s"
