#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian/Ubuntu machine, then run them.
# Extra arguments go to pytest (e.g. scripts/test.sh -k protocol).
# scripts/test.sh --quick: only the venv and the in-process tier (the tests marked `quick`),
# under a minute.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--quick" ]; then
  shift
  # (an `if`, not `[ ] || { a && b; }`: there a failing step let the script go on to a
  # confusing "pytest: No such file or directory")
  if [ ! -x .venv/bin/pytest ]; then
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[test,fast]'
  fi
  exec .venv/bin/pytest -q -m quick -n 2 "$@"
fi

# Real peers the tests start: dig/kdig, unbound, dnsperf (bench), shellcheck (deploy/demo);
# application resolvers and peers in a network namespace (`ip netns`): dnsmasq on port 53,
# Go (golang-go), Java JNDI (`java File.java` needs the JDK), etcd + etcdctl, openssl;
# promtool from prometheus (the alert rules; its service is not started in a container);
# the resolver matrix: BIND (named, named-checkzone), knot-resolver, PowerDNS Recursor, dnsmasq;
# the zone-transfer secondaries: NSD, BIND and Knot (knotd, knotc);
# sysctl (procps) and setpriv (util-linux): the manifest's pod on port 53 as non-root;
# musl-gcc (musl-tools): musl's getaddrinfo, a client that takes truncated answers as they are.
packages=(bind9-dnsutils knot-dnsutils unbound nsd dnsperf shellcheck prometheus
          iproute2 dnsmasq-base golang-go openjdk-17-jdk-headless etcd-server etcd-client openssl
          bind9 knot knot-resolver pdns-recursor procps util-linux musl-tools)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# `kubectl kustomize` (deploy/ against `dnsside install`): any kubectl will do.
command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
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
# Four workers on two cores: most of the suite waits on processes and sockets, not the CPU.
exec .venv/bin/pytest -q -n 4 "$@"
