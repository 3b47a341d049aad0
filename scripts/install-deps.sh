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
  libcpp-httplib-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: every package is already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
