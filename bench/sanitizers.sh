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
# (nvcc does not take the sanitizer flags; its tests skip without a device anyway). The tests that
# build a consumer of the installed SDK get the same flags through CFLAGS/CXXFLAGS/LDFLAGS.
# Extra arguments after the mode go to ctest (e.g. -R Engine), in one pass.
#
# One exception, under asan: the `fl sim --mpi` tests run without LeakSanitizer (address and
# undefined-behaviour checks stay on). OpenMPI 4.1.4 leaks in MPI_Init through components it
# unloads again at MPI_Finalize, so those stacks end in "<unknown module>" and no suppression can
# name them (Debian's build has no mca_base_component_disable_dlclose). The same simulation code
# runs under the leak checker in every other sim test.
#
# Under tsan, the three tests whose bounds on the process's resident memory TSan's shadow memory
# breaks are left out (they pass under asan); bench/sanitizers/tsan.supp says what
# else is not reported and why (gRPC's and OpenSSL's uninstrumented synchronisation), and OpenMP
# regions run on one thread (libgomp is not instrumented either).
#
# Under tsan, Abseil and gRPC come from Debian uninstrumented: absl::Mutex's annotations are
# compiled out, so ThreadSanitizer would not see the locks that gRPC and this code take, and
# would report every access they guard. The script therefore builds Debian's own Abseil source
# package (the version installed, with Debian's patches: same SONAMEs, same inline namespace)
# with -fsanitize=thread into build-tsan/absl once, and runs the tests with it first on
# LD_LIBRARY_PATH, so the locks gRPC takes through Abseil are seen too. That needs a deb-src
# entry for Debian; as root the script adds one (/etc/apt/sources.list.d/fl-debsrc.*) when there
# is none.
#
# Environment: JOBS (default: the number of cores) for the build and the tests. The times of a
# run are printed at the end. CI runs neither full run (each is a whole build of its own and
# 7 to 11 minutes of tests on two cores): it runs the subset that reads outside input, the
# decoders' fuzz replays (Fuzz.*Replay), the decoders compiled with ASan+UBSan.
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

# Debian's Abseil, built with ThreadSanitizer into $1 (lib/ holds the .so files) unless there.
build_tsan_abseil() {
  local out=$1
  local version  # of the source package (a binNMU's binary version has a +bN the source lacks)
  version=$(dpkg-query -W -f '${source:Version}' libabsl-dev 2> /dev/null) || version=""
  if [[ -z $version ]]; then
    echo "sanitizers.sh: libabsl-dev is not installed (scripts/install-deps.sh installs it)" >&2
    return 1
  fi
  if [[ -f $out/version && $(cat "$out/version") == "$version" ]]; then return 0; fi
  echo "sanitizers.sh: building Abseil $version with ThreadSanitizer into $out (once)"
  if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d; then
    if [[ $(id -u) -ne 0 ]]; then
      echo "sanitizers.sh: tsan needs Debian's source packages: add a deb-src entry and" \
        "apt-get update" >&2
      return 1
    fi
    # The deb-src twin of the machine's Debian entries: deb822 (bookworm's debian.sources) or
    # the classic one-line format.
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        > /etc/apt/sources.list.d/fl-debsrc.sources
    elif [[ -f /etc/apt/sources.list ]]; then
      sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > /etc/apt/sources.list.d/fl-debsrc.list
    fi
    if ! grep -rqs '^Types: deb-src\|^deb-src' /etc/apt/sources.list.d; then
      rm -f /etc/apt/sources.list.d/fl-debsrc.*
      echo "sanitizers.sh: no Debian entry to make a deb-src entry of; add one and" \
        "apt-get update" >&2
      return 1
    fi
    apt-get update -qq || return 1
  fi
  rm -rf "$out" && mkdir -p "$out/src"
  if ! (cd "$out/src" && apt-get source -qq "abseil=$version" > /dev/null); then
    echo "sanitizers.sh: apt-get source abseil=$version failed: the mirror no longer has the" \
      "installed version; upgrade libabsl-dev (apt-get install libabsl-dev) and run again" >&2
    return 1
  fi
  local src
  src=$(find "$out/src" -mindepth 1 -maxdepth 1 -type d -name 'abseil-*')
  cmake -S "$src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_PREFIX="$out" \
    -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" > "$out/configure.log" || return 1
  ninja -C "$out/build" -j "$jobs" install > "$out/build.log" || { tail "$out/build.log"; return 1; }
  rm -rf "$out/src" "$out/build"
  echo "$version" > "$out/version"
}

tsan_memory_tests='^(PageBufferTest[.]PagesCost|ModelTest[.]ALargeModelIsZero|FedAvgMemoryTest[.])'

run_mode() {
  local mode=$1 dir flags
  case $mode in
    asan)
      dir=$root/build-asan
      flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
      # allocator_may_return_null: a failed malloc/aligned_alloc returns null as it does without
      # ASan, so the code's own out-of-memory errors are what the tests see (a throwing
      # operator new still ends in ASan's report rather than std::bad_alloc).
      export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1"
      export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
      export LSAN_OPTIONS="suppressions=$root/bench/sanitizers/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0"
      ;;
    tsan)
      dir=$root/build-tsan
      flags="-fsanitize=thread -fno-omit-frame-pointer"
      export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$root/bench/sanitizers/tsan.supp:print_suppressions=0"
      # libgomp is not instrumented either: TSan cannot see an OpenMP region's fork and join, so
      # each region would report its workers' writes. One thread per region under TSan; the
      # parallel kernels are checked by their results in the other runs (CpuGemmTest,
      # FashionMnistSliceTest.ThreadsGiveTheSameModel).
      export OMP_THREAD_LIMIT=1
      build_tsan_abseil "$dir/absl" || return 1
      export LD_LIBRARY_PATH="$dir/absl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      ;;
  esac
  # Everything runs several times slower: the tests that time their faults stretch them by this
  # (ASan's allocation stacks make it the slower of the two here).
  if [[ $mode == asan ]]; then export FL_TEST_SLOWDOWN=4; else export FL_TEST_SLOWDOWN=2; fi
  # The nested CMake builds of the tests (a consumer of the installed SDK) read these.
  export CFLAGS="$flags" CXXFLAGS="$flags" LDFLAGS="$flags"
  local start
  start=$(date +%s)
  mkdir -p "$dir"
  # `|| return`: set -e does not apply inside a function called from `||`.
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
    -DFL_BUILD_PYTHON=OFF -DFL_BUILD_BENCH=OFF -DFL_ENABLE_CUDA=OFF > "$dir/fl-configure.log" ||
    return 1
  ninja -C "$dir" -j "$jobs" || return 1
  local built
  built=$(date +%s)
  local rc=0
  local ctest=(ctest --output-on-failure --timeout 1200 -j "$jobs")
  if [[ $mode == tsan ]]; then
    # The tests that measure this process's resident memory: TSan's shadow memory (several times
    # what the program touches) is counted in it. (A -E among the arguments replaces this one.)
    (cd "$dir" && "${ctest[@]}" -E "$tsan_memory_tests" "${ctest_args[@]}") || rc=$?
  elif [[ ${#ctest_args[@]} -gt 0 ]]; then
    (cd "$dir" && "${ctest[@]}" "${ctest_args[@]}") || rc=$?
  else
    (cd "$dir" && "${ctest[@]}" -E '^MpiSimTest[.]') || rc=$?
    (cd "$dir" && ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" "${ctest[@]}" -R '^MpiSimTest[.]') ||
      rc=$?
  fi
  local done_at
  done_at=$(date +%s)
  echo "sanitizers.sh $mode: build $((built - start)) s, tests $((done_at - built)) s, ctest exit $rc"
  return $rc
}

status=0
for mode in "${modes[@]}"; do
  # A subshell each: one mode's exported flags and options do not reach the next.
  (run_mode "$mode") || status=1
done
exit $status
