#!/usr/bin/env bash
# Run deploy/demo/smoke-job.yaml in every cluster: a SRV query for
# _http._tcp.nginx-svc.default.svc-global through cluster DNS must return
# records, and those records must name members in all three clusters.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need kubectl

failed=0
for c in "${CLUSTERS[@]}"; do
    k="$(ctx "$c")"
    log "smoke test in $c"
    kubectl --context "$k" -n default delete job dnsside-smoke --ignore-not-found --wait=true
    kubectl --context "$k" create -f "$DEMO_DIR/smoke-job.yaml"

    # Poll instead of `kubectl wait --for=condition=Complete`, which would sit
    # out its whole timeout on a failed Job.
    ok=0
    for _ in $(seq 1 150); do
        status="$(kubectl --context "$k" -n default get job dnsside-smoke \
            -o jsonpath='{.status.succeeded}/{.status.failed}')"
        case "$status" in
            1/*) ok=1; break ;;
            */[1-9]*) break ;;
        esac
        sleep 2
    done
    logs="$(kubectl --context "$k" -n default logs job/dnsside-smoke || true)"
    printf '%s\n' "$logs"

    # SRV targets look like nginx-set-0.<cluster>.nginx-svc.default.svc-global.
    for member_cluster in "${CLUSTERS[@]}"; do
        if ! grep -q "\.$member_cluster\.nginx-svc\.default\.svc-global\.$" <<<"$logs"; then
            echo "missing: no SRV target in cluster $member_cluster" >&2
            ok=0
        fi
    done

    if [[ "$ok" == 1 ]]; then
        log "PASS in $c"
    else
        log "FAIL in $c"
        failed=1
    fi
done

exit "$failed"
