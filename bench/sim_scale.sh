#!/usr/bin/env bash
# Benchmark 2 of issue 14: does a round cost the same whatever the number of registered sites?
# Workload: `fl sim` in process, softmax regression on Fashion-MNIST, every site holding 60 rows
# drawn from the training set (`--partition sampled`, so that the work of a round is the same at
# every scale), 100 sites sampled per round, 5 rounds, 1 local epoch, batch 10. For 1,000, 10,000
# and 100,000 registered sites it reports the setup time (data, partition, joining every site),
# the median wall time of rounds 2..5, and the process's peak RSS (/usr/bin/time), and, from the
# 10,000 and 100,000 runs, the peak RSS per registered site beyond the first 10,000: what an idle
# virtual site costs (its id, name and row indices, the engine's and the store's record of it).
#
#   bench/sim_scale.sh [path/to/fl]      (default: the newest build*/cli/fl)
# Environment: SITES ("1000 10000 100000"), ROUNDS (5), LOG_DIR (a fresh /tmp directory).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
bin="${1:-$(ls -t "$root"/build*/cli/fl 2>/dev/null | head -n1 || true)}"
if [[ -z "$bin" || ! -x "$bin" ]]; then
  echo "fl not found: build it (scripts/build.sh) or pass its path" >&2
  exit 1
fi
SITES="${SITES:-1000 10000 100000}"
ROUNDS="${ROUNDS:-5}"
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/fl-sim-scale.XXXXXX)}"
mkdir -p "$LOG_DIR"

declare -A rss
printf '%10s %10s %12s %14s %12s\n' "sites" "sampled" "setup (s)" "round (s, med)" "peak RSS"
for n in $SITES; do
  log="$LOG_DIR/sites-$n.log"
  fraction=$(python3 -c "print(100 / $n)")
  /usr/bin/time -f 'PEAK_RSS_KB %M' "$bin" sim --work-dir "$LOG_DIR/work-$n" --no-report \
    --no-progress --clients "$n" --sample-fraction "$fraction" --rounds "$ROUNDS" \
    --partition sampled --examples-per-client 60 --batch-size 10 --lr 0.1 >"$log" 2>&1
  python3 - "$log" "$n" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
setup = [float(m) for m in re.findall(r"\[\s*([0-9.]+) s\] all \d+ sites joined", text)]
rounds = [float(m) for m in re.findall(r"^\s+\d+\s+\d+/\d+\s+\S+\s+\S+\s+([0-9.]+)s", text, re.M)]
rss = int(re.search(r"PEAK_RSS_KB (\d+)", text).group(1))
sampled = re.search(r"^\s+1\s+\d+/(\d+)", text, re.M).group(1)
med = statistics.median(rounds[1:]) if len(rounds) > 1 else float("nan")
print(f"{sys.argv[2]:>10} {sampled:>10} {setup[0] if setup else float('nan'):12.2f} "
      f"{med:14.3f} {rss / 1024:9.0f} MiB")
PY
  rss[$n]=$(grep -o 'PEAK_RSS_KB [0-9]*' "$log" | awk '{print $2}')
done
if [[ -n "${rss[10000]:-}" && -n "${rss[100000]:-}" ]]; then
  per_site=$(( (rss[100000] - rss[10000]) * 1024 / 90000 ))
  echo "peak RSS per registered site, 10,000 -> 100,000: ${per_site} bytes"
fi
echo "logs: $LOG_DIR"
