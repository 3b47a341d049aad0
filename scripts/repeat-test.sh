#!/usr/bin/env bash
# Runs one test binary's filtered tests again and again, to catch an intermittent hang. When a run
# outlives HANG_S seconds, the thread stacks of the test process and of its children (a server it
# started) are written with gdb before they are killed.
#
#   scripts/repeat-test.sh build/tests/restart_test 'RestartTest.SigtermMidRound*' [runs] [out-dir]
set -euo pipefail
binary="$1"
filter="$2"
runs="${3:-20}"
out="${4:-$(mktemp -d /tmp/fl-repeat.XXXXXX)}"
hang_s="${HANG_S:-90}"
command -v gdb >/dev/null || { echo "repeat-test: needs gdb (apt-get install gdb)" >&2; exit 2; }
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
  "$binary" --gtest_filter="$filter" > "$out/run_$i.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 "$hang_s"); do
    sleep 1
    kill -0 "$pid" 2>/dev/null || break
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "run $i: HUNG after ${hang_s} s; stacks in $out/stacks_${i}_*.txt"
    gdb -p "$pid" -batch -ex "thread apply all bt" > "$out/stacks_${i}_test.txt" 2>&1 || true
    for child in $(pgrep -P "$pid" || true); do
      gdb -p "$child" -batch -ex "thread apply all bt" > "$out/stacks_${i}_child_$child.txt" 2>&1 || true
    done
    pkill -9 -P "$pid" || true
    kill -9 "$pid" 2>/dev/null || true
  else
    rc=0
    wait "$pid" || rc=$?
    echo "run $i: exit $rc"
  fi
done
echo "logs in $out"
