#!/usr/bin/env bash
# Training throughput of the built-in models, ours against PyTorch on the CPU, in one table.
#
#   bench/train_vs_torch.sh [--build DIR] [--threads N] [--reps R] [--steps S] [--torch-blas DIR]
#
# PyTorch's Linear layers call the BLAS behind libblas.so.3: Debian's python3-torch is built with
# BLAS_INFO=generic, so without OpenBLAS installed they run on the reference (netlib) BLAS, 20-50x
# slower. --torch-blas DIR puts DIR (e.g. an unpacked libopenblas0-pthread's
# usr/lib/x86_64-linux-gnu/openblas-pthread) first on PyTorch's library path; the table names the
# BLAS PyTorch actually loaded.
#
# Runs bench/train_throughput (our cpu backend, and cuda when this build and machine have it)
# and bench/torch_train_throughput.py with the same thread count, model, batch (64), optimizer
# (SGD lr 0.01, momentum 0.9) and data (Fashion-MNIST IDX files), R times each, alternating so
# that both see the same machine load, and prints the median samples/second of each.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$here/../build"
threads="$(nproc)"
reps=5
steps=200
data=/usr/share/datasets/fashion-mnist
torch_blas=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --torch-blas) torch_blas="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
ours="$build/bench/train_throughput"
[[ -x "$ours" ]] || { echo "no $ours: build the target train_throughput first" >&2; exit 1; }
# The first python3 that has PyTorch (Debian's python3-torch is for /usr/bin/python3, which a
# pyenv or virtualenv python3 earlier on the PATH does not see).
python=""
for candidate in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [[ -n "$candidate" ]] && "$candidate" -c 'import torch' 2>/dev/null; then
    python="$candidate"
    break
  fi
done
[[ -n "$python" ]] || { echo "PyTorch is not installed (python3-torch)" >&2; exit 1; }

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
backends=(cpu)
if "$ours" --backends cuda --models softmax --steps 1 >/dev/null 2>&1 &&
   [[ -n "$("$ours" --backends cuda --models softmax --steps 1 2>/dev/null)" ]]; then
  backends+=(cuda)
fi
# Which BLAS PyTorch's matrix products load.
blas="$(LD_LIBRARY_PATH="$torch_blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$python" -c '
import os, torch
torch.ones(8, 8) @ torch.ones(8, 8)
libs = {l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.split()[-1]}
print(" ".join(sorted(os.path.realpath(p) for p in libs)) or "unknown")')"
for ((r = 1; r <= reps; ++r)); do
  echo "repetition $r of $reps" >&2
  OMP_NUM_THREADS="$threads" "$ours" --threads "$threads" --steps "$steps" --data "$data" \
    --backends "${backends[@]}" >>"$results"
  LD_LIBRARY_PATH="$torch_blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OMP_NUM_THREADS="$threads" \
    OPENBLAS_NUM_THREADS=1 "$python" "$here/torch_train_throughput.py" \
    --threads "$threads" --steps "$steps" --data "$data" >>"$results"
done

"$python" - "$results" "$threads" "$reps" "$steps" "$blas" <<'PY'
import statistics, sys
path, threads, reps, steps, blas = sys.argv[1:]
runs = {}
for line in open(path):
    model, backend, rate = line.split()[:3]
    runs.setdefault((model, backend), []).append(float(rate))
med = {k: statistics.median(v) for k, v in runs.items()}
cuda = any(b == "cuda" for _, b in med)
print(f"training samples/s, median of {reps}; batch 64, SGD momentum 0.9, {steps} steps, "
      f"{threads} threads; mlp is 784-200-10; torch's BLAS: {blas}")
head = "| model | ours cpu samples/s | torch cpu samples/s | ratio ours/torch |"
print(head + (" ours cuda samples/s |" if cuda else ""))
print("|---|---:|---:|---:|" + ("---:|" if cuda else ""))
for model in ["softmax", "mlp", "simple_cnn"]:
    ours, torch = med.get((model, "cpu")), med.get((model, "torch"))
    if ours is None or torch is None:
        continue
    row = f"| {model} | {ours:.0f} | {torch:.0f} | {ours / torch:.2f} |"
    if cuda:
        row += f" {med.get((model, 'cuda'), float('nan')):.0f} |"
    print(row)
PY
