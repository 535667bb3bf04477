#!/usr/bin/env bash
# Three single-node k3d clusters (east, west, north) on one docker network,
# each with its own pod and service CIDR so addresses never overlap.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need docker k3d kubectl

declare -A POD_CIDR=([east]=10.10.0.0/16 [west]=10.20.0.0/16 [north]=10.30.0.0/16)
declare -A SVC_CIDR=([east]=10.110.0.0/16 [west]=10.120.0.0/16 [north]=10.130.0.0/16)
declare -A API_PORT=([east]=6550 [west]=6551 [north]=6552)

if ! docker network inspect "$NETWORK" >/dev/null 2>&1; then
    log "creating docker network $NETWORK"
    docker network create "$NETWORK" >/dev/null
fi

for c in "${CLUSTERS[@]}"; do
    if k3d cluster get "$c" >/dev/null 2>&1; then
        log "cluster $c already exists"
        continue
    fi
    log "creating cluster $c (pods ${POD_CIDR[$c]}, services ${SVC_CIDR[$c]})"
    # CoreDNS gets the .10 address of the service CIDR, as k3s does by default.
    k3d cluster create "$c" \
        --network "$NETWORK" \
        --api-port "${API_PORT[$c]}" \
        --k3s-arg "--cluster-cidr=${POD_CIDR[$c]}@server:0" \
        --k3s-arg "--service-cidr=${SVC_CIDR[$c]}@server:0" \
        --k3s-arg "--cluster-dns=${SVC_CIDR[$c]%.0/16}.10@server:0" \
        --k3s-arg "--disable=traefik@server:0" \
        --kubeconfig-update-default \
        --kubeconfig-switch-context=false \
        --wait
done

for c in "${CLUSTERS[@]}"; do
    kubectl --context "$(ctx "$c")" wait --for=condition=Ready nodes --all --timeout=120s
    kubectl --context "$(ctx "$c")" -n kube-system rollout status deployment/coredns --timeout=180s
done

log "clusters ready: $(printf '%s ' "${CLUSTERS[@]/#/k3d-}")"
