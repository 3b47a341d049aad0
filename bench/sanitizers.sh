#!/usr/bin/env bash
# Builds the whole tree with sanitizers and runs the whole CTest suite under them.
#
#   bench/sanitizers.sh asan    AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan/
#   bench/sanitizers.sh tsan    ThreadSanitizer, in build-tsan/
#   bench/sanitizers.sh         both, one after the other
#
# Any report fails the test it happens in (halt_on_error / -fno-sanitize-recover), so a clean run
# is CTest's "100% tests passed". The Python SDK (its tests load the extension into the system's
# uninstrumented python3) and the benchmarks are left out of these builds; the CUDA backend too
# (nvcc does not take the sanitizer flags; its tests skip without a device anyway). Extra
# arguments after the mode go to ctest (e.g. -R Engine).
#
# Environment: JOBS (default: the number of cores) for the build and the tests. The times of a
# run are printed at the end. CI does not run it yet: which subset it will run is decided with the
# first full run's times.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${JOBS:-$(nproc)}
modes=("$@")
ctest_args=()
if [[ ${#modes[@]} -eq 0 ]]; then
  modes=(asan tsan)
elif [[ ${modes[0]} == asan || ${modes[0]} == tsan ]]; then
  ctest_args=("${modes[@]:1}")
  modes=("${modes[0]}")
else
  echo "usage: bench/sanitizers.sh [asan|tsan] [ctest arguments...]" >&2
  exit 2
fi

run_mode() {
  local mode=$1 dir flags
  case $mode in
    asan)
      dir=$root/build-asan
      flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
      export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
      export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
      export LSAN_OPTIONS="suppressions=$root/bench/sanitizers/lsan.supp:print_suppressions=0"
      ;;
    tsan)
      dir=$root/build-tsan
      flags="-fsanitize=thread -fno-omit-frame-pointer"
      export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/bench/sanitizers/tsan.supp:print_suppressions=0"
      ;;
  esac
  local start
  start=$(date +%s)
  mkdir -p "$dir"
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
    -DFL_BUILD_PYTHON=OFF -DFL_BUILD_BENCH=OFF -DFL_ENABLE_CUDA=OFF > "$dir/fl-configure.log"
  ninja -C "$dir" -j "$jobs"
  local built
  built=$(date +%s)
  local rc=0
  (cd "$dir" && ctest --output-on-failure --timeout 1200 -j "$jobs" "${ctest_args[@]}") || rc=$?
  local done_at
  done_at=$(date +%s)
  echo "sanitizers.sh $mode: build $((built - start)) s, tests $((done_at - built)) s, ctest exit $rc"
  return $rc
}

status=0
for mode in "${modes[@]}"; do
  run_mode "$mode" || status=1
done
exit $status
