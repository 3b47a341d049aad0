#!/usr/bin/env bash
# Two sites federate a model of their own (two_layer_trainer.h), which `fl server` has never
# heard of, on Fashion-MNIST. Run from anywhere after ./scripts/build.sh:
#
#   examples/custom_model/run.sh [--rounds N] [--out DIR]
#
# It installs the SDK from the build into DIR/prefix and builds the site program against it with
# plain CMake and find_package(fl), as a site's engineer would (or uses $CUSTOM_SITE when set),
# writes the initial model (`custom_site init`), starts `fl server` from that safetensors file,
# runs two `custom_site train` processes, and at the end exports the global model with
# `fl admin export` and scores it with `custom_site evaluate` on the 10k test images.
# Exit status: 0 when the run finished and the exported model scored, 1 otherwise.
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
out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/fl-custom-model.XXXXXX")}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
echo "Work directory: $out"
data=/usr/share/datasets/fashion-mnist

site="${CUSTOM_SITE:-}"
if [ -z "$site" ]; then
  echo "Installing the SDK into $out/prefix and building the site program against it"
  cmake --install "${FL_BUILD_DIR:-$repo/build}" --prefix "$out/prefix" >"$out/install.log"
  cmake -S "$here" -B "$out/site-build" -DCMAKE_PREFIX_PATH="$out/prefix" \
    -DCMAKE_BUILD_TYPE=Release >"$out/site-build.log"
  cmake --build "$out/site-build" -j 2 >>"$out/site-build.log"
  site="$out/site-build/custom_site"
fi

cd "$out"
rm -rf pki server-data
"$FL" certs --out pki --client site-a --client site-b >certs.log
"$site" init --out init.safetensors --hidden 32 --seed 1

server_args=(--config "$here/server.toml")
[ -n "$rounds" ] && server_args+=(--rounds "$rounds")
start_server server.log "${server_args[@]}"
echo "Server listening on 127.0.0.1:$SERVER_PORT (logs in $out)"
first=0
for name in site-a site-b; do
  "$site" train --server "127.0.0.1:$SERVER_PORT" --ca pki/ca.pem \
    --cert "pki/clients/$name.pem" --key "pki/clients/$name.key" \
    --images "$data/train-images-idx3-ubyte.gz" --labels "$data/train-labels-idx1-ubyte.gz" \
    --first "$first" --count 3000 --seed "$((first + 1))" >"$name.log" 2>&1 &
  fl_site_pid[$name]=$!
  fl_site_log[$name]="$name.log"
  fl_example_pids+=("$!")
  first=$((first + 3000))
done
wait_for_run 600

echo
"$FL" admin --data-dir server-data rounds
"$FL" admin --data-dir server-data export --out global.safetensors
"$site" evaluate --model global.safetensors \
  --images "$data/t10k-images-idx3-ubyte.gz" --labels "$data/t10k-labels-idx1-ubyte.gz"
