#!/usr/bin/env bash
# Up to four banks train a card-fraud model together without sharing a transaction. Run from
# anywhere after ./scripts/build.sh:
#
#   examples/bank/run.sh [--banks N] [--rows R] [--rounds N] [--out DIR]
#
# Each bank gets R synthetic transactions to train on and R/4 later ones to test on
# (make_transactions; 1-2 % fraud). It makes the certificates (`fl certs`), starts `fl server`
# on a free loopback port with mutual TLS and one `fl client` per bank (bank.toml plus the bank's
# files), waits for the run to end, then scores every round's global model on all four banks'
# test transactions: accuracy and, the figure that matters with so few frauds, the AUC.
# --banks 1 trains bank A alone (the same server, one site): what a bank reaches without the
# federation, scored on the same four test sets.
# Exit status: 0 when the run finished, 1 otherwise.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
banks=4
rows=20000
rounds=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --banks) banks="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: $0 [--banks 1..4] [--rows R] [--rounds N] [--out DIR]" >&2; exit 2 ;;
  esac
done
case "$banks" in 1 | 2 | 3 | 4) ;; *) echo "error: --banks must be 1 to 4" >&2; exit 2 ;; esac
source "$repo/examples/common.sh"
fl_example_programs
out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/fl-bank.XXXXXX")}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
echo "Work directory: $out"
cd "$out"
rm -rf pki server-data
mkdir -p data
letters=(a b c d)
tests=()
for i in 0 1 2 3; do
  b="bank-${letters[$i]}"
  "$MAKE_TRANSACTIONS" --bank "$i" --rows "$rows" --seed 1 --out "data/$b.csv"
  "$MAKE_TRANSACTIONS" --bank "$i" --rows $((rows / 4)) --seed 2 --out "data/$b-test.csv"
  tests+=(--test "$b=data/$b-test.csv")
done
"$FL" certs --out pki --client bank-a --client bank-b --client bank-c --client bank-d >certs.log

server_args=(--config "$here/server.toml" --min-clients "$banks" --min-fit-clients "$banks")
[ -n "$rounds" ] && server_args+=(--rounds "$rounds")
start_server server.log "${server_args[@]}"
echo "Server listening on 127.0.0.1:$SERVER_PORT (logs in $out), $banks bank(s) training"
for i in $(seq 0 $((banks - 1))); do
  b="bank-${letters[$i]}"
  start_site "$b" "$b.log" --config "$here/bank.toml" --server "127.0.0.1:$SERVER_PORT" \
    --cert "pki/clients/$b.pem" --key "pki/clients/$b.key" \
    --csv "data/$b.csv" --test-csv "data/$b-test.csv"
done
wait_for_run 900

echo
"$RUN_REPORT" --data-dir server-data --model mlp --hidden 32 --label-column fraud "${tests[@]}"
