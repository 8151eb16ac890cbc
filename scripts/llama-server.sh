#!/usr/bin/env bash
# Build llama.cpp's llama-server once for this CPU and print the path of the binary.
#
#   scripts/llama-server.sh PYTHON     build if needed (a few minutes, once), print the binary's path
#
# The source is the llama.cpp that the pinned llama-cpp-python sdist vendors, fetched with
# `PYTHON -m pip download` as on a fresh machine (by `llama-wheel.sh --source`, shared with the wheel), so the server computes the same numbers as the
# in-process engine. The CPU flags are scripts/llama-wheel.sh's own choice (`--flags`: never
# -march=native, never AMX), and the cache is keyed like its wheelhouse: level + a hash of version,
# flags and machine, under ${CPC_LSP_CACHE_DIR:-~/.cache/cpc-lsp}/llama-server/<key>/.
# The binary is static (no libllama.so beside it to lose), with no web UI (that would be fetched
# from the network at build time), no OpenSSL (tests talk plain HTTP on 127.0.0.1), no curl.
# Debian's ccache is used when installed, or installed when we are root; its cache is shared with
# the wheel build in <cache>/ccache. One build at a time: a second caller waits, then finds it.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY=${1:?usage: llama-server.sh PYTHON}
VERSION=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' "$HERE/../pyproject.toml")
read -r level FLAGS <<<"$("$HERE/llama-wheel.sh" --flags)"
SERVER_FLAGS="-DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
SERVER_FLAGS+=" -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF"
SERVER_FLAGS+=" -DCMAKE_BUILD_TYPE=Release"

CACHE="${CPC_LSP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cpc-lsp}"
key=$level-$(printf '%s %s %s %s' "$VERSION" "$FLAGS" "$SERVER_FLAGS" "$(uname -m)" | sha256sum | cut -c1-12)
DIR="$CACHE/llama-server/$key"
BIN="$DIR/llama-server"
say() { echo "llama-server: $*" >&2; }

mkdir -p "$CACHE/llama-server"
exec 9>"$DIR.lock"
flock 9
if [[ -x $BIN ]]; then
  echo "$BIN"
  exit 0
fi

if ! command -v ccache >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  say "installing Debian's ccache (compiles once, reused by later builds)"
  { apt-get install -y -qq ccache || { apt-get update -qq && apt-get install -y -qq ccache; }; } \
    >/dev/null 2>&1 </dev/null || say "could not install ccache; building without it"
fi
LAUNCHER=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR="$CACHE/ccache"
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)

WORK=$(mktemp -d "$CACHE/llama-server/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# ccache keys hold absolute paths: relative to the cache folder (the fixed source tree and the
# temporary build folder are both under it), a rebuild hits.
export CCACHE_BASEDIR="$CACHE" CCACHE_NOHASHDIR=true
say "building llama-server from llama-cpp-python $VERSION's llama.cpp for $level (a few minutes, once)"
# The same extracted sdist the wheel build uses (downloaded once, only the sdist itself from source:
# `--no-binary :all:` would build every build dependency from source first, minutes of nothing).
SRC="$("$HERE/llama-wheel.sh" --source "$PY")/vendor/llama.cpp"
[[ -f $SRC/tools/server/CMakeLists.txt ]] || { say "the sdist has no vendor/llama.cpp/tools/server"; exit 1; }

LOG="$WORK/build.log"
fail() { say "$1 failed; the last lines of its log:"; tail -n 30 "$LOG" >&2; exit 1; }
say "configuring (log: $LOG)"
# shellcheck disable=SC2086
cmake -S "$SRC" -B "$WORK/build" "${GENERATOR[@]}" "${LAUNCHER[@]}" $FLAGS $SERVER_FLAGS >"$LOG" 2>&1 \
  || fail "configuring"
say "compiling with $(nproc) jobs${LAUNCHER:+ through ccache ($CCACHE_DIR)}"
# Ninja and Make both print "[ n/total]" or "[ p%]": turn those into a line every tenth.
shown=-1
while IFS= read -r line; do
  echo "$line" >>"$LOG"
  pct=
  if [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
  elif [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then pct=${BASH_REMATCH[1]}
  fi
  if [[ -n $pct ]] && ((pct / 10 > shown)); then shown=$((pct / 10)); say "compiling: $pct%"; fi
done < <(cmake --build "$WORK/build" --target llama-server -j "$(nproc)" 2>&1; echo "exit $?")
[[ $(tail -n 1 "$LOG") == "exit 0" ]] || fail "compiling"
mkdir -p "$DIR"
cp "$WORK/build/bin/llama-server" "$BIN.tmp"
echo "$FLAGS $SERVER_FLAGS" >"$DIR/cmake-flags.txt"
mv "$BIN.tmp" "$BIN"
say "built $BIN"
echo "$BIN"
