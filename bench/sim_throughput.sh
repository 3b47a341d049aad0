#!/usr/bin/env bash
# Throughput against Flower's simulation (issue 14, benchmark 1): one federated workload run to the
# end, start-up included, by four sides on this machine, alternating, REPS times each.
# Workload: Fashion-MNIST (IDX files, pixels / 255), softmax regression (784 -> 10 with bias, zero
# start), 1,000 sites with 60 examples each (IID split of the 60,000 training examples), 10
# sampled per round (fraction 0.01), 100 rounds, 1 local epoch, batch 10, plain SGD lr 0.1 on the
# batch's mean loss, FedAvg weighted by examples, the global model evaluated on the 10,000 test
# examples after every round.
#   ours     fl sim (in process: virtual sites on a worker pool, a simulated clock)
#   grpc     fl sim --transport grpc (the real server on loopback, each working site connecting
#            over mutual TLS with its own certificate), under GRPC_TIMEOUT
#   flower   Flower 1.42's Simulation Runtime: bench/flower/sim_throughput_flower.py, a Message
#            API ServerApp (stock FedAvg, central evaluate_fn) and ClientApp by run_simulation on
#            Ray, 1,000 supernodes, WORKERS actors of one CPU each
#   numpy    the floor: the same SGD, averaging and evaluation in one plain numpy loop
#            (bench/flower/sim_throughput_numpy.py); both Python sides share
#            bench/flower/sim_softmax.py
# bench/flower/sim_throughput_measure.py runs each side and measures from outside: total wall
# time (start to exit), time to the end of round 1 (start to round 1's line), the median time per
# round after it (gaps between successive round lines: training, aggregation and evaluation),
# peak memory of all the side's processes (the sum over the process tree and session, sampled
# every 100 ms: RSS as asked, and PSS, which counts shared pages such as Ray's object store once)
# and the final test accuracy. The table shows medians over the repetitions and the ratios of
# those medians. The Python sides run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (this
# machine may set them for old OpenBLAS builds; they slow a current numpy); the BLAS kernel each
# process runs is in the logs (threadpoolctl). Before each run the script waits until no compiler
# runs (the machine is shared), and repeats a run during which one started (RETRIES times).
#
#   bench/sim_throughput.sh [path/to/fl]
# Environment: REPS (3), ROUNDS (100), CLIENTS (1000), EXAMPLES (60), FRACTION (0.01),
#   WORKERS (2: Flower's Ray CPUs), SIDES ("ours grpc flower numpy"; also "plain": grpc in
#   plaintext, every site over one shared connection), TIMEOUT (900 s a run),
#   GRPC_TIMEOUT (600 s), RETRIES (2), SEED (0), DATASET_DIR (/usr/share/datasets/fashion-mnist),
#   ACCURACY_SEEDS (5: after the timed runs, ours in process and the numpy loop run untimed with
#   seeds 0 to ACCURACY_SEEDS-1, since one seed's final accuracy varies by about a point; 0: none),
#   FLOWER_VENV (/tmp/fl-flower-venv, made by bench/flower/setup.sh), LOG_DIR (a fresh /tmp
#   directory: every run's full output, timestamped).
# The binary defaults to the newest build*/cli/fl and is copied into LOG_DIR first, so that a
# rebuild during the benchmark does not change it; this script builds nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
bin="${1:-}"
if [[ -z "$bin" ]]; then
  bin="$(ls -t "$root"/build*/cli/fl 2>/dev/null | head -n1 || true)"
fi
if [[ -z "$bin" || ! -x "$bin" ]]; then
  echo "fl not found; build it (cmake --build <dir> --target fl) or pass its path" >&2
  exit 1
fi
REPS="${REPS:-3}"
ROUNDS="${ROUNDS:-100}"
CLIENTS="${CLIENTS:-1000}"
EXAMPLES="${EXAMPLES:-60}"
FRACTION="${FRACTION:-0.01}"
WORKERS="${WORKERS:-2}"
SIDES="${SIDES:-ours grpc flower numpy}"
TIMEOUT="${TIMEOUT:-900}"
GRPC_TIMEOUT="${GRPC_TIMEOUT:-600}"
RETRIES="${RETRIES:-2}"
ACCURACY_SEEDS="${ACCURACY_SEEDS:-5}"
SEED="${SEED:-0}"
DATASET_DIR="${DATASET_DIR:-/usr/share/datasets/fashion-mnist}"
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/sim_throughput.XXXXXX)}"
mkdir -p "$LOG_DIR"

fl="$LOG_DIR/fl"
cp "$bin" "$fl"

t_setup=$(date +%s%N)
py="$("$here/flower/setup.sh" | tail -n1)"
t_setup=$(( ($(date +%s%N) - t_setup) / 1000000 ))
t_setup="$(( t_setup / 1000 )).$(( t_setup % 1000 / 100 ))"
nopenblas=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
versions="$("${nopenblas[@]}" "$py" -c 'import flwr, ray, numpy
print(f"flwr {flwr.__version__}, ray {ray.__version__}, numpy {numpy.__version__}")')"
blas="$("${nopenblas[@]}" "$py" -c "import sys; sys.path.insert(0, '$here/flower')
import sim_softmax; print(sim_softmax.blas_info())")"
{
  echo "bench: $bin (copied to $fl); $versions ($py); venv setup ${t_setup} s"
  echo "machine: $(nproc) CPUs, $(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)" \
       "MiB available; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}" \
       "OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset} here, both unset for the Python sides;" \
       "numpy's BLAS there: $blas"
  echo "logs in $LOG_DIR"
} | tee "$LOG_DIR/header.txt" >&2

wait_idle() {  # the machine is shared: no timing while someone compiles
  local said=0
  while pgrep -x ninja >/dev/null || pgrep -f cc1plus >/dev/null; do
    if (( ! said )); then echo "  (waiting for a compiler to finish)" >&2; said=1; fi
    sleep 10
  done
}

results="$LOG_DIR/results.txt"
: > "$results"
measure() {  # measure <side> <rep> <format> <timeout> <command...>
  local side="$1" rep="$2" format="$3" limit="$4"
  shift 4
  local attempt line log
  for attempt in $(seq 0 "$RETRIES"); do
    wait_idle
    log="$LOG_DIR/$side-$rep.log"
    line="$("$py" "$here/flower/sim_throughput_measure.py" --side "$side" --rep "$rep" \
            --format "$format" --timeout "$limit" --log "$log" -- "$@" | tail -n1)" || true
    rm -rf "$LOG_DIR/work"
    if [[ "$line" != RESULT* ]]; then
      line="RESULT side=$side rep=$rep status=failed"
    fi
    if [[ "$line" == *compiler_seen=1* && "$attempt" -lt "$RETRIES" ]]; then
      echo "  $side rep $rep: a compiler ran during it; again" >&2
      continue
    fi
    break
  done
  echo "$line" >> "$results"
  echo "  $side rep $rep: $(cut -d' ' -f4,6-8,11,13 <<< "$line") (log $log)" >&2
  [[ "$line" == *status=ok* ]] || tail -n 5 "$log" >&2
}

common=(--clients "$CLIENTS" --examples-per-client "$EXAMPLES" --sample-fraction "$FRACTION"
        --rounds "$ROUNDS" --local-epochs 1 --batch-size 10 --lr 0.1)
for rep in $(seq 1 "$REPS"); do
  for side in $SIDES; do
    case "$side" in
      ours) measure ours "$rep" fl "$TIMEOUT" \
              "$fl" sim "${common[@]}" --seed "$SEED" --dataset-dir "$DATASET_DIR" \
              --work-dir "$LOG_DIR/work" ;;
      grpc) measure grpc "$rep" fl "$GRPC_TIMEOUT" \
              "$fl" sim --transport grpc "${common[@]}" --seed "$SEED" \
              --dataset-dir "$DATASET_DIR" --work-dir "$LOG_DIR/work" ;;
      plain) measure plain "$rep" fl "$GRPC_TIMEOUT" \
               "$fl" sim --transport grpc --insecure-plaintext "${common[@]}" --seed "$SEED" \
               --dataset-dir "$DATASET_DIR" --work-dir "$LOG_DIR/work" ;;
      flower) measure flower "$rep" py "$TIMEOUT" "${nopenblas[@]}" \
                "$py" "$here/flower/sim_throughput_flower.py" "${common[@]}" --seed "$SEED" \
                --dataset-dir "$DATASET_DIR" --workers "$WORKERS" ;;
      numpy) measure numpy "$rep" py "$TIMEOUT" "${nopenblas[@]}" \
               "$py" "$here/flower/sim_throughput_numpy.py" "${common[@]}" --seed "$SEED" \
               --dataset-dir "$DATASET_DIR" ;;
      *) echo "unknown side '$side' (ours, grpc, plain, flower, numpy)" >&2; exit 1 ;;
    esac
  done
done

# What Flower and Ray warned about, once each (the logs have every line).
if ls "$LOG_DIR"/flower-*.log >/dev/null 2>&1; then
  echo "Flower/Ray warnings (count, message):" >&2
  sed -E 's/^ *[0-9.]+ //; s/\x1b\[[0-9;]*m//g' "$LOG_DIR"/flower-*.log \
    | grep -E 'WARNING|Warning|warn' | grep -v '^ *warnings.warn($' \
    | sed -E 's/pid=[0-9]+/pid=N/; s/[0-9]+x across/Nx across/' \
    | sort | uniq -c | sort -rn | head -n 8 >&2 || true
fi

# One seed's final accuracy is one draw (the sites, their data and the sample differ by seed);
# the mean over a few seeds says whether both sides train the same way.
accuracy="$LOG_DIR/accuracy.txt"
: > "$accuracy"
for s in $(seq 0 $(( ACCURACY_SEEDS - 1 ))); do
  a="$("$fl" sim "${common[@]}" --seed "$s" --dataset-dir "$DATASET_DIR" \
        --work-dir "$LOG_DIR/work" | sed -nE 's/.*final test accuracy ([0-9.]+) %.*/\1/p')"
  rm -rf "$LOG_DIR/work"
  echo "ours $s ${a:--}" >> "$accuracy"
  a="$("${nopenblas[@]}" "$py" "$here/flower/sim_throughput_numpy.py" "${common[@]}" \
        --seed "$s" --dataset-dir "$DATASET_DIR" | sed -nE 's/^FINAL ([0-9.]+)/\1/p')"
  echo "numpy $s $(awk -v a="${a:-}" 'BEGIN { if (a == "") print "-"; else print a * 100 }')" \
    >> "$accuracy"
done

"$py" - "$results" "$REPS" "$CLIENTS" "$ROUNDS" "$WORKERS" "$accuracy" <<'EOF'
import statistics, sys

rows = [dict(f.split("=", 1) for f in line.split()[1:]) for line in open(sys.argv[1])]
reps, clients, rounds, workers = sys.argv[2:6]
names = {"ours": "fl sim (inproc)", "grpc": "fl sim --transport grpc",
         "plain": "fl sim --transport grpc --insecure-plaintext",
         "flower": "Flower 1.42 (Ray)", "numpy": "numpy loop (floor)"}
sides = [s for s in names if any(r["side"] == s for r in rows)]


def med(side, key):
    v = [float(r[key]) for r in rows
         if r["side"] == side and r.get("status") == "ok" and r.get(key, "-") != "-"]
    return statistics.median(v) if v else None


def n_ok(side):
    return sum(1 for r in rows if r["side"] == side and r.get("status") == "ok")


def show(v, unit, spec):
    return "-" if v is None else f"{v:{spec}} {unit}"


print(f"Issue 14, benchmark 1: {clients} sites x 60 examples, 10 per round, {rounds} rounds, "
      f"softmax on Fashion-MNIST, evaluation every round; medians of {reps} alternating runs "
      f"per side (n = successful runs). Flower: run_simulation, {workers} Ray actors of 1 CPU. "
      f"Memory: peak of the sum over all the side's processes, sampled every 100 ms.")
print()
print("| side | n | total wall | to end of round 1 | per round after | peak RSS (sum) | "
      "peak PSS (sum) | processes | final accuracy |")
print("|---|---|---|---|---|---|---|---|---|")
for s in sides:
    acc = med(s, "accuracy")
    procs = med(s, "peak_procs")
    per_round = med(s, "round_median_s")
    print(f"| {names[s]} | {n_ok(s)} | {show(med(s, 'wall_s'), 's', '.2f')} | "
          f"{show(med(s, 'round1_s'), 's', '.2f')} | "
          f"{show(None if per_round is None else per_round * 1e3, 'ms', '.1f')} | "
          f"{show(med(s, 'peak_rss_mib'), 'MiB', '.0f')} | "
          f"{show(med(s, 'peak_pss_mib'), 'MiB', '.0f')} | "
          f"{'-' if procs is None else f'{procs:.0f}'} | "
          f"{'-' if acc is None else f'{acc * 100:.2f} %'} |")

print()
print("| ratio | total wall | to end of round 1 | per round after | peak PSS |")
print("|---|---|---|---|---|")
for a, b, label in [("flower", "ours", "Flower / ours (inproc)"),
                    ("flower", "grpc", "Flower / ours (grpc)"),
                    ("flower", "plain", "Flower / ours (grpc, plaintext)"),
                    ("ours", "numpy", "ours (inproc) / floor"),
                    ("grpc", "numpy", "ours (grpc) / floor"),
                    ("flower", "numpy", "Flower / floor")]:
    if a not in sides or b not in sides:
        continue
    cells = []
    for key in ("wall_s", "round1_s", "round_median_s", "peak_pss_mib"):
        x, y = med(a, key), med(b, key)
        cells.append("-" if x is None or not y else f"{x / y:.2f}x")
    print(f"| {label} | " + " | ".join(cells) + " |")

print()
goals = []
if "ours" in sides and "numpy" in sides and med("ours", "wall_s") and med("numpy", "wall_s"):
    o, f = med("ours", "wall_s"), med("numpy", "wall_s")
    goals.append(f"inproc total no slower than the floor: {o:.2f} s vs {f:.2f} s: "
                 f"{'met' if o <= f else 'NOT met'}")
if "grpc" in sides and "flower" in sides and med("grpc", "wall_s") and med("flower", "wall_s"):
    r = med("flower", "wall_s") / med("grpc", "wall_s")
    goals.append(f"grpc at least 10x ahead of Flower in total: {r:.2f}x: "
                 f"{'met' if r >= 10 else 'NOT met'}")
ref = med("ours", "accuracy")
if ref is not None:
    for s in sides:
        a = med(s, "accuracy")
        if s != "ours" and a is not None:
            d = (a - ref) * 100
            goals.append(f"accuracy {names[s]} - ours: {d:+.2f} points "
                         f"({'within' if abs(d) <= 0.5 else 'NOT within'} 0.5)")
for g in goals:
    print(f"goal: {g}")

# The machine is shared: the ratio within each repetition says more than the ratio of medians
# when the load changed between repetitions.
for a, b in [("flower", "ours"), ("flower", "grpc"), ("ours", "numpy")]:
    if a in sides and b in sides:
        pairs = []
        for rep in sorted({r["rep"] for r in rows}, key=int):
            x = [r for r in rows if r["side"] == a and r["rep"] == rep and r.get("status") == "ok"]
            y = [r for r in rows if r["side"] == b and r["rep"] == rep and r.get("status") == "ok"]
            pairs.append(f"{float(x[0]['wall_s']) / float(y[0]['wall_s']):.2f}" if x and y
                         else "-")
        print(f"per-repetition total wall ratio {a}/{b}: {', '.join(pairs)}")
failed = [f"{r['side']} rep {r['rep']}: {r.get('status')}" for r in rows if r.get("status") != "ok"]
if failed:
    print("not ok: " + "; ".join(failed))
disturbed = [f"{r['side']} rep {r['rep']}" for r in rows if r.get("compiler_seen") == "1"]
if disturbed:
    print("a compiler ran during: " + ", ".join(disturbed))
by_side = {}
for line in open(sys.argv[6]):
    side, seed, acc = line.split()
    if acc != "-":
        by_side.setdefault(side, []).append(float(acc))
if by_side:
    print("final accuracy over seeds, untimed: " + "; ".join(
        f"{names[s]} mean {statistics.mean(v):.2f} %, sd {statistics.pstdev(v):.2f}, "
        f"{min(v):.2f}-{max(v):.2f} ({len(v)} seeds)" for s, v in by_side.items()))
EOF
