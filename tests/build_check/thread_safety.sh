#!/usr/bin/env bash
# Clang's thread-safety analysis (-Wthread-safety) over sources that carry lock annotations
# (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED): each is parsed, not compiled, with the flags
# of its target (a response file CMake writes) and any warning of the analysis is an error.
# Arguments: the clang++ to use ("" when CMake found none), then pairs of a response file and a
# source file. Exit 77 (CTest: skipped) when there is no clang++; install it with
# scripts/install-deps.sh (Debian's clang).
set -uo pipefail
clang="$1"
shift
if [ -z "$clang" ] || ! command -v "$clang" >/dev/null; then
  echo "skipped: no clang++ found; the analysis needs Clang (Debian: apt-get install clang)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
checked=0
while [ $# -ge 2 ]; do
  # The target's flags without what CMake's lists leave empty ("-D" alone would swallow the next
  # argument) and without /usr/include, which must stay behind the C++ library's own headers.
  rsp="$work/$(basename "$1")"
  grep -v -x -e '-D' -e '-I""' -e '-I"/usr/include"' "$1" >"$rsp"
  src="$2"
  shift 2
  # -Wno-unknown-warning-option: GCC-only warnings in the target's flags.
  if ! "$clang" -std=c++20 -fsyntax-only -Wthread-safety -Wthread-safety-beta \
      -Werror=thread-safety -Werror=thread-safety-beta -Wno-unknown-warning-option \
      -Wno-source-uses-openmp "@$rsp" "$src"; then
    echo "thread-safety analysis failed: $src" >&2
    failed=1
  fi
  checked=$((checked + 1))
done
if [ "$failed" -ne 0 ]; then exit 1; fi
echo "thread-safety analysis: $checked files clean ($("$clang" --version | head -n 1))"
