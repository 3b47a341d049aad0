#!/usr/bin/env bash
# Long libFuzzer runs of every fuzz target of tests/fuzz/ (one per decoder of outside input), and
# one table of what each run did: executions, executions per second, coverage (libFuzzer's cov:
# edges and ft: features), the corpus it ended with, and the crashes it found.
#
# Builds the targets with Clang in their own tree (BUILD_DIR, default build-fuzz) where every
# library, not only the decoder's own sources, is compiled with -fsanitize=fuzzer-no-link and
# ASan + UBSan: coverage then guides the fuzzer through the whole call tree and the sanitizers
# watch all of it. Only what the targets need is built (tests on, benchmarks, Python and CUDA
# off). Each target then runs for SECONDS in libFuzzer's fork mode (one job at a time), which
# keeps going after a crash: each crashing input is kept in the run's folder, and the table
# counts the distinct crash sites (ASan/UBSan SUMMARY lines, or broken invariants).
#
#   bench/fuzz_long.sh [SECONDS]          (default 300 per target)
# Environment: TARGETS (all: "safetensors checkpoint ..."), BUILD_DIR (build-fuzz), JOBS (ninja's
#   -j, 2), WORK (a fresh /tmp/fl_fuzz_long.XXXXXX: corpora, crash inputs, logs), CXX and CC
#   (clang++, clang), NO_BUILD=1 (use BUILD_DIR as it is). Builds take /tmp/fl-build.lock when it
#   exists (the tree's shared build lock).
# A crash input replays under the GCC tree's sanitized replay:
#   build/tests/fuzz/<target>_fuzz_replay --mutations=0 <crash file>
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
SECONDS_PER_TARGET="${1:-300}"
TARGETS="${TARGETS:-safetensors checkpoint update_codec chunk_assembly server_request client_task secagg toml_config csv idx}"
BUILD_DIR="${BUILD_DIR:-$root/build-fuzz}"
JOBS="${JOBS:-2}"
WORK="${WORK:-$(mktemp -d /tmp/fl_fuzz_long.XXXXXX)}"
CXX="${CXX:-clang++}"
CC="${CC:-clang}"
lock=()
if [[ -e /tmp/fl-build.lock ]]; then lock=(flock /tmp/fl-build.lock); fi

if ! "$CXX" --version >/dev/null 2>&1; then
  echo "fuzz_long: $CXX not found (Debian: apt-get install clang)" >&2
  exit 1
fi
probe="$(mktemp -d)"
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
  > "$probe/probe.cc"
if ! "$CXX" -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" 2>"$probe/log"; then
  echo "fuzz_long: $CXX cannot link -fsanitize=fuzzer (Debian: the clang package's" \
       "libclang-rt-dev / libFuzzer):" >&2
  cat "$probe/log" >&2
  exit 1
fi
rm -rf "$probe"

if [[ "${NO_BUILD:-0}" != 1 ]]; then
  sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
  "${lock[@]}" cmake -S "$root" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_RELEASE="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_C_FLAGS="$sanitize" \
    -DFL_BUILD_TESTS=ON -DFL_BUILD_BENCH=OFF -DFL_BUILD_PYTHON=OFF -DFL_ENABLE_CUDA=OFF \
    -DFL_CPU_NATIVE=OFF >"$WORK/configure.log"
  # Library by library, then each target, each step taking the build lock on its own: other
  # builds of the tree interleave instead of waiting for the whole of this one.
  steps=(fl_proto fl_common fl_wire fl_privacy fl_aggregation fl_server_store fl_server_engine
         fl_server_service fl_server_admin fl_server fl_client fl_simulation fl_cli_client fl_cli_sim)
  for t in $TARGETS; do steps+=("${t}_fuzz"); done
  echo "fuzz_long: building ${#steps[@]} steps in $BUILD_DIR (log: $WORK/build.log)" >&2
  for step in "${steps[@]}"; do
    if ! "${lock[@]}" ninja -C "$BUILD_DIR" -j "$JOBS" "$step" >>"$WORK/build.log" 2>&1; then
      tail -n 30 "$WORK/build.log" >&2
      exit 1
    fi
  done
fi

echo "fuzz_long: $SECONDS_PER_TARGET s per target; work in $WORK" >&2
declare -A dicts=([toml_config]=toml_config.dict [csv]=csv.dict)
rows=()
for t in $TARGETS; do
  bin="$BUILD_DIR/tests/fuzz/${t}_fuzz"
  out="$WORK/$t"
  mkdir -p "$out/corpus" "$out/crashes"
  # -print_funcs=0: symbolizing each newly covered function (the default) costs more than the
  # fuzzing in the targets that link the server.
  args=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 -print_final_stats=1 -print_funcs=0
        -max_total_time="$SECONDS_PER_TARGET" -artifact_prefix="$out/crashes/")
  if [[ -n "${dicts[$t]:-}" ]]; then args+=(-dict="$root/tests/fuzz/${dicts[$t]}"); fi
  echo "fuzz_long: $t" >&2
  start=$(date +%s)
  (cd "$out" && "$bin" "${args[@]}" "$out/corpus" "$root/tests/fuzz/corpus/$t" >"$out/log" 2>&1) || true
  elapsed=$(( $(date +%s) - start ))
  # Fork mode's status lines: "#<executions>: cov: <edges> ft: <features> corp: <units> exec/s
  # <rate> oom/timeout/crash: <o>/<t>/<c> time: <s>s job: ..." (its exec/s stays 0: computed here).
  last="$(grep -E '^#[0-9]+: cov: ' "$out/log" | tail -n1 || true)"
  execs="$(sed -nE 's/^#([0-9]+):.*/\1/p' <<<"$last")"
  cov="$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")"
  ft="$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")"
  corpus="$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")"
  crashed="$(sed -nE 's/.* oom\/timeout\/crash: ([0-9]+\/[0-9]+\/[0-9]+).*/\1/p' <<<"$last")"
  rate=$(( ${execs:-0} / (elapsed > 0 ? elapsed : 1) ))
  # Distinct crashes: each kept input (up to 40) run once more, named by where it failed (the
  # sanitizer's SUMMARY file:line, or the target's broken invariant).
  : >"$out/crash_sites"
  find "$out/crashes" -type f | sort | head -n 40 | while read -r input; do
    "$bin" "$input" 2>&1 | grep -m1 -E '^SUMMARY: |ERROR: fuzz target: invariant broken: ' |
      sed -E 's/^SUMMARY: ([A-Za-z]+): ([a-z-]+) ([^ :]+):([0-9]+)(:[0-9]+)?.*/\3:\4 (\1: \2)/;
              s/^.*ERROR: fuzz target: (invariant broken: .*)/\1/' >>"$out/crash_sites" || true
  done
  # One crash per place (ASan and UBSan may both report one bad read) or per broken invariant.
  sites="$(sed -E 's/ \(.*//' "$out/crash_sites" | sort -u | grep -c . || true)"
  rows+=("| $t | ${execs:-0} | $rate | ${cov:-?} | ${ft:-?} | ${corpus:-?} | ${crashed:-0/0/0} | $sites | $elapsed |")
done

echo
echo "libFuzzer (Clang $("$CXX" --version | head -n1 | sed -E 's/.*version ([0-9.]+).*/\1/'), fork mode," \
     "one job), $SECONDS_PER_TARGET s per target, $(nproc) CPUs; inputs that crashed under $WORK/<target>/crashes"
echo
echo "| target | executions | exec/s | cov (edges) | ft (features) | corpus | oom/timeout/crash runs | distinct crashes | wall s |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
for t in $TARGETS; do
  if [[ -s "$WORK/$t/crash_sites" ]]; then
    echo "$t (crash inputs replayed, by where they failed):"
    sort "$WORK/$t/crash_sites" | uniq -c | sed 's/^/  /'
  fi
done
