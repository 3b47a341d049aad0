#!/usr/bin/env bash
# Installs, from Debian 12's packages, whatever the build, the tests and the demo need and this
# machine lacks. Run as root (or with sudo). Safe to run again: it installs only what is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang  # the thread-safety analysis test (Build.ThreadSafetyAnalysis) and the fuzz targets
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libssl-dev libsqlite3-dev libeigen3-dev zlib1g-dev
  libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist
  # The Python SDK (python/): headers to build against, the venv below, and what its tests and
  # the PyTorch example (examples/pytorch_site) import.
  python3-dev python3-venv python3-numpy python3-pytest python3-torch
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: every package is already installed"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# What Debian 12 lacks, from PyPI, in a venv at .venv that also sees Debian's numpy, pytest and
# torch: nanobind (the Python SDK's bindings) and scikit-build-core (`pip install ./python`).
# Debian's own python3, not whatever `python3` is first on PATH.
cd "$(dirname "$0")/.."
venv_python=.venv/bin/python
wanted="nanobind==3.1.0 scikit-build-core==1.1.2"
if ! "$venv_python" -c 'import importlib.metadata as m, sys
sys.exit(not (m.version("nanobind") == "3.1.0" and m.version("scikit-build-core") == "1.1.2"))' \
    2>/dev/null; then
  echo "install-deps: making .venv with $wanted"
  /usr/bin/python3 -m venv --system-site-packages .venv
  "$venv_python" -m pip install -q $wanted
fi
