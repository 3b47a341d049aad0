#!/usr/bin/env bash
# Three hospitals train a breast-cancer classifier together; no patient record leaves its
# hospital. Run from anywhere after ./scripts/build.sh:
#
#   examples/hospital/run.sh [--rounds N] [--out DIR]
#
# It prepares each hospital's data (prepare_data.sh), makes the federation's certificates
# (`fl certs`), starts `fl server` on a free loopback port with mutual TLS and three
# `fl client --config site-X.toml` processes, waits for the run to end and prints one row per
# round with the federated evaluation on the hospitals' held-out patients.
# Exit status: 0 when the run finished, 77 when the dataset cannot be obtained, 1 otherwise.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
rounds=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--out DIR]" >&2; exit 2 ;;
  esac
done
source "$repo/examples/common.sh"
fl_example_programs
out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/fl-hospital.XXXXXX")}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
echo "Work directory: $out"

if ! bash "$here/prepare_data.sh" "$out/data" >"$out/prepare_data.log" 2>&1; then
  echo "SKIP: the breast-cancer dataset (Debian package python3-sklearn) cannot be obtained:" >&2
  tail -n 3 "$out/prepare_data.log" >&2
  exit 77
fi
cd "$out"
rm -rf pki server-data
"$FL" certs --out pki --client hospital-a --client hospital-b --client hospital-c >certs.log

server_args=(--config "$here/server.toml")
[ -n "$rounds" ] && server_args+=(--rounds "$rounds")
start_server server.log "${server_args[@]}"
echo "Server listening on 127.0.0.1:$SERVER_PORT (logs in $out)"
for site in a b c; do
  start_site "hospital-$site" "hospital-$site.log" \
    --config "$here/site-$site.toml" --server "127.0.0.1:$SERVER_PORT"
done
wait_for_run 600

echo
"$RUN_REPORT" --data-dir server-data
