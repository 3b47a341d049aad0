#!/usr/bin/env bash
# The Python SDK's per-round overhead over the C++ SDK (issue 18): one run of `fl server` (mutual
# TLS, SQLite, a checkpoint per round) with four sites online, each with a trivial trainer
# (num_examples 1), and one site sampled per round (--sample-fraction, seeded), so that no two
# sites compete for this machine's cores in a round:
#   cpp      bench/sdk_overhead_site (the C++ SDK; Trainer::Fit returns a Clone of the global)
#   python   bench/python_sdk_site.py --mode views (the global's read-only views handed back:
#            the SDK copies them, the same copy as the C++ Clone)
#   buffer   --mode buffer (the global copied into a buffer of its own with numpy: the SDK
#            borrows it, so the round's one copy is made in Python)
#   flower   --mode flower (a Flower-style NumPyClient through fl.flower.adapt)
# on a model of P float32 parameters (default 10M, as ten tensors) for R rounds (default 41:
# about ten tasks a site). Each site times its fit tasks (download, training, upload until the
# server answered); each site's first task is a warm-up. The table shows medians and the ratio
# to the C++ site's. Then Flower 1.42 on the same workload (one NumPyClient,
# bench/flower/flower_round.py --numpy-client): its median round duration next to our server's
# (fl admin rounds), for scale.
#
#   bench/python_sdk_bench.sh [--params P] [--rounds R] [--no-flower]
# Needs ./scripts/build.sh (build/cli/fl, build/bench/sdk_overhead_site, build/python) and, for
# the Flower row, bench/flower/setup.sh's venv ($FLOWER_VENV, default /tmp/fl-flower-venv).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
build="${FL_BUILD_DIR:-$repo/build}"
params=10000000
rounds=41
flower=1
while [ $# -gt 0 ]; do
  case "$1" in
    --params) params="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --no-flower) flower=0; shift ;;
    *) echo "usage: $0 [--params P] [--rounds R] [--no-flower]" >&2; exit 2 ;;
  esac
done
python="${FL_PYTHON:-$repo/.venv/bin/python}"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
for p in "$build/cli/fl" "$build/bench/sdk_overhead_site"; do
  [ -x "$p" ] || { echo "error: $p is missing: ./scripts/build.sh first" >&2; exit 1; }
done
work="$(mktemp -d "${TMPDIR:-/tmp}/fl-python-sdk-bench.XXXXXX")"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
cd "$work"
sites=(cpp python buffer flower)
cert_args=()
for name in "${sites[@]}"; do cert_args+=(--client "$name"); done
"$build/cli/fl" certs --out pki "${cert_args[@]}" >/dev/null
"$python" - "$params" <<'EOF'
import sys, numpy as np, fl
p = int(sys.argv[1])
sizes = [p // 10] * 9 + [p - 9 * (p // 10)]
rng = np.random.default_rng(0)
fl.save_safetensors("init.safetensors",
                    {f"layer{i}.weight": rng.standard_normal(n, dtype=np.float32)
                     for i, n in enumerate(sizes)})
EOF
enroll=()
for name in "${sites[@]}"; do enroll+=(--enroll "pki/clients/$name.pem"); done
"$build/cli/fl" server --listen 127.0.0.1:0 --data-dir data --ca pki/ca.pem --cert pki/server.pem \
  --key pki/server.key "${enroll[@]}" --initial-model init.safetensors --rounds "$rounds" \
  --min-clients 4 --min-fit-clients 1 --sample-fraction 0.25 --seed 7 --grace 2 \
  >server.log 2>&1 &
server=$!
pids+=("$server")
port=""
for _ in $(seq 1 200); do
  port=$(sed -n 's/.* server_listening .* port=\([0-9]*\) .*/\1/p' server.log | head -n 1)
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { echo "error: the server did not start: $(cat server.log)" >&2; exit 1; }
tls() { echo --server "127.0.0.1:$port" --ca pki/ca.pem --cert "pki/clients/$1.pem" --key "pki/clients/$1.key"; }
# shellcheck disable=SC2046
"$build/bench/sdk_overhead_site" $(tls cpp) --model init.safetensors >cpp.out 2>cpp.log &
pids+=("$!")
for mode in python buffer flower; do
  # shellcheck disable=SC2046
  "$python" "$here/python_sdk_site.py" $(tls "$mode") --model init.safetensors \
    --mode "$([ "$mode" = python ] && echo views || echo "$mode")" >"$mode.out" 2>"$mode.log" &
  pids+=("$!")
done
for p in "${pids[@]:1}"; do wait "$p"; done
wait "$server" || true

"$build/cli/fl" admin --data-dir data rounds >rounds.txt
echo "Python SDK overhead: $params float32 parameters (10 tensors), $rounds rounds of one sampled"
echo "site each, four sites in one run of fl server over mutual TLS, trivial trainers; per-site"
echo "fit task time (download, training, upload until the server answered; each site's first"
echo "task a warm-up), medians:"
"$python" - "$rounds" <<'EOF'
import statistics, sys
rounds = int(sys.argv[1])
def times(name, column):
    rows = [l.split() for l in open(f"{name}.out") if l.startswith("TASK")]
    return [float(r[column]) for r in sorted(rows, key=lambda r: int(r[1]))][1:]
cpp = times("cpp", 2)
print("| site | tasks | fit task, median (s) | min (s) | max (s) | vs C++ SDK | "
      "trainer call, median (ms) |")
print("|---|---|---|---|---|---|---|")
for name, label in (("cpp", "C++ SDK (returns a Clone)"),
                    ("python", "Python SDK (returns the views: copied)"),
                    ("buffer", "Python SDK (copies into its own buffer: borrowed)"),
                    ("flower", "Python SDK, Flower NumPyClient via fl.flower.adapt")):
    t = times(name, 2)
    if not t:
        print(f"| {label} | 0 | - | - | - | - | - |")
        continue
    print(f"| {label} | {len(t)} | {statistics.median(t):.4f} | {min(t):.4f} | {max(t):.4f} | "
          f"{statistics.median(t) / statistics.median(cpp):.3f}x | "
          f"{statistics.median(times(name, 3)) * 1e3:.1f} |")
durations = []
for line in open("rounds.txt"):
    f = line.split()
    if len(f) > 5 and f[0].isdigit() and f[2] == "committed" and int(f[0]) >= 2:
        durations.append(float(f[5]) / 1000)
print(f"\nour server's round duration (fl admin rounds; one site), median of rounds 2..{rounds}: "
      f"{statistics.median(durations):.4f} s")
EOF
if [ "$flower" = 1 ]; then
  venv="${FLOWER_VENV:-/tmp/fl-flower-venv}"
  if [ -x "$venv/bin/python" ]; then
    "$venv/bin/python" "$here/flower/flower_round.py" --clients 1 --params "$params" \
      --rounds "$rounds" --numpy-client --workload python_sdk 2>flower_round.log |
      grep -E "^(Flower|\||RESULT)" || echo "flower_round failed: see $work/flower_round.log"
  else
    echo "Flower row skipped: no venv at $venv (bench/flower/setup.sh makes it)"
  fi
fi
echo "logs: $work"
