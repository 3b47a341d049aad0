#!/usr/bin/env bash
# Two hospital sites federate a PyTorch model of their own (site.py) that `fl server` has never
# seen, starting from its safetensors export. Run from anywhere after ./scripts/build.sh (which
# builds the Python SDK into build/python with the install step's .venv):
#
#   examples/pytorch_site/run.sh [--rounds N] [--count ROWS] [--out DIR]
#
# Exit status: 0 when the run finished and the global model scored on the test set.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
rounds=5
count=3000
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --count) count="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--count ROWS] [--out DIR]" >&2; exit 2 ;;
  esac
done
source "$repo/examples/common.sh"
fl_example_programs
fl_example_python fl torch
python="$PYTHON"
out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/fl-pytorch-site.XXXXXX")}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
echo "Work directory: $out"
cd "$out"
rm -rf pki server-data
"$FL" certs --out pki --client hospital-a --client hospital-b >certs.log
"$python" "$here/site.py" init --out init.safetensors --seed 1

start_server server.log --listen 127.0.0.1:0 --data-dir server-data --ca pki/ca.pem \
  --cert pki/server.pem --key pki/server.key --enroll pki/clients/hospital-a.pem \
  --enroll pki/clients/hospital-b.pem --initial-model init.safetensors --rounds "$rounds" \
  --min-clients 2 --min-fit-clients 2 --lr 0.1 --grace 2
echo "Server listening on 127.0.0.1:$SERVER_PORT (logs in $out)"
first=0
for name in hospital-a hospital-b; do
  "$python" "$here/site.py" train --server "127.0.0.1:$SERVER_PORT" --ca pki/ca.pem \
    --cert "pki/clients/$name.pem" --key "pki/clients/$name.key" \
    --first "$first" --count "$count" --seed "$((first + 1))" >"$name.log" 2>&1 &
  fl_site_pid[$name]=$!
  fl_site_log[$name]="$name.log"
  fl_example_pids+=("$!")
  first=$((first + count))
done
wait_for_run 600

echo
"$FL" admin --data-dir server-data rounds
"$FL" admin --data-dir server-data export --out global.safetensors
"$python" "$here/site.py" evaluate --model global.safetensors
