#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and, as a site's engineer would on a machine
# without the CUDA toolkit, builds against it with plain CMake (the default generator, nvcc off
# the PATH, the toolkit's directory ignored): the consumer project in tests/install_consumer and
# the custom-model example in examples/custom_model. Then checks that neither program nor `fl`
# needs a CUDA library to start, and runs the consumer.
# Arguments: the build directory, the consumer's source directory, the example's source directory.
set -euo pipefail
build="$1"
source="$2"
example="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null

# No CUDA anywhere CMake or the loader would look.
no_cuda_path="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -i cuda | paste -sd: -)"
configure() {  # source dir, build dir
  env -u CUDAToolkit_ROOT -u CUDA_PATH PATH="$no_cuda_path" \
    cmake -S "$1" -B "$2" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_IGNORE_PREFIX_PATH=/usr/local/cuda >"$2.log" 2>&1 || {
    echo "configuring $1 against the installed SDK failed:" >&2
    cat "$2.log" >&2
    exit 1
  }
  env PATH="$no_cuda_path" cmake --build "$2" -j 2 >>"$2.log" 2>&1 || {
    echo "building $1 against the installed SDK failed:" >&2
    tail -n 30 "$2.log" >&2
    exit 1
  }
}
configure "$source" "$work/consumer"
configure "$example" "$work/example"

for program in "$work/consumer/site" "$work/example/custom_site" "$work/prefix/bin/fl"; do
  if ldd "$program" | grep -E 'libcu(da|dart|blas)'; then
    echo "$program links a CUDA library; it must start on a machine without CUDA" >&2
    exit 1
  fi
done
"$work/example/custom_site" init --out "$work/init.safetensors" >/dev/null
"$work/consumer/site"
