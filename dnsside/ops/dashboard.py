"""``dnsside install monitoring``'s Grafana dashboard: panels as data, and the JSON Grafana loads.

Each :class:`Panel` is what an operator reads (title, one-line description, unit) and the
PromQL behind it, the way :mod:`dnsside.ops.monitoring` holds the alerts; :func:`dashboard`
lays them out. The subtle point: the expressions are written against dnsside's metric names
(:mod:`dnsside.telemetry.metrics`) with Grafana's variables in them (``$namespace``, ``$pod``
inside label matchers, ``$__rate_interval`` as a range), so tests/ops/test_dashboard.py
replaces the variables before ``promtool check rules`` reads them, and compares the names
with what a running dnsside serves on /metrics.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dnsside.ops.manifests import LABELS, NAME, meta

SCHEMA_VERSION = 41  # Grafana 12's classic dashboard model; older ones migrate forward
UID = "dnsside"
FILE_NAME = "dnsside-dashboard.json"  # the ConfigMap key, and the file under deploy/monitoring/
SIDECAR_LABEL = {"grafana_dashboard": "1"}  # what Grafana's dashboard sidecar looks for
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Every series of the dashboard is one of the pods chosen in the variables.
SEL = 'namespace=~"$namespace", pod=~"$pod"'
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str  # Grafana's legendFormat: {{label}} is the series' label


@dataclass(frozen=True)
class Panel:
    title: str
    description: str  # one line, shown under the panel's (i)
    queries: tuple[Query, ...]
    unit: str  # Grafana's unit id: reqps, s, bytes, short, ...


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


def _rate(metric: str, by: str, where: str = "") -> str:
    labels = SEL + (", " + where if where else "")
    return f"sum by ({by}) (rate({metric}{{{labels}}}[{RATE}]))"


def _quantile(q: float, metric: str, by: str) -> str:
    return (f"histogram_quantile({q}, sum by (le{', ' + by if by else ''}) "
            f"(rate({metric}_bucket{{{SEL}}}[{RATE}])))")


ROWS: tuple[Row, ...] = (
    Row("Answers", (
        Panel("Answers by rcode",
              "DNS answers per second over UDP and TCP, by response code (SERVFAIL: no index "
              "yet; NXDOMAIN: a name not in the zone).",
              (Query(_rate("dnsside_queries_total", "rcode"), "{{rcode}}"),), "reqps"),
        Panel("Answers by query type",
              "DNS answers per second by query type and transport; AXFR and IXFR are zone "
              "transfers.",
              (Query(_rate("dnsside_queries_total", "qtype, transport"),
                     "{{qtype}} {{transport}}"),), "reqps"),
        Panel("Answer latency",
              "Packet received to answer handed to the socket, p50 and p99 by transport "
              "(dnsside_answer_duration_seconds: 1 query in 64 sampled on UDP, every one "
              "on TCP).",
              (Query(_quantile(0.5, "dnsside_answer_duration_seconds", "transport"),
                     "p50 {{transport}}"),
               Query(_quantile(0.99, "dnsside_answer_duration_seconds", "transport"),
                     "p99 {{transport}}")), "s"),
        Panel("Dropped connections",
              "Connections closed per second by --tcp/--http-max-connections(-per-client), "
              "by cap; the log names the client, once.",
              (Query(_rate("dnsside_dropped_connections_total", "reason"), "{{reason}}"),),
              "ops"),
        Panel("Open connections",
              "TCP (DNS) and HTTP connections open now, summed over the pods.",
              (Query(f"sum by (listener) (dnsside_open_connections{{{SEL}}})",
                     "{{listener}}"),), "short"),
        Panel("Dropped packets",
              "UDP packets dropped without an answer per second: unreadable header, or a "
              "response (QR=1).",
              (Query(_rate("dnsside_dropped_packets_total", "pod"), "{{pod}}"),), "pps"),
    )),
    Row("Index", (
        Panel("Members by cluster",
              "Members in the index by cluster and readiness (the largest count among the "
              "pods: they all index the same).",
              (Query(f"max by (cluster, ready) (dnsside_members{{{SEL}}})",
                     "{{cluster}} ready={{ready}}"),), "short"),
        Panel("Global services",
              "Global services in the index, per pod.",
              (Query(f"dnsside_global_services{{{SEL}}}", "{{pod}}"),), "short"),
        Panel("Sources synced",
              "1 once a pod's source delivered its initial state; before that it answers "
              "SERVFAIL (alert DnssideNotSynced).",
              (Query(f"min by (pod, source) (dnsside_source_synced{{{SEL}}})",
                     "{{pod}} {{source}}"),), "short"),
        Panel("Index update time",
              "p99 time to apply a batch of source events and re-encode the answers it "
              "touched.",
              (Query(_quantile(0.99, "dnsside_index_update_duration_seconds", ""),
                     "p99"),), "s"),
        Panel("Watch restarts",
              "Watch streams reopened per second by resource and reason (closed is the API "
              "server's routine close).",
              (Query(_rate("dnsside_watch_restarts_total", "resource, reason"),
                     "{{resource}} {{reason}}"),), "ops"),
        Panel("Locality spill",
              "local-first services answering beyond the local cluster: no-ready-local-member "
              "is the failover (alert DnssideLocalitySpilled).",
              (Query(f"max by (reason) (dnsside_locality_spilled_services{{{SEL}}})",
                     "{{reason}}"),), "short"),
        Panel("List retries and relists",
              "Lists of the API server that failed and are tried again, by resource and "
              "reason (the log tells each reason once), and full relists after 410 Expired.",
              (Query(_rate("dnsside_list_retries_total", "resource, reason"),
                     "retry {{resource}} {{reason}}"),
               Query(_rate("dnsside_relists_total", "resource"), "relist {{resource}}")),
              "ops"),
    )),
    Row("Links and gateways", (
        Panel("Link watch",
              "1 while Links are listed and the Link watch follows changes (the lowest among "
              "the pods; alert DnssideLinkWatchDown).",
              (Query(f"min(dnsside_links_readable{{{SEL}}})", "readable"),
               Query(f"min(dnsside_links_watch_up{{{SEL}}})", "watch up")), "short"),
        Panel("Gateways by probe state",
              "Linked clusters' gateways by the state of dnsside's probe: alive, failing "
              "(its gateway-routed members left out), never-answered.",
              (Query(f"count by (state) (max by (cluster, state) "
                     f"(dnsside_gateway_probe_state{{{SEL}}}) == 1)", "{{state}}"),),
              "short"),
        Panel("Gateway probe failures",
              "Failed gateway probes per second, by linked cluster.",
              (Query(_rate("dnsside_gateway_probes_total", "cluster", 'result="failure"'),
                     "{{cluster}}"),), "ops"),
        Panel("Orphaned mirrors and name clashes",
              "Mirrors of clusters no Link targets, and remote members hidden by a local "
              "member of the same name, by cluster.",
              (Query(f"max by (cluster) (dnsside_orphaned_mirrors{{{SEL}}})",
                     "orphaned {{cluster}}"),
               Query(f"max by (cluster) (dnsside_name_clashes{{{SEL}}})",
                     "clash {{cluster}}")), "short"),
        Panel("Links refused",
              "Links that do not count, by reason: outside-namespace (not in "
              "--links-namespace), duplicate (a second Link for a cluster).",
              (Query(f"max by (reason) (dnsside_links_refused{{{SEL}}})", "{{reason}}"),),
              "short"),
    )),
    Row("Linked clusters' APIs (--flat-network)", (
        Panel("Remote API synced",
              "1 while the linked cluster's API is watched and followed; 0 while lost, "
              "unsynced or its credentials fail (the lowest among the pods).",
              (Query(f"min by (cluster) (dnsside_remote_synced{{{SEL}}})",
                     "{{cluster}}"),), "short"),
        Panel("Remote credentials valid",
              "0 while the Link's credentials Secret is missing, unusable or rejected "
              "(alert DnssideRemoteCredentialsInvalid).",
              (Query(f"min by (cluster) (dnsside_remote_credentials_valid{{{SEL}}})",
                     "{{cluster}}"),), "short"),
        Panel("Remote throttled",
              "1 while the linked cluster's watch events would take more than "
              "--flat-network-index-share and are coalesced (alert DnssideRemoteThrottled).",
              # The gauge exists once a cluster was throttled: 0 for the others, by the
              # clusters dnsside follows (dnsside_remote_synced has one series each).
              (Query(f"max by (cluster) (dnsside_remote_throttled{{{SEL}}}) or "
                     f"0 * max by (cluster) (dnsside_remote_synced{{{SEL}}})",
                     "{{cluster}}"),), "short"),
        Panel("Remote events held",
              "Watch events per second held back while the linked cluster was throttled.",
              (Query(_rate("dnsside_remote_throttled_events_total", "cluster"),
                     "{{cluster}}"),), "ops"),
        Panel("Remote caps",
              "1 while the linked cluster is past a cap (its last complete list stands), and "
              "lists or watches cut short per second by cap.",
              (Query(f"max by (cluster) (dnsside_remote_capped{{{SEL}}})",
                     "capped {{cluster}}"),
               Query(_rate("dnsside_remote_cap_hits_total", "cluster, cap"),
                     "{{cluster}} {{cap}} cut/s")), "short"),
        Panel("Remote objects ignored",
              "Objects and watch events per second a linked cluster sent that are not "
              "served, by reason.",
              (Query(_rate("dnsside_remote_ignored_objects_total", "cluster, reason"),
                     "{{cluster}} {{reason}}"),), "ops"),
    )),
    Row("Zone transfers", (
        Panel("Transfers",
              "AXFR and IXFR asked for per second, by type and result (refused, busy, "
              "badtsig: a secondary that is not allowed or over a cap).",
              (Query(_rate("dnsside_transfers_total", "type, result"),
                     "{{type}} {{result}}"),), "ops"),
        Panel("NOTIFYs",
              "NOTIFYs sent to the --notify secondaries per second, by result (timeout: sent "
              "again).",
              (Query(_rate("dnsside_notifies_total", "result"), "{{result}}"),), "ops"),
        Panel("Transfer bytes",
              "Bytes of zone transfers sent per second.",
              (Query(_rate("dnsside_transfer_bytes_total", "pod"), "{{pod}}"),), "Bps"),
        Panel("Transfers under way",
              "Zone transfers being sent now, per pod (at most --transfer-max; while any is, "
              "UDP answers share the interpreter more often).",
              (Query(f"max by (pod) (dnsside_transfers_sending{{{SEL}}})", "{{pod}}"),),
              "short"),
        Panel("NOTIFY given up",
              "1 while dnsside has stopped sending NOTIFYs to a --notify secondary (every try "
              "of a version unanswered) until it answers one.",
              (Query(f"max by (target) (dnsside_notify_given_up{{{SEL}}})", "{{target}}"),),
              "short"),
    )),
    Row("Process", (
        Panel("Memory",
              "Resident memory per pod; docs/operating.md's sizing table gives the limit "
              "for a member count.",
              (Query(f"process_resident_memory_bytes{{{SEL}}}", "{{pod}}"),), "bytes"),
        Panel("CPU",
              "CPU time used per second, per pod (1 = one core).",
              (Query(f"rate(process_cpu_seconds_total{{{SEL}}}[{RATE}])", "{{pod}}"),),
              "short"),
        Panel("Heap trims",
              "Times per second freed heap memory was handed back to the system after "
              "changes (malloc_trim, --heap-trim-period); none where the mode is off.",
              (Query(_rate("dnsside_heap_trims_total", "pod"), "{{pod}}"),
               Query(f"max by (mode) (dnsside_heap_trim_mode{{{SEL}}}) == 1",
                     "mode {{mode}}")), "ops"),
    )),
)


def panels() -> tuple[Panel, ...]:
    return tuple(p for row in ROWS for p in row.panels)


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"{name}-values"}, "definition": query,
            "refresh": 2, "multi": True, "includeAll": True, "current": {}, "options": [],
            "sort": 1, "hide": 0, "regex": ""}


def _templating() -> dict[str, Any]:
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus", "current": {}, "options": [], "refresh": 1, "hide": 0,
         "regex": ""},
        _variable("namespace", "Namespace", "label_values(dnsside_build_info, namespace)"),
        _variable("pod", "Pod",
                  'label_values(dnsside_build_info{namespace=~"$namespace"}, pod)'),
    ]}


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": q.expr,
                "legendFormat": q.legend, "range": True}
               for i, q in enumerate(panel.queries)]
    return {
        "id": panel_id, "type": "timeseries", "title": panel.title,
        "description": panel.description, "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit, "min": 0}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom",
                               "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": targets,
    }


def dashboard() -> dict[str, Any]:
    """The dashboard in Grafana's classic JSON model: a row per :data:`ROWS` entry, its
    panels two to a line below it."""
    out: list[dict[str, Any]] = []
    y = 0
    for row in ROWS:
        out.append({"id": len(out) + 1, "type": "row", "title": row.title, "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        y += 1
        for i, panel in enumerate(row.panels):
            out.append(_panel(panel, len(out) + 1, 12 * (i % 2), y + 8 * (i // 2)))
        y += 8 * ((len(row.panels) + 1) // 2)
    return {
        "uid": UID, "title": "dnsside",
        "description": "dnsside's answers, index, Links, gateways, linked clusters' APIs, "
        "zone transfers and process. Generated by scripts/gen-deploy.py from "
        "dnsside/ops/dashboard.py (`dnsside install monitoring` prints it): edit that, "
        "not this.",
        "tags": ["dnsside", "dns", "linkerd-multicluster"],
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True,
        "graphTooltip": 1, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "timezone": "", "templating": _templating(),
        "annotations": {"list": []}, "links": [], "panels": out,
    }


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def dashboard_config_map(namespace: str, labels: Mapping[str, str] | None = None
                         ) -> dict[str, Any]:
    """The dashboard in a ConfigMap that Grafana's dashboard sidecar (grafana chart,
    kube-prometheus-stack) loads: it watches ConfigMaps labelled ``grafana_dashboard: "1"``."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": meta(f"{NAME}-dashboard", namespace,
                         {**LABELS, **SIDECAR_LABEL, **(labels or {})}),
        "data": {FILE_NAME: dashboard_json()},
    }
