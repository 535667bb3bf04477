#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian/Ubuntu machine, then run them.
# Extra arguments go to pytest (e.g. scripts/test.sh -k protocol).
set -euo pipefail
cd "$(dirname "$0")/.."

# Real peers the tests start: dig/kdig, unbound, nsd, dnsperf (bench), shellcheck (deploy/demo);
# the resolver matrix: BIND (named, named-checkzone), knot-resolver, PowerDNS Recursor, dnsmasq;
# ss (iproute2).
packages=(bind9-dnsutils knot-dnsutils unbound nsd dnsperf shellcheck
          bind9 knot-resolver pdns-recursor dnsmasq-base iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test,fast]'
.venv/bin/ruff check dnsside
.venv/bin/mypy dnsside
exec .venv/bin/pytest -q "$@"
