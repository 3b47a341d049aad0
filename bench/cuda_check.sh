#!/usr/bin/env bash
# The CUDA backend on a machine with a GPU, in one command: builds the project with the CUDA
# backend required (FL_ENABLE_CUDA=ON) into ./build-cuda-check, runs cuda_test (the cuda backend
# against the cpu backend: every op, every layer, one training step of each built-in model) and
# prints its results. With THROUGHPUT=1 it then also runs bench/train_throughput on cpu and cuda.
#
#   bench/cuda_check.sh                      # sm_90 (H100/H200) SASS + compute_90 PTX
#   CUDA_ARCH=native bench/cuda_check.sh     # or any CMAKE_CUDA_ARCHITECTURES value
#
# Exit status: 0 when every test ran and passed; 1 when a test failed or was skipped (a skip on
# this machine means the runtime did not see the GPU: the reason is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build-cuda-check}"
jobs="${JOBS:-$(nproc)}"
export PATH="${PATH}:/usr/local/cuda/bin"

echo "== device"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
else
  echo "nvidia-smi not found"
fi
command -v nvcc >/dev/null && nvcc --version | tail -2

echo "== configure and build (${build}, -j${jobs})"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFL_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" "${launcher[@]}" | grep -E "^-- fl:" || true
targets=(cuda_test)
[[ "${THROUGHPUT:-0}" == 1 ]] && targets+=(train_throughput)
start=$(date +%s)
cmake --build "${build}" -j "${jobs}" --target "${targets[@]}" | tail -n 3
echo "built in $(( $(date +%s) - start )) s"

echo "== cuda_test"
log="$(mktemp)"
trap 'rm -f "${log}"' EXIT
# CudaUnavailableTest checks the no-device path and skips where a device is present.
set +e
"${build}/tests/cuda_test" --gtest_filter='-CudaUnavailableTest.*' --gtest_color=no 2>&1 \
  | tee "${log}"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -c '^\[       OK \]' "${log}" || true)
failed=$(grep -c '^\[  FAILED  \] .*\.' "${log}" || true)
skipped=$(grep -c '^\[  SKIPPED \]' "${log}" || true)
echo "== summary: ${passed} passed, ${failed} failed, ${skipped} skipped (exit ${status})"
if [[ "${skipped}" -gt 0 ]]; then
  grep -m1 -i "no CUDA device" "${log}" || true
fi

if [[ "${THROUGHPUT:-0}" == 1 ]]; then
  echo "== train_throughput (cpu vs cuda)"
  "${build}/bench/train_throughput" --backends cpu cuda || true
fi

[[ "${status}" -eq 0 && "${skipped}" -eq 0 ]]
