#!/usr/bin/env bash
# Linkerd with one shared trust anchor in all three clusters, the multicluster
# extension with headless-service mirroring, and a full mesh of links: every
# cluster mirrors the exported services of the other two (gateway mode).
#
# Works with the current link model (Linkerd 2.18+: controllers declared in the
# multicluster extension's values, links made with `linkerd multicluster
# link-gen`) and with the legacy one (`linkerd multicluster link --set
# enableHeadlessServices=true`, before 2.18); the CLI decides which.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need docker kubectl linkerd step

# Linkerd 2.18+ no longer installs the Gateway API CRDs and needs them first
# (it supports 1.1.1 to 1.2.1). Older releases install their own copy.
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.2.1}"

if linkerd multicluster link-gen --help >/dev/null 2>&1; then
    LINK_MODEL=controllers
else
    LINK_MODEL=legacy
fi
log "linkerd $(linkerd version --client --short), link model: $LINK_MODEL"

# --- certificates: one root, one issuer per cluster ------------------------
mkdir -p "$CERT_DIR"
if [[ ! -f "$CERT_DIR/ca.crt" ]]; then
    log "creating the shared trust anchor in $CERT_DIR"
    step certificate create root.linkerd.cluster.local \
        "$CERT_DIR/ca.crt" "$CERT_DIR/ca.key" \
        --profile root-ca --no-password --insecure
fi
for c in "${CLUSTERS[@]}"; do
    if [[ ! -f "$CERT_DIR/$c-issuer.crt" ]]; then
        step certificate create identity.linkerd.cluster.local \
            "$CERT_DIR/$c-issuer.crt" "$CERT_DIR/$c-issuer.key" \
            --profile intermediate-ca --not-after 8760h --no-password --insecure \
            --ca "$CERT_DIR/ca.crt" --ca-key "$CERT_DIR/ca.key"
    fi
done

# --- control plane and multicluster extension ------------------------------
for c in "${CLUSTERS[@]}"; do
    k="$(ctx "$c")"
    log "installing Linkerd in $c"
    if [[ "$LINK_MODEL" == controllers ]] &&
        ! kubectl --context "$k" get crd httproutes.gateway.networking.k8s.io >/dev/null 2>&1; then
        kubectl --context "$k" apply --server-side -f \
            "https://github.com/kubernetes-sigs/gateway-api/releases/download/${GATEWAY_API_VERSION}/standard-install.yaml"
    fi
    linkerd --context "$k" check --pre
    linkerd --context "$k" install --crds | kubectl --context "$k" apply -f -
    linkerd --context "$k" install \
        --identity-trust-anchors-file "$CERT_DIR/ca.crt" \
        --identity-issuer-certificate-file "$CERT_DIR/$c-issuer.crt" \
        --identity-issuer-key-file "$CERT_DIR/$c-issuer.key" |
        kubectl --context "$k" apply -f -
    linkerd --context "$k" check

    mc_args=()
    if [[ "$LINK_MODEL" == controllers ]]; then
        # One service-mirror controller per link, declared up front; each
        # waits until its Link (created below) exists.
        i=0
        while read -r peer; do
            mc_args+=(--set "controllers[$i].link.ref.name=$peer")
            mc_args+=(--set "controllers[$i].enableHeadlessServices=true")
            i=$((i + 1))
        done < <(peers_of "$c")
    fi
    linkerd --context "$k" multicluster install "${mc_args[@]}" |
        kubectl --context "$k" apply -f -
    kubectl --context "$k" -n linkerd-multicluster rollout status deployment/linkerd-gateway --timeout=300s
    # link-gen/link read the gateway address from the LoadBalancer status
    # (k3s' servicelb fills it with the node address on the docker network).
    for _ in $(seq 1 60); do
        gw="$(kubectl --context "$k" -n linkerd-multicluster get service linkerd-gateway \
            -o jsonpath='{.status.loadBalancer.ingress[0].ip}')"
        [[ -n "$gw" ]] && break
        sleep 2
    done
    if [[ -z "$gw" ]]; then
        echo "error: linkerd-gateway in $c has no LoadBalancer address" >&2
        exit 1
    fi
done

# --- links: the target's credentials are applied in the source ------------
# k3d writes kubeconfigs that reach the API server through a port on the
# host; the other clusters need the server node's address on the shared
# docker network instead.
api_address() {
    local ip
    ip="$(docker inspect -f "{{ (index .NetworkSettings.Networks \"$NETWORK\").IPAddress }}" "k3d-$1-server-0")"
    printf 'https://%s:6443' "$ip"
}

for source_cluster in "${CLUSTERS[@]}"; do
    while read -r target; do
        log "linking $source_cluster -> $target"
        if [[ "$LINK_MODEL" == controllers ]]; then
            linkerd --context "$(ctx "$target")" multicluster link-gen \
                --cluster-name "$target" \
                --api-server-address "$(api_address "$target")" |
                kubectl --context "$(ctx "$source_cluster")" apply -f -
        else
            linkerd --context "$(ctx "$target")" multicluster link \
                --cluster-name "$target" \
                --api-server-address "$(api_address "$target")" \
                --set enableHeadlessServices=true |
                kubectl --context "$(ctx "$source_cluster")" apply -f -
        fi
    done < <(peers_of "$source_cluster")
done

for c in "${CLUSTERS[@]}"; do
    linkerd --context "$(ctx "$c")" multicluster check --wait 3m
    linkerd --context "$(ctx "$c")" multicluster gateways
done
