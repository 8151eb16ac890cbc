#!/usr/bin/env bash
# Build the llama-cpp-python wheel once for this CPU and print the folder that holds it.
#
#   scripts/llama-wheel.sh PYTHON          build if needed, print the wheelhouse
#   scripts/llama-wheel.sh --flags         print the chosen level and CMake flags only
#
# Why not pip's default build: it compiles llama.cpp with -march=native, which trusts CPUID, and
# some VMs advertise features (AMX, seen here) that the OS does not enable, so the model dies with
# SIGILL on its first decode. /proc/cpuinfo lists only what the kernel enabled, so the flags come
# from there: AVX-512 (F/CD/VL/DQ/BW), VBMI, VNNI and BF16 when present (prompt decode is 1.3-1.5x
# faster than AVX2 on AVX-512 CPUs), else AVX2, else a plain x86-64 build. AMX is never enabled:
# Linux also needs a per-process permission request for it, and no machine here can test it.
# CPC_LSP_LLAMA_ISA=avx2 (or baseline) forces a lower level, e.g. for a wheel shipped elsewhere.
# The wheelhouse is keyed by level and a hash of version, flags and machine, so a changed choice
# never reuses a wheel built for another (pip's own wheel cache ignores CMAKE_ARGS).
set -euo pipefail
CPUINFO=${CPC_LSP_CPUINFO:-/proc/cpuinfo}
VERSION=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' "$(dirname "$0")/../pyproject.toml")

flags_line=" $(grep -m1 '^flags' "$CPUINFO" 2>/dev/null | cut -d: -f2 || true) "
has() { for f in "$@"; do [[ $flags_line == *" $f "* ]] || return 1; done; }
onoff() { if has "$@"; then echo ON; else echo OFF; fi; }

level=baseline
if [[ $(uname -m) == x86_64 ]]; then
  if has avx512f avx512cd avx512vl avx512dq avx512bw avx2 fma f16c bmi2; then level=avx512
  elif has avx avx2 fma f16c bmi2; then level=avx2
  fi
fi
case "${CPC_LSP_LLAMA_ISA:-}" in
  "") ;;
  avx2) [[ $level == baseline ]] || level=avx2 ;;
  baseline) level=baseline ;;
  *) echo "CPC_LSP_LLAMA_ISA must be avx2 or baseline (got '${CPC_LSP_LLAMA_ISA}')" >&2; exit 2 ;;
esac

FLAGS="-DGGML_NATIVE=OFF"
if [[ $level != baseline ]]; then
  FLAGS+=" -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
elif [[ $(uname -m) == x86_64 ]]; then
  FLAGS+=" -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF"
fi
if [[ $level == avx512 ]]; then
  FLAGS+=" -DGGML_AVX512=ON -DGGML_AVX512_VBMI=$(onoff avx512vbmi)"
  FLAGS+=" -DGGML_AVX512_VNNI=$(onoff avx512_vnni) -DGGML_AVX512_BF16=$(onoff avx512_bf16)"
  FLAGS+=" -DGGML_AVX_VNNI=$(onoff avx_vnni)"
fi
if [[ $(uname -m) == x86_64 ]]; then
  FLAGS+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
fi

if [[ ${1:-} == --flags ]]; then
  echo "$level $FLAGS"
  exit 0
fi
PY=${1:?usage: llama-wheel.sh PYTHON | --flags}
key=$level-$(printf '%s %s %s' "$VERSION" "$FLAGS" "$(uname -m)" | sha256sum | cut -c1-12)
house="${CPC_LSP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cpc-lsp}/wheels/$key"
if ! compgen -G "$house/llama_cpp_python-$VERSION-*.whl" >/dev/null; then
  mkdir -p "$house"
  echo "building llama-cpp-python $VERSION for $level (a few minutes, once)" >&2
  CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$PY" -m pip wheel --quiet --no-cache-dir --no-deps "llama-cpp-python==$VERSION" -w "$house" >&2
  echo "$FLAGS" >"$house/cmake-flags.txt"
fi
echo "$house"
