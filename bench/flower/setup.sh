#!/usr/bin/env bash
# Creates the Python environment of Flower's side of bench/flower_compare.sh and
# bench/sim_throughput.sh: a venv with flwr[simulation]==1.42.0 (Flower and its Ray simulation
# runtime), numpy and threadpoolctl (to report which BLAS kernel numpy runs) from PyPI.
# Idempotent: an existing venv that already imports that flwr, ray, numpy and threadpoolctl is
# left as it is; one that lacks any of them gets them installed.
#   bench/flower/setup.sh [VENV_DIR]     (default: $FLOWER_VENV, else /tmp/fl-flower-venv)
# Prints the venv's python on its last line.
set -euo pipefail

FLWR_VERSION=1.42.0
VENV="${1:-${FLOWER_VENV:-/tmp/fl-flower-venv}}"
PY="$VENV/bin/python"

installed_version() {
  "$PY" -c 'import importlib.metadata as m, numpy, ray, threadpoolctl; print(m.version("flwr"))' \
    2>/dev/null || true
}

if [[ -x "$PY" && "$(installed_version)" == "$FLWR_VERSION" ]]; then
  echo "flwr $FLWR_VERSION already installed in $VENV" >&2
  echo "$PY"
  exit 0
fi

if ! command -v python3 >/dev/null; then
  echo "python3 is missing (Debian: apt-get install python3 python3-venv)" >&2
  exit 1
fi
# Debian splits venv (and its ensurepip) into python3-venv: without it `python3 -m venv` fails.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  pkg="python3-venv"
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "installing $pkg (needed by python3 -m venv)" >&2
    apt-get update -qq && apt-get install -y -qq "$pkg" >&2
  else
    echo "python3 -m venv needs the Debian package $pkg: run 'sudo apt-get install $pkg'" >&2
    exit 1
  fi
fi

if [[ ! -x "$PY" ]]; then
  echo "creating $VENV" >&2
  python3 -m venv "$VENV" >&2
  "$PY" -m pip install --quiet --upgrade pip >&2
fi
echo "installing flwr[simulation]==$FLWR_VERSION numpy threadpoolctl from PyPI into $VENV" >&2
"$PY" -m pip install --quiet "flwr[simulation]==$FLWR_VERSION" numpy threadpoolctl >&2
if [[ "$(installed_version)" != "$FLWR_VERSION" ]]; then
  echo "flwr $FLWR_VERSION did not install into $VENV" >&2
  exit 1
fi
echo "$PY"
