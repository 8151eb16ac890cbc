#!/usr/bin/env bash
# Build the llama-cpp-python wheel once for this CPU and print the folder that holds it.
#
#   scripts/llama-wheel.sh PYTHON          build if needed, print the wheelhouse
#   scripts/llama-wheel.sh --flags         print the chosen level and CPU flags only
#   scripts/llama-wheel.sh --source PYTHON print the extracted sdist (downloaded once), e.g. for
#                                          scripts/llama-server.sh: same paths, so ccache hits
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
#
# What is built: only what the engine loads (libllama, libggml*): not llama-cpp-python's multimodal
# library (LLAVA_BUILD: mtmd, clip), not llama.cpp's common library (llama-lean.cmake says how),
# no tools, examples or tests. 74 compiler runs instead of 178. Debian's ccache is installed when
# missing (root with apt-get; else the build goes on without it) and shared with
# scripts/llama-server.sh in $CACHE/ccache; its keys hold absolute paths, so the source is
# extracted to one fixed folder ($CACHE/src/...) and built in one fixed folder ($CACHE/build/KEY,
# removed after). Progress goes to stderr as "building llama.cpp for LEVEL: step N/5 ...", and the
# last line says how long each step took.
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

LEAN="$(cd "$(dirname "$0")" && pwd)/llama-lean.cmake"
BUILD_FLAGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_INCLUDE=$LEAN"

if [[ ${1:-} == --flags ]]; then
  echo "$level $FLAGS"
  exit 0
fi
CACHE="${CPC_LSP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cpc-lsp}"
source_mode=
if [[ ${1:-} == --source ]]; then source_mode=1; shift; fi
PY=${1:?usage: llama-wheel.sh PYTHON | --flags | --source PYTHON}
say() { echo "building llama.cpp for $level: $*" >&2; }

# The sdist, once per version, at a fixed path (ccache keys hold absolute paths).
SRC="$CACHE/src/llama_cpp_python-$VERSION"
fetch_source() {
  [[ -f $SRC/CMakeLists.txt ]] && return 0
  mkdir -p "$CACHE/src"
  (
    flock 8
    [[ -f $SRC/CMakeLists.txt ]] && exit 0
    tmp=$(mktemp -d "$CACHE/src/.fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$tmp" >&2
    tar -xzf "$tmp/llama_cpp_python-$VERSION.tar.gz" -C "$tmp"
    rm -rf "$SRC" && mv "$tmp/llama_cpp_python-$VERSION" "$SRC"
  ) 8>"$CACHE/src/.lock"
}
if [[ -n $source_mode ]]; then
  fetch_source
  echo "$SRC"
  exit 0
fi

# Keyed by what is built, not where this checkout is (the lean file by its content).
lean_id=$(sha256sum <"$LEAN" | cut -c1-12)
key=$level-$(printf '%s %s %s %s' "$VERSION" "$FLAGS" "-DLLAVA_BUILD=OFF lean-$lean_id" "$(uname -m)" | sha256sum | cut -c1-12)
house="$CACHE/wheels/$key"
wheel_there() { compgen -G "$house/llama_cpp_python-$VERSION-*.whl" >/dev/null; }
if wheel_there; then
  echo "$house"
  exit 0
fi
mkdir -p "$CACHE/wheels"
exec 9>"$CACHE/wheels/.lock-$key"
flock 9  # a second install waits for the first one's wheel instead of compiling again
if wheel_there; then
  echo "$house"
  exit 0
fi

T0=$SECONDS
times=()
lap() { times+=("$1 $((SECONDS - T0))s"); T0=$SECONDS; }
say "step 1/5: ccache (reuses compiled objects across builds)"
if ! command -v ccache >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  { apt-get install -y -qq ccache || { apt-get update -qq && apt-get install -y -qq ccache; }; } \
    >/dev/null 2>&1 </dev/null || say "could not install Debian's ccache; building without it"
fi
LAUNCHER="-DGGML_CCACHE=OFF"
if command -v ccache >/dev/null; then
  export CCACHE_DIR="$CACHE/ccache"
  LAUNCHER="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi
lap ccache
say "step 2/5: the llama-cpp-python $VERSION source"
fetch_source
rm -rf "$SRC/llama_cpp/lib"  # its CMake installs into the source tree too: no leftovers from another build
lap source
BUILD="$CACHE/build/$key"
LOG="$CACHE/build/$key.log"
rm -rf "$BUILD"
mkdir -p "$BUILD" "$house"
say "step 3/5: build tools and configure (log: $LOG)"
# pip -v prints scikit-build-core's stages and the compiler's [n/total]; they become the steps.
shown=-1
step=3
status=0
while IFS= read -r line; do
  printf '%s\n' "$line" >>"$LOG"
  if [[ $line == *"*** Building project"* ]] && ((step < 4)); then
    lap configure; step=4; say "step 4/5: compiling with $(nproc) jobs${CCACHE_DIR:+ through ccache}"
  elif [[ $line =~ ^[[:space:]]*\[([0-9]+)/([0-9]+)\]\  ]] && ((step == 4)); then
    pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
    if ((pct / 10 > shown)); then shown=$((pct / 10)); say "step 4/5: compiling ${BASH_REMATCH[1]}/${BASH_REMATCH[2]}"; fi
  elif [[ $line == *"*** Installing project"* ]] && ((step < 5)); then
    lap compile; step=5; say "step 5/5: making the wheel"
  elif [[ $line =~ ^pip\ exit\ ([0-9]+)$ ]]; then
    status=${BASH_REMATCH[1]}
  fi
done < <(
  CMAKE_ARGS="$FLAGS $BUILD_FLAGS $LAUNCHER" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$PY" -m pip wheel -v --no-cache-dir --no-deps "$SRC" -w "$house" \
    -C "build-dir=$BUILD" -C cmake.build-type=Release 2>&1
  echo "pip exit $?"
)
if ((status != 0)) || ! wheel_there; then
  say "failed; the last lines of $LOG:"
  tail -n 30 "$LOG" >&2
  exit 1
fi
lap wheel
rm -rf "$BUILD"
echo "$FLAGS $BUILD_FLAGS" >"$house/cmake-flags.txt"
say "done (${times[*]}); the wheel is cached in $house"
echo "$house"
