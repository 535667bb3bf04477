#!/usr/bin/env bash
# The same headless, exported nginx StatefulSet in every cluster, then wait
# until each cluster has mirrored the other two.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need kubectl

for c in "${CLUSTERS[@]}"; do
    log "deploying nginx-set / nginx-svc in $c"
    kubectl --context "$(ctx "$c")" apply -f "$DEMO_DIR/workload.yaml"
done

for c in "${CLUSTERS[@]}"; do
    kubectl --context "$(ctx "$c")" -n default rollout status statefulset/nginx-set --timeout=300s
done

# Headless mirroring creates nginx-svc-<peer> (headless) plus one ClusterIP
# Service per remote pod, nginx-set-<n>-<peer>.
for c in "${CLUSTERS[@]}"; do
    while read -r peer; do
        log "waiting in $c for the mirror of $peer"
        for _ in $(seq 1 90); do
            if kubectl --context "$(ctx "$c")" -n default get service "nginx-set-1-$peer" >/dev/null 2>&1; then
                break
            fi
            sleep 2
        done
        kubectl --context "$(ctx "$c")" -n default get service "nginx-svc-$peer" "nginx-set-0-$peer" "nginx-set-1-$peer"
    done < <(peers_of "$c")
done
