#!/usr/bin/env bash
# Two sites run a Flower quickstart-style NumPyClient (client.py) on fl, unchanged, through
# fl.flower.adapt: the server starts from the client's own parameters, and the exported global
# model is scored on the test set. Run after ./scripts/build.sh:
#
#   examples/flower_quickstart/run.sh [--rounds N] [--out DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
rounds=5
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
fl_example_python fl
python="$PYTHON"
out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/fl-flower-quickstart.XXXXXX")}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
echo "Work directory: $out"
cd "$out"
rm -rf pki server-data
"$FL" certs --out pki --client site-a --client site-b >certs.log
"$python" "$here/client.py" init --out init.safetensors
start_server server.log --listen 127.0.0.1:0 --data-dir server-data --ca pki/ca.pem \
  --cert pki/server.pem --key pki/server.key --enroll pki/clients/site-a.pem \
  --enroll pki/clients/site-b.pem --initial-model init.safetensors --rounds "$rounds" \
  --min-clients 2 --min-fit-clients 2 --lr 0.1 --grace 2
first=0
for name in site-a site-b; do
  "$python" "$here/client.py" --server "127.0.0.1:$SERVER_PORT" --ca pki/ca.pem \
    --cert "pki/clients/$name.pem" --key "pki/clients/$name.key" --first "$first" \
    >"$name.log" 2>&1 &
  fl_site_pid[$name]=$!
  fl_site_log[$name]="$name.log"
  fl_example_pids+=("$!")
  first=$((first + 2000))
done
wait_for_run 300
"$FL" admin --data-dir server-data rounds
"$FL" admin --data-dir server-data export --out global.safetensors
"$python" "$here/client.py" score --model global.safetensors
