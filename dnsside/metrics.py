"""Prometheus metrics, all in one registry so tests can start several servers.

Counters on the query path are bumped per query; everything else is set when
the index or a source changes. The answer latency histogram is observed on the
slow path and sampled on the fast path (see :mod:`dnsside.server`), so that
measuring does not cost more than answering.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from dnsside import __version__

REGISTRY = CollectorRegistry(auto_describe=True)

QUERIES = Counter(
    "dnsside_queries",
    "DNS queries answered, by query type, response code and transport.",
    ["qtype", "rcode", "transport"],
    registry=REGISTRY,
)
DROPPED = Counter(
    "dnsside_dropped_packets",
    "Packets dropped without an answer (unreadable header, QR=1, connection cap).",
    ["reason"],
    registry=REGISTRY,
)
ANSWER_SECONDS = Histogram(
    "dnsside_answer_duration_seconds",
    "Time from packet received to answer handed to the socket (sampled on the fast path).",
    ["transport"],
    buckets=(1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 2.5e-2),
    registry=REGISTRY,
)
GLOBAL_SERVICES = Gauge(
    "dnsside_global_services", "Global services in the index.", registry=REGISTRY
)
MEMBERS = Gauge(
    "dnsside_members",
    "Members in the index, by cluster and readiness.",
    ["cluster", "ready"],
    registry=REGISTRY,
)
INDEX_UPDATE_SECONDS = Histogram(
    "dnsside_index_update_duration_seconds",
    "Time to apply a batch of source events and re-encode the answers it touched.",
    buckets=(1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 1, 10, 60),
    registry=REGISTRY,
)
ZONE_SERIAL = Gauge("dnsside_zone_serial", "SOA serial of the served zones.", registry=REGISTRY)
SOURCE_SYNCED = Gauge(
    "dnsside_source_synced",
    "1 once the source delivered its initial state.",
    ["source"],
    registry=REGISTRY,
)
SOURCE_LAST_EVENT = Gauge(
    "dnsside_source_last_event_timestamp_seconds",
    "Unix time of the last event from the source.",
    ["source"],
    registry=REGISTRY,
)
WATCH_RESTARTS = Counter(
    "dnsside_watch_restarts",
    "Watch streams restarted, by resource and reason.",
    ["resource", "reason"],
    registry=REGISTRY,
)
RELISTS = Counter(
    "dnsside_relists", "Full relists of a resource (410 Expired).", ["resource"], registry=REGISTRY
)
RELOAD_ERRORS = Counter(
    "dnsside_file_reload_errors",
    "File source reloads that failed and kept the previous state.",
    registry=REGISTRY,
)
BUILD_INFO = Info("dnsside_build", "Version of dnsside.", registry=REGISTRY)
BUILD_INFO.info({"version": __version__})
