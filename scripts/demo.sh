#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a simulated federation of 10 clients
# over mutual TLS on Fashion-MNIST (FedAvg, 10 rounds). Extra arguments go to `fl sim`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
exec ./build/cli/fl sim --work-dir runs "$@"
