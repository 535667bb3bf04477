# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are used by the sourcing scripts
# Shared settings for the deploy/demo scripts; sourced, not executed.

# The three clusters. Each one links to the other two, and the Linkerd link
# name (= mirror suffix, = dnsside cluster name) is the cluster name itself.
CLUSTERS=(east west north)

# Docker network shared by all k3d nodes, so gateways and API servers of one
# cluster are reachable from the others.
NETWORK="${NETWORK:-dnsside-demo}"

DEMO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$DEMO_DIR/../.." && pwd)"

# Shared Linkerd trust anchor and per-cluster issuers live here (never in git).
CERT_DIR="${CERT_DIR:-${TMPDIR:-/tmp}/dnsside-demo-certs}"

IMAGE="${IMAGE:-ghcr.io/dnsside/dnsside:0.1.0}"

# kubectl context name that k3d gives cluster $1.
ctx() {
    printf 'k3d-%s' "$1"
}

log() {
    printf '\n==> %s\n' "$*" >&2
}

# Fail early, with a readable message, when a required CLI is missing.
need() {
    local tool
    for tool in "$@"; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            printf 'error: %s is required but not on PATH\n' "$tool" >&2
            exit 1
        fi
    done
}

# Every cluster except $1.
peers_of() {
    local c
    for c in "${CLUSTERS[@]}"; do
        if [[ "$c" != "$1" ]]; then
            printf '%s\n' "$c"
        fi
    done
}
