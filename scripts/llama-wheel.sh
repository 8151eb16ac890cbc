#!/usr/bin/env bash
# Build the llama-cpp-python wheel once and print the folder that holds it.
#
# Why not pip's default build: it compiles llama.cpp with -march=native, and some VMs advertise
# CPU features (AMX, seen here) that they do not enable, so the model dies with SIGILL on its
# first decode. This builds for any x86-64 CPU with AVX2 instead, into a wheelhouse keyed by
# version and flags, so later installs and CI reuse it (pip's own wheel cache ignores CMAKE_ARGS).
set -euo pipefail
PY=${1:?usage: llama-wheel.sh PYTHON}
VERSION=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' "$(dirname "$0")/../pyproject.toml")
FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
key=$(printf '%s %s %s' "$VERSION" "$FLAGS" "$(uname -m)" | sha256sum | cut -c1-12)
house="${CPC_LSP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cpc-lsp}/wheels/$key"
if ! compgen -G "$house/llama_cpp_python-$VERSION-*.whl" >/dev/null; then
  mkdir -p "$house"
  echo "building llama-cpp-python $VERSION (a few minutes, once)" >&2
  CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$PY" -m pip wheel --quiet --no-cache-dir --no-deps "llama-cpp-python==$VERSION" -w "$house" >&2
fi
echo "$house"
