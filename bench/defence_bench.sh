#!/usr/bin/env bash
# What robust aggregation buys against attacking sites (issue 16): `fl sim` on Fashion-MNIST
# (Debian's dataset-fashion-mnist), the MLP (one hidden layer of 200), 20 sites with a Dirichlet
# 0.5 label skew, every site in every round; for each attack, the final test accuracy of FedAvg
# and of each robust strategy with f = 0, 10 %, 20 %, 30 % of the sites attacking. The robust
# strategies are told the true f (num_malicious = the attackers' count; the trimmed mean cuts
# max(0.1, f / 20) at each end); a setting a strategy refuses (Bulyan needs 4f + 3 sites, Krum
# 2f + 3) shows as "refused". Every run has the same seed, so the same sites attack and train on
# the same rows whatever the strategy.
#
#   bench/defence_bench.sh [path/to/fl]
# Environment: ATTACKS ("sign_flip scale gaussian label_flip alie"), FRACTIONS ("0 0.1 0.2 0.3"),
#   STRATEGIES ("fedavg fedmedian fedtrimmedavg krum multikrum bulyan"; "NAME+norm_bound=M" wraps
#   NAME in a norm bound of M, e.g. "fedavg+norm_bound=2"), ROUNDS (20), SITES (20),
#   EXTRA (more `fl sim` flags, e.g. "--examples-per-client 1000" for a shorter run), WORK (a
#   fresh /tmp directory: every run's output).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
fl="${1:-$(ls -t "$root"/build*/cli/fl 2>/dev/null | head -n1 || true)}"
if [[ -z "$fl" || ! -x "$fl" ]]; then
  echo "fl not found; build it (cmake --build <dir> --target fl) or pass its path" >&2
  exit 1
fi
ATTACKS="${ATTACKS:-sign_flip scale gaussian label_flip alie}"
FRACTIONS="${FRACTIONS:-0 0.1 0.2 0.3}"
STRATEGIES="${STRATEGIES:-fedavg fedmedian fedtrimmedavg krum multikrum bulyan}"
ROUNDS="${ROUNDS:-20}"
SITES="${SITES:-20}"
EXTRA="${EXTRA:-}"
WORK="${WORK:-$(mktemp -d /tmp/defence_bench.XXXXXX)}"
mkdir -p "$WORK"
echo "fl: $fl; $SITES sites, $ROUNDS rounds, $(nproc) CPUs; runs in $WORK" >&2

# accuracy <attack> <fraction> <strategy>: the final test accuracy (%), or "refused".
accuracy() {
  local attack="$1" fraction="$2" strategy="$3"
  local f trim
  f=$(awk -v x="$fraction" -v n="$SITES" 'BEGIN { printf "%d", x * n + 0.5 }')
  trim=$(awk -v x="$fraction" 'BEGIN { printf "%.2f", (x > 0.1 ? x : 0.1) }')
  local dir="$WORK/$attack-$fraction-$strategy"
  local log="$dir.log"
  local name="${strategy%%+*}" bound=0
  if [[ "$strategy" == *+norm_bound=* ]]; then bound="${strategy##*+norm_bound=}"; fi
  if "$fl" sim --work-dir "$dir" --clients "$SITES" --rounds "$ROUNDS" --model mlp \
      --partition dirichlet --beta 0.5 --seed 1 --strategy "$name" --norm-bound "$bound" \
      --num-malicious "$f" --trim-beta "$trim" --attack "$attack" --attack-fraction "$fraction" \
      $EXTRA > "$log" 2>&1; then
    sed -nE 's/.*final test accuracy ([0-9.]+) %.*/\1/p' "$log" | tail -n1
  elif grep -q "needs at least" "$log"; then
    echo "refused"
  else
    echo "failed (see $log)"
  fi
}

declare -A clean
for attack in $ATTACKS; do
  echo
  echo "Attack: $attack. Final test accuracy (%) after $ROUNDS rounds, by share of attacking sites"
  echo
  header="| strategy |"
  rule="|---|"
  for fraction in $FRACTIONS; do
    header="$header f = $(awk -v x="$fraction" 'BEGIN { printf "%d %%", x * 100 + 0.5 }') |"
    rule="$rule---|"
  done
  echo "$header"
  echo "$rule"
  for strategy in $STRATEGIES; do
    row="| $strategy |"
    for fraction in $FRACTIONS; do
      # f = 0 is the same run for every attack: made once per strategy.
      if [[ "$fraction" == "0" ]]; then
        [[ -n "${clean[$strategy]:-}" ]] || clean[$strategy]="$(accuracy none 0 "$strategy")"
        row="$row ${clean[$strategy]} |"
      else
        row="$row $(accuracy "$attack" "$fraction" "$strategy") |"
      fi
    done
    echo "$row"
  done
done
