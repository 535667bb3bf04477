#!/usr/bin/env bash
# Build the dnsside image, load it into the clusters, deploy it and point each
# cluster's CoreDNS at it for the svc-global zone.
#
#   MODE=service ./04-dnsside.sh   # default: deploy/base, its own Deployment
#   MODE=sidecar ./04-dnsside.sh   # deploy/overlays/sidecar, inside CoreDNS
#
# IMAGE=... uses another image; BUILD=0 skips `docker build` (the image must
# then already exist locally, or be pullable if you also set LOAD=0).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODE="${MODE:-service}"
BUILD="${BUILD:-1}"
LOAD="${LOAD:-1}"
DEFAULT_IMAGE="ghcr.io/dnsside/dnsside:0.1.0"

need docker k3d kubectl

case "$MODE" in
    service | sidecar) ;;
    *)
        echo "error: MODE must be 'service' or 'sidecar', not '$MODE'" >&2
        exit 2
        ;;
esac

if [[ "$BUILD" == 1 ]]; then
    log "building $IMAGE"
    docker build -t "$IMAGE" "$REPO_ROOT"
fi
if [[ "$LOAD" == 1 ]]; then
    cluster_args=()
    for c in "${CLUSTERS[@]}"; do
        cluster_args+=(--cluster "$c")
    done
    k3d image import "$IMAGE" "${cluster_args[@]}"
fi

# The k3s Corefile imports /etc/coredns/custom/*.server from the optional
# ConfigMap kube-system/coredns-custom. These demo clusters have no other
# keys in it, so it is simply replaced. CoreDNS's reload plugin would pick
# the imported file up too (within about 1.5 min: kubelet's ConfigMap refresh
# plus reload's interval); the demo restarts CoreDNS to have it at once.
write_stanza() {
    local k="$1" stanza="$2"
    kubectl --context "$k" -n kube-system create configmap coredns-custom \
        --from-file=dnsside.server="$stanza" --dry-run=client -o yaml |
        kubectl --context "$k" apply -f -
    restart_coredns "$k"
}

restart_coredns() {
    kubectl --context "$1" -n kube-system rollout restart deployment/coredns
    kubectl --context "$1" -n kube-system rollout status deployment/coredns --timeout=180s
}

set_cluster_name() {
    local k="$1" ns="$2" name="$3"
    kubectl --context "$k" -n "$ns" patch configmap dnsside --type merge \
        -p "{\"data\":{\"DNSSIDE_CLUSTER_NAME\":\"$name\"}}"
}

stanza_file="$(mktemp)"
trap 'rm -f "$stanza_file"' EXIT

for c in "${CLUSTERS[@]}"; do
    k="$(ctx "$c")"
    log "dnsside ($MODE mode) in $c"
    if [[ "$MODE" == service ]]; then
        kubectl --context "$k" apply -k "$REPO_ROOT/deploy/base"
        set_cluster_name "$k" dnsside "$c"
        if [[ "$IMAGE" != "$DEFAULT_IMAGE" ]]; then
            kubectl --context "$k" -n dnsside set image deployment/dnsside dnsside="$IMAGE"
        fi
        # Pick up the cluster name (env is read at container start).
        kubectl --context "$k" -n dnsside rollout restart deployment/dnsside
        kubectl --context "$k" -n dnsside rollout status deployment/dnsside --timeout=180s

        ip="$(kubectl --context "$k" -n dnsside get service dnsside -o jsonpath='{.spec.clusterIP}')"
        log "CoreDNS in $c forwards svc-global to $ip:53"
        sed "s/<dnsside-service-ClusterIP>/$ip/" \
            "$REPO_ROOT/deploy/coredns/Corefile.service.snippet" >"$stanza_file"
        write_stanza "$k" "$stanza_file"
    else
        # RBAC, settings and the partial coredns Deployment (coredns-patch.yaml): server-side,
        # so the field manager dnsside owns the dnsside container and nothing else.
        kubectl --context "$k" apply --server-side --field-manager=dnsside \
            -k "$REPO_ROOT/deploy/overlays/sidecar"
        set_cluster_name "$k" kube-system "$c"
        if [[ "$IMAGE" != "$DEFAULT_IMAGE" ]]; then
            kubectl --context "$k" -n kube-system set image deployment/coredns dnsside="$IMAGE"
        fi
        # The shipped k3s example carries exactly the sidecar stanza.
        kubectl --context "$k" apply -f "$REPO_ROOT/deploy/coredns/coredns-custom-configmap.yaml"
        restart_coredns "$k"
    fi
done

log "dnsside deployed; run ./05-smoke.sh"
