#!/usr/bin/env bash
# Installs Debian's nginx (the load balancer in front of two llama-servers) when it is missing and
# prints its path. The multi-server tests and bench start their own nginx on 127.0.0.1 with a
# config they write (tests/support/balancer.py: `hash $http_x_cpc_document consistent`); the package's own
# service is kept from starting during the install (policy-rc.d), so nothing listens on port 80.
set -euo pipefail

say() { echo "load-balancer: $*" >&2; }
fail() { say "$*"; exit 1; }

find_nginx() { command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true; }

if [ -z "$(find_nginx)" ]; then
  command -v apt-get >/dev/null || fail "nginx is missing and there is no apt-get: install nginx"
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || fail "nginx is missing; install it as root: apt-get install nginx-light"
    sudo=(sudo)
  fi
  say "installing Debian's nginx-light (its service is not started)"
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod +x "$policy"
    made_policy=1
  fi
  trap '[ "$made_policy" = 1 ] && "${sudo[@]}" rm -f "$policy"' EXIT
  # Without a fresh package list first: apt-get update only when the install cannot find it.
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq nginx-light >&2 </dev/null \
    || { "${sudo[@]}" apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq nginx-light >&2 </dev/null; }
fi
found="$(find_nginx)"
[ -n "$found" ] || fail "nginx did not install"
echo "$found"
