#!/usr/bin/env bash
# Robust aggregation's kernels against Flower 1.42's own numpy implementations (issue 16):
# aggregate_median, aggregate_trimmed_avg, aggregate_krum and aggregate_bulyan on the same
# updates (SITES x PARAMS float32 in one file, seeded normal values), one table of medians and
# ratios; the largest difference between the two results shows they compute the same thing.
# Ours runs once on every core and once on one (numpy's functions here run on one core).
# Then the memory of one round of each robust strategy through its real spill, MEM_SITES x
# PARAMS: the process's peak resident memory against one model.
#
#   bench/robust_kernels_compare.sh [path/to/robust_kernel_bench]
# Environment: SITES (10), PARAMS (10000000), REPEATS (5 ours, 3 Flower's), MEM_SITES (100; 0:
#   skip the memory part), WORK (a fresh /tmp directory: the data file, results, the spill),
#   FLOWER_VENV (/tmp/fl-flower-venv, made by bench/flower/setup.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
bin="${1:-$(ls -t "$root"/build*/bench/robust_kernel_bench 2>/dev/null | head -n1 || true)}"
if [[ -z "$bin" || ! -x "$bin" ]]; then
  echo "robust_kernel_bench not found; build it (cmake --build <dir> --target" \
       "robust_kernel_bench) or pass its path" >&2
  exit 1
fi
SITES="${SITES:-10}"
PARAMS="${PARAMS:-10000000}"
REPEATS="${REPEATS:-5}"
MEM_SITES="${MEM_SITES:-100}"
WORK="${WORK:-$(mktemp -d /tmp/robust_kernels.XXXXXX)}"
mkdir -p "$WORK/ours" "$WORK/ours1" "$WORK/spill"
py="$("$here/flower/setup.sh" | tail -n1)"
echo "bench: $bin; flower: $("$py" -c 'import flwr; print(flwr.__version__)'); $(nproc) CPUs;" \
     "work in $WORK" >&2

"$bin" --data "$WORK/updates.f32" --sites "$SITES" --params "$PARAMS" --repeats "$REPEATS" \
  --out "$WORK/ours" > "$WORK/ours.txt"
"$bin" --data "$WORK/updates.f32" --sites "$SITES" --params "$PARAMS" --repeats "$REPEATS" \
  --threads 1 --out "$WORK/ours1" > "$WORK/ours1.txt"
"$py" "$here/flower/robust_kernels_flower.py" "$WORK/updates.f32" "$SITES" "$PARAMS" \
  "$WORK/ours" "${FLOWER_REPEATS:-3}" > "$WORK/flower.txt"

value() {  # value <file> <kernel> <key>
  grep "RESULT kernel=$2 " "$1" | sed -E "s/.* $3=([^ ]+).*/\1/"
}
echo
echo "$SITES updates x $PARAMS float32 parameters; medians of $REPEATS (ours), ${FLOWER_REPEATS:-3} (Flower)"
echo
echo "| kernel | Flower 1.42 numpy (s) | ours, $(nproc) threads (s) | speed-up | ours, 1 thread (s) | speed-up | max abs diff | parameters differing > 1e-5 |"
echo "|---|---|---|---|---|---|---|---|"
for k in median trimmed_avg krum bulyan; do
  f=$(value "$WORK/flower.txt" "$k" seconds)
  o=$(value "$WORK/ours.txt" "$k" seconds)
  o1=$(value "$WORK/ours1.txt" "$k" seconds)
  d=$(value "$WORK/flower.txt" "$k" max_abs_diff)
  n=$(value "$WORK/flower.txt" "$k" differing)
  awk -v k="$k" -v f="$f" -v o="$o" -v o1="$o1" -v d="$d" -v n="$n" \
    'BEGIN { printf "| %s | %.3f | %.3f | %.1fx | %.3f | %.1fx | %s | %s |\n", k, f, o, f / o, o1, f / o1, d, n }'
done
rm -f "$WORK/updates.f32"

if [[ "$MEM_SITES" -gt 0 ]]; then
  echo
  echo "One round through the real spill: $MEM_SITES updates x $PARAMS parameters (f = MEM_SITES / 5 - 1)"
  echo
  echo "| strategy | model (MiB) | peak RSS (MiB) | peak / model | heap peak / model | mapped spill peak (MiB) | write (s) | finish (s) |"
  echo "|---|---|---|---|---|---|---|---|"
  for s in fedmedian fedtrimmedavg krum multikrum bulyan; do
    line=$("$bin" --memory "$s" --spill "$WORK/spill" --sites "$MEM_SITES" --params "$PARAMS" |
           grep RESULT)
    get() { echo "$line" | sed -E "s/.* $1=([^ ]+).*/\1/"; }
    echo "| $s | $(get model_mib) | $(get peak_mib) | $(get peak_over_model)x |" \
         "$(get peak_anon_over_model)x | $(get peak_mapped_file_mib) | $(get write_s) | $(get finish_s) |"
  done
fi
