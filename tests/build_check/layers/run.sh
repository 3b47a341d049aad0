#!/usr/bin/env bash
# Configures ./CMakeLists.txt twice: the kept rule must configure, the broken one must fail and say
# which link breaks which rule. Exit 0 only when both do as they should. Argument: the cmake to
# use (CTest passes the one that configured the build; default: cmake on the PATH).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cmake="${1:-cmake}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! "$cmake" -S "$here" -B "$work/ok" -DFL_LAYERS_CASE=ok >"$work/ok.log" 2>&1; then
  echo "a build that keeps the rule failed to configure:" >&2
  cat "$work/ok.log" >&2
  exit 1
fi
if "$cmake" -S "$here" -B "$work/broken" -DFL_LAYERS_CASE=broken >"$work/broken.log" 2>&1; then
  echo "a build that breaks the rule configured; cmake/FlLayers.cmake let it through" >&2
  exit 1
fi
if ! grep -q 'low may not link net (low -> middle -> net): the low layer stays off the network' \
    "$work/broken.log"; then
  echo "the refusal does not name the rule and its path:" >&2
  cat "$work/broken.log" >&2
  exit 1
fi
echo "kept rule configures; broken rule refused: $(grep -m1 'may not link' "$work/broken.log")"
