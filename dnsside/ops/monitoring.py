"""``dnsside install monitoring``: a PodMonitor, the PrometheusRule with dnsside's alerts,
and the Grafana dashboard's ConfigMap (:mod:`dnsside.ops.dashboard`).

The one thing to keep in step: the metric names and labels in :data:`ALERTS` are
:mod:`dnsside.telemetry.metrics`'s, and each alert's runbook line is repeated in
deploy/README.md under "Alerts" (tests/ops/test_install.py fires every alert with promtool).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dnsside.core.diagnosis import CREDENTIALS_FIX, LINK_WATCH_DOWN_FIX, UNLINK
from dnsside.ops.dashboard import dashboard_config_map
from dnsside.ops.manifests import LABELS, NAME, meta


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    runbook: str  # one line; deploy/README.md repeats it under "Alerts"


# Metric names are dnsside's (dnsside/telemetry/metrics.py):
# dnsside_gateway_probe_state{cluster,state} is 1 for the current state of each probed
# gateway (alive, failing, never-answered), and
# dnsside_orphaned_mirrors{cluster} counts the mirrors of clusters no Link targets.
ALERTS: tuple[Alert, ...] = (
    Alert("DnssideNotSynced",
          "max by (namespace, pod) (dnsside_source_synced) == 0", "5m", "critical",
          "dnsside {{ $labels.namespace }}/{{ $labels.pod }} has not synced with the API "
          "server for 5 minutes",
          "Before its first sync dnsside answers SERVFAIL; check its log for the list error "
          "(RBAC: `dnsside check --as system:serviceaccount:<ns>:dnsside`), then the API "
          "server."),
    Alert("DnssideWatchRestartsClimbing",
          "sum by (namespace, pod, resource) "
          "(increase(dnsside_watch_restarts_total{reason!=\"closed\"}[15m])) > 3",
          "15m", "warning",
          "dnsside keeps reopening its {{ $labels.resource }} watch",
          "Answers may lag behind the cluster; the `reason` label and the log say why "
          "(http-403: RBAC, http-429: API priority and fairness, timeout/connection: the "
          "network to the API server)."),
    Alert("DnssideGatewayProbeFailing",
          "max by (namespace, pod, cluster) "
          "(dnsside_gateway_probe_state{state=\"failing\"}) == 1", "1m", "warning",
          "the gateway of linked cluster {{ $labels.cluster }} fails dnsside's probe",
          "dnsside already leaves that cluster's gateway-routed members out; check the "
          "link with `linkerd multicluster gateways` and the remote gateway's pods."),
    Alert("DnssideOrphanedMirrors",
          "sum by (namespace, pod, cluster) (dnsside_orphaned_mirrors) > 0", "30m", "info",
          "mirrors of cluster {{ $labels.cluster }} match no Link",
          "A Link was deleted without `linkerd multicluster unlink`; dnsside ignores its "
          "mirrors; remove them with " + UNLINK.format(cluster="<cluster>") + "."),
    Alert("DnssideLinkWatchDown",
          "max by (namespace, pod) (dnsside_links_readable) == 1 and "
          "max by (namespace, pod) (dnsside_links_watch_up) == 0", "10m", "warning",
          "dnsside {{ $labels.namespace }}/{{ $labels.pod }} has not followed Link changes "
          "for 10 minutes",
          "A Link created or deleted meanwhile is not honoured yet: " + LINK_WATCH_DOWN_FIX
          + "."),
    # --flat-network: dnsside_remote_credentials_valid{cluster} is 0 while a Link's
    # credentials fail (Secret, kubeconfig, or the remote's 401/403), and
    # dnsside_remote_synced{cluster} is 0 while that cluster's API is not followed.
    Alert("DnssideRemoteCredentialsInvalid",
          "max by (namespace, pod, cluster) (dnsside_remote_credentials_valid) == 0", "2m",
          "warning",
          "dnsside cannot use the credentials of linked cluster {{ $labels.cluster }}",
          "The Link's clusterCredentialsSecret is missing or unreadable, its kubeconfig does "
          "not load, or the linked cluster rejects it (`dnsside check` and the log say "
          "which); that cluster's last-known pods are still answered. "
          + CREDENTIALS_FIX.format(cluster="<cluster>") + "."),
    Alert("DnssideRemoteNotSynced",
          "max by (namespace, pod, cluster) (dnsside_remote_synced) == 0 and "
          "max by (namespace, pod, cluster) (dnsside_remote_credentials_valid) == 1", "10m",
          "warning",
          "dnsside has not followed linked cluster {{ $labels.cluster }}'s API for 10 minutes",
          "The credentials are accepted but the remote API server cannot be listed or "
          "watched: the network from this cluster to its address (the kubeconfig's server), "
          "its availability, or API priority and fairness (429); dnsside's log names the "
          "failing request. Its last-known pods are still answered."),
    # --locality local-first (or the annotation): dnsside_locality_spilled_services{reason}
    # counts the services answering beyond the local cluster; reason no-ready-local-member
    # is the failure (no-local-service is a service that runs elsewhere only).
    Alert("DnssideLocalitySpilled",
          "max by (namespace, pod) "
          "(dnsside_locality_spilled_services{reason=\"no-ready-local-member\"}) > 0", "5m",
          "warning",
          "local-first services of dnsside {{ $labels.namespace }}/{{ $labels.pod }} have "
          "answered from other clusters for 5 minutes: no local member ready",
          "Their clients cross a gateway (latency, egress) until a local member is ready "
          "again; dnsside's log names each service when it spilled (`dnsside explain "
          "<svc>.<ns>.svc-global` says which clusters answer and why). Look at the local "
          "pods' readiness: `kubectl -n <ns> get endpointslices -l "
          "kubernetes.io/service-name=<svc>`."),
    Alert("DnssideLocalityAnnotationUnknown",
          "max by (namespace, pod) (dnsside_locality_unknown_annotations) > 0", "10m", "info",
          "a dnsside.io/locality annotation seen by dnsside {{ $labels.namespace }}/"
          "{{ $labels.pod }} is neither all nor local-first",
          "--locality applies to those services instead; the log and `dnsside check` name "
          "each Service and its value: set all or local-first, or remove it."),
    # dnsside_remote_throttled{cluster} is 1 while that cluster's watch events are coalesced
    # because applying them would take more than --flat-network-index-share of the time.
    Alert("DnssideRemoteThrottled",
          "max by (namespace, pod, cluster) (dnsside_remote_throttled) == 1", "15m", "warning",
          "dnsside has throttled linked cluster {{ $labels.cluster }}'s watch events for 15 "
          "minutes",
          "Its API server sends changes faster than dnsside applies them within "
          "--flat-network-index-share: its events are coalesced and applied as that share "
          "allows, so its answers lag; the other clusters' answers and the queries are not "
          "affected. Look at that cluster's churn (a controller rewriting EndpointSlices in a "
          "loop) or at who controls its API server; raise --flat-network-index-share only for "
          "a legitimate churn."),
    Alert("DnssideServfail",
          "sum by (namespace, pod) (rate(dnsside_queries_total{rcode=\"SERVFAIL\"}[5m])) "
          "/ sum by (namespace, pod) (rate(dnsside_queries_total[5m])) > 0.01", "5m",
          "critical",
          "dnsside {{ $labels.namespace }}/{{ $labels.pod }} answers SERVFAIL to more "
          "than 1% of queries",
          "dnsside answers SERVFAIL only while it has no index: see DnssideNotSynced, and "
          "`kubectl logs` of that pod for a crash-looping source."),
)


def prometheus_rule(namespace: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    rules = [
        {"alert": a.name, "expr": a.expr, "for": a.for_, "labels": {"severity": a.severity},
         "annotations": {"summary": a.summary, "runbook": a.runbook}}
        for a in ALERTS
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": meta(NAME, namespace, {**LABELS, **(labels or {})}),
        "spec": {"groups": [{"name": NAME, "rules": rules}]},
    }


def pod_monitor(mode: str, namespace: str, labels: Mapping[str, str] | None = None
                ) -> dict[str, Any]:
    selector = dict(LABELS) if mode == "standalone" else {"k8s-app": "kube-dns"}
    port = "metrics" if mode == "standalone" else "dnsside-http"
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": meta(NAME, namespace, {**LABELS, **(labels or {})}),
        "spec": {
            "selector": {"matchLabels": selector},
            "podMetricsEndpoints": [{"port": port, "path": "/metrics"}],
        },
    }


def monitoring(mode: str, namespace: str, labels: Mapping[str, str] | None = None,
               dashboard_namespace: str | None = None) -> list[dict[str, Any]]:
    """``dashboard_namespace``: where Grafana's dashboard sidecar looks (default
    ``namespace``; the sidecar watches only Grafana's own unless told ALL)."""
    return [pod_monitor(mode, namespace, labels), prometheus_rule(namespace, labels),
            dashboard_config_map(dashboard_namespace or namespace, labels)]
