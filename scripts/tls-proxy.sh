#!/usr/bin/env bash
# Installs Debian's stunnel (a TLS-terminating proxy) when it is missing and prints its path. The
# https:// tests put it in front of a real llama-server on 127.0.0.1, with a CA and certificates
# they make themselves (tests/lsp_server/test_model_server_tls.py); nothing listens beyond loopback.
set -euo pipefail

say() { echo "tls-proxy: $*" >&2; }
fail() { say "$*"; exit 1; }

find_stunnel() { command -v stunnel4 || command -v stunnel || true; }

if [ -z "$(find_stunnel)" ]; then
  command -v apt-get >/dev/null || fail "stunnel is missing and there is no apt-get: install stunnel4"
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || fail "stunnel is missing; install it as root: apt-get install stunnel4"
    sudo=(sudo)
  fi
  say "installing Debian's stunnel4"
  # Without a fresh package list first: apt-get update only when the install cannot find it.
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq stunnel4 >&2 </dev/null \
    || { "${sudo[@]}" apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq stunnel4 >&2 </dev/null; }
fi
found="$(find_stunnel)"
[ -n "$found" ] || fail "stunnel4 did not install"
echo "$found"
