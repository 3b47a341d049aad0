#!/usr/bin/env bash
# Side by side with Flower (issue 6, benchmark 4): the same workloads on this machine, in one run,
# our framework and Flower 1.42 alternating, each with a trivial trainer so that only the
# framework is measured.
#   (a) 10 clients, 100k float32 parameters: round latency (median round period after a warm-up
#       round). Goal: ours at least 20x lower.
#   (b) 4 clients, 100M float32 parameters (400 MB): round time (the round after a warm-up round)
#       and the server process's peak RSS. Goal: at least 2x faster, at most 1/3 of the memory.
#   Beside (a), round_floor_bench (next to the binary) measures the floor: the same bytes over
#   bare gRPC with mutual TLS, no framework, to show what the 20x goal asks against it.
# Ours: bench/flower_compare_bench (real server, mutual TLS, SQLite and a checkpoint per round).
# Flower: bench/flower/flower_round.py (legacy start_server/start_client, server-side TLS only:
# Flower has no mutual TLS). Clients are separate processes on both sides; the server's peak RSS
# is its own process's VmHWM. Each side runs REPS times per workload; the table shows medians
# and the ratios of those medians.
#
#   bench/flower_compare.sh [path/to/flower_compare_bench]
# Environment: REPS (3), ROUNDS_A (21), ROUNDS_B (2), FLOWER_VENV (/tmp/fl-flower-venv),
#   LOG_DIR (a fresh /tmp directory: every run's full output), ONLY (a or b: one workload).
# The binary defaults to build*/bench/flower_compare_bench (newest); this script builds nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
bin="${1:-}"
if [[ -z "$bin" ]]; then
  bin="$(ls -t "$root"/build*/bench/flower_compare_bench 2>/dev/null | head -n1 || true)"
fi
if [[ -z "$bin" || ! -x "$bin" ]]; then
  echo "flower_compare_bench not found; build it (cmake --build <dir> --target" \
       "flower_compare_bench) or pass its path" >&2
  exit 1
fi
# The floor of workload (a): the same bytes over bare gRPC with mutual TLS, no framework at all
# (round_floor_bench, built next to the benchmark); skipped when it is not there.
floor_bin="$(dirname "$bin")/round_floor_bench"
REPS="${REPS:-3}"
ROUNDS_A="${ROUNDS_A:-21}"
ROUNDS_B="${ROUNDS_B:-2}"
ONLY="${ONLY:-}"
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/flower_compare.XXXXXX)}"
mkdir -p "$LOG_DIR"

t_setup=$(date +%s)
py="$("$here/flower/setup.sh" | tail -n1)"
t_setup=$(( $(date +%s) - t_setup ))

# Workload (b) holds 5 copies of a 400 MB model per process on Flower's side at worst; stop
# before the kernel's OOM killer picks a victim on a smaller machine.
avail_mib=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
echo "bench: $bin; flower: $("$py" -c 'import flwr; print(flwr.__version__)') ($py);" \
     "setup ${t_setup}s; $(nproc) CPUs, ${avail_mib} MiB available; logs in $LOG_DIR" >&2

results="$LOG_DIR/results.txt"
: > "$results"
run() {  # run <label> <log> <command...>: keeps the RESULT line, shows progress
  local label="$1" log="$2"
  shift 2
  local t0=$(date +%s)
  if ! "$@" > "$log" 2>&1; then
    echo "FAILED: $label (see $log)" >&2
    tail -n 5 "$log" >&2
  fi
  grep '^RESULT ' "$log" >> "$results" || true
  echo "  $label: $(( $(date +%s) - t0 )) s: $(grep '^RESULT ' "$log" | cut -d' ' -f7-10)" >&2
}

for rep in $(seq 1 "$REPS"); do
  if [[ "$ONLY" != b ]]; then
    run "rep $rep (a) ours" "$LOG_DIR/a-ours-$rep.log" \
      "$bin" --workload a --clients 10 --params 100000 --rounds "$ROUNDS_A"
    run "rep $rep (a) flower" "$LOG_DIR/a-flower-$rep.log" \
      "$py" "$here/flower/flower_round.py" --workload a --clients 10 --params 100000 \
      --rounds "$ROUNDS_A"
    if [[ -x "$floor_bin" ]]; then
      run "rep $rep (a) floor" "$LOG_DIR/a-floor-$rep.log" \
        "$floor_bin" --workload a --clients 10 --params 100000 --rounds "$ROUNDS_A"
    fi
  fi
  if [[ "$ONLY" != a ]]; then
    if (( avail_mib < 12000 )); then
      echo "  (b) skipped: ${avail_mib} MiB available, 12000 needed" >&2
    else
      run "rep $rep (b) ours" "$LOG_DIR/b-ours-$rep.log" \
        "$bin" --workload b --clients 4 --params 100000000 --rounds "$ROUNDS_B"
      run "rep $rep (b) flower" "$LOG_DIR/b-flower-$rep.log" \
        "$py" "$here/flower/flower_round.py" --workload b --clients 4 --params 100000000 \
        --rounds "$ROUNDS_B"
    fi
  fi
done

"$py" - "$results" "$REPS" "$ROUNDS_A" "$ROUNDS_B" <<'EOF'
import statistics, sys

rows = []
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    rows.append(kv)
reps, rounds_a, rounds_b = sys.argv[2:5]

def med(side, workload, key):
    v = [float(r[key]) for r in rows
         if r["side"] == side and r["workload"] == workload and r["failures"] == "0"]
    return (statistics.median(v), len(v)) if v else (None, 0)

print(f"Side by side with Flower 1.42.0, same machine, trivial trainer both sides; medians of "
      f"{reps} alternating runs per side (n = successful runs). Ours: mutual TLS, SQLite + "
      f"checkpoint every round, default polling. Flower: legacy start_server/start_client over "
      f"gRPC with server-side TLS (Flower has no mutual TLS). Clients in separate processes. "
      f"Round time = period between successive round ends after a warm-up round ((a) "
      f"{int(rounds_a) - 1} rounds per run, (b) {int(rounds_b) - 1}).")
print()
print("| workload | metric | ours | Flower | ratio | goal | met? |")
print("|---|---|---|---|---|---|---|")
specs = [
    ("a", "(a) 10 clients, 100k params", "round latency", "period_median_s", "ms", 1e3,
     "Flower/ours >= 20", lambda o, f: f / o, 20.0, "x"),
    ("b", "(b) 4 clients, 100M params", "round time", "period_median_s", "s", 1.0,
     "Flower/ours >= 2", lambda o, f: f / o, 2.0, "x"),
    ("b", "(b) 4 clients, 100M params", "server peak RSS", "peak_rss_mib", "MiB", 1.0,
     "ours/Flower <= 0.33", lambda o, f: o / f, 1 / 3, ""),
]
for wl, name, metric, key, unit, scale, goal, ratio_of, bound, suffix in specs:
    o, no = med("ours", wl, key)
    f, nf = med("flower", wl, key)
    if o is None or f is None:
        show = lambda x: "-" if x is None else f"{x * scale:.4g} {unit}"
        print(f"| {name} | {metric} | {show(o)} | {show(f)} | - | {goal} | not measured |")
        continue
    r = ratio_of(o, f)
    met = r >= bound if goal.startswith("Flower") else r <= bound
    fmt = (lambda x: f"{x:.3g} {unit}") if unit != "MiB" else (lambda x: f"{x:.0f} MiB")
    print(f"| {name} | {metric} | {fmt(o * scale)} (n={no}) | {fmt(f * scale)} (n={nf}) | "
          f"{r:.2f}{suffix} | {goal} | {'yes' if met else 'NO'} |")

# Workload (a)'s goal against what no framework can beat here: the floor of moving the same bytes
# over gRPC with mutual TLS on this machine.
fl_, nfl = med("floor", "a", "period_median_s")
o, _ = med("ours", "a", "period_median_s")
f, _ = med("flower", "a", "period_median_s")
if fl_ is not None and f is not None:
    print()
    goal_s = f / 20
    where = (f"{fl_ / goal_s:.1f}x below that floor" if fl_ > goal_s
             else "above that floor")
    print(f"(a) floor: bare gRPC round of the same bytes with mutual TLS, no framework (n={nfl}): "
          f"{fl_ * 1e3:.3g} ms; the 20x goal asks for {goal_s * 1e3:.3g} ms, {where}"
          + (f"; ours is {o / fl_:.2f}x the floor" if o is not None else "") + ".")

# The machine is shared and noisy: the ratio within each repetition (the two sides ran back to
# back) says more than the ratio of medians when the load changed between repetitions.
print()
for wl, name, metric, key, unit, scale, goal, ratio_of, bound, suffix in specs:
    ours = [r for r in rows if r["side"] == "ours" and r["workload"] == wl]
    flower = [r for r in rows if r["side"] == "flower" and r["workload"] == wl]
    pairs = []
    for i, o in enumerate(ours):
        f = flower[i] if i < len(flower) else None
        if f is None or o["failures"] != "0" or f["failures"] != "0":
            pairs.append("-")
        else:
            pairs.append(f"{ratio_of(float(o[key]), float(f[key])):.2f}")
    print(f"per-repetition ratio, {name}, {metric}: {', '.join(pairs)}")
EOF
