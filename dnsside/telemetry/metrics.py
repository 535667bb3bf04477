"""Prometheus metrics, all in one registry so tests can start several servers.

Counters on the query path are bumped per query; everything else is set when
the index or a source changes. The answer latency histogram is observed on the
slow path and sampled on the fast path (see :mod:`dnsside.serving.server`), so that
measuring does not cost more than answering.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from dnsside import __version__
from dnsside.dns.responder import COUNTED_QTYPES

if TYPE_CHECKING:
    from dnsside.dns.responder import Responder

# Label values from known sets only: a value a client could choose (a QTYPE, an RCODE we
# never send) is "other", so the series stay a few dozen whatever is asked (issue 33).
OTHER = "other"
_RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED",
           9: "NOTAUTH", 16: "BADVERS"}


class QueryCollector(Collector):
    """`dnsside_queries_total` and `dnsside_dropped_packets_total`, read from the
    responder's plain counters at scrape time so the query path never calls into
    prometheus-client."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder

    def collect(self) -> Iterator[CounterMetricFamily]:
        queries = CounterMetricFamily(
            "dnsside_queries", "DNS queries answered, by query type, response code and transport.",
            labels=["qtype", "rcode", "transport"],
        )
        for transport, counts in (("udp", self.responder.udp_counts),
                                  ("tcp", self.responder.tcp_counts)):
            series: dict[tuple[str, str], int] = {}
            for (qtype, rcode), n in list(counts.items()):
                labels = (COUNTED_QTYPES.get(qtype, OTHER), _RCODES.get(rcode, OTHER))
                series[labels] = series.get(labels, 0) + n
            for (qtype_name, rcode_name), n in series.items():
                queries.add_metric([qtype_name, rcode_name, transport], n)
        yield queries
        dropped = CounterMetricFamily(
            "dnsside_dropped_packets",
            "Packets dropped without an answer: unreadable header, or a response (QR=1).",
        )
        dropped.add_metric([], self.responder.dropped)
        yield dropped


def watch_responder(responder: Responder) -> QueryCollector:
    """Export ``responder``'s counters (replacing a previous responder's, if any)."""
    global _collector
    if _collector is not None:
        REGISTRY.unregister(_collector)
    _collector = QueryCollector(responder)
    REGISTRY.register(_collector)
    return _collector


_collector: QueryCollector | None = None

REGISTRY = CollectorRegistry(auto_describe=True)
# process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds...: read from
# /proc at scrape time (nothing elsewhere), for the memory limit of docs/operating.md's sizing.
ProcessCollector(registry=REGISTRY)

DROPPED = Counter(
    "dnsside_dropped_connections",
    "Connections closed to make room for a new one, by reason: tcp_client_cap, "
    "http_client_cap (the client, an IPv4 address or an IPv6 /64, held its "
    "--tcp/--http-max-connections-per-client: its quietest connection went), "
    "tcp_connection_cap, http_connection_cap (every slot of --tcp/--http-max-connections "
    "was taken: the quietest connection of the client holding the most went).",
    ["reason"],
    registry=REGISTRY,
)
OPEN_CONNECTIONS = Gauge(
    "dnsside_open_connections",
    "Connections open now, by listener (tcp: DNS over TCP; http).",
    ["listener"],
    registry=REGISTRY,
)
for _listener in ("tcp", "http"):  # every series from the start, at 0
    OPEN_CONNECTIONS.labels(listener=_listener)
    for _cap in ("client_cap", "connection_cap"):
        DROPPED.labels(reason=f"{_listener}_{_cap}")
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
TRANSFERS = Counter(
    "dnsside_transfers",
    "Zone transfers asked for over TCP, by type (axfr, ixfr) and result (ok; full: an IXFR "
    "the history did not reach, answered with the whole zone; refused: the client is not in "
    "--allow-transfer, or no transfer is allowed; busy: refused, --transfer-max or "
    "--transfer-max-per-client transfers were under way; badtsig: no valid TSIG with "
    "--tsig-key-file; error: no version yet, or a record that cannot be transferred; "
    "formerr: an IXFR without the client's SOA).",
    ["type", "result"],
    registry=REGISTRY,
)
TRANSFER_BYTES = Counter(
    "dnsside_transfer_bytes",
    "Bytes of the zone transfers sent (the DNS messages, without TCP's length prefixes).",
    registry=REGISTRY,
)
TRANSFERS_SENDING = Gauge(
    "dnsside_transfers_sending",
    "Zone transfers being sent now (from the request to the last message written); while "
    "any is, the interpreter's switch interval is lowered to 0.5 ms so that UDP answers do "
    "not wait behind the transfer for the GIL.",
    registry=REGISTRY,
)
for _type in ("axfr", "ixfr"):  # every series from the start, at 0
    for _result in ("ok", "refused", "busy", "badtsig", "error", "formerr"):
        TRANSFERS.labels(type=_type, result=_result)
TRANSFERS.labels(type="ixfr", result="full")
NOTIFIES = Counter(
    "dnsside_notifies",
    "NOTIFY messages sent to the --notify secondaries, by result (ok: answered; error: "
    "answered with an error; timeout: not answered in time, sent again; given_up: the "
    "last of a version's tries went unanswered, none is sent until the next version).",
    ["result"],
    registry=REGISTRY,
)
for _result in ("ok", "error", "timeout", "given_up"):
    NOTIFIES.labels(result=_result)
NOTIFY_GIVEN_UP = Gauge(
    "dnsside_notify_given_up",
    "1 while dnsside has stopped sending NOTIFYs to this --notify secondary (every try of "
    "a version unanswered), until it answers one; else 0.",
    ["target"],
    registry=REGISTRY,
)
LOCALITY_SPILLED = Gauge(
    "dnsside_locality_spilled_services",
    "Global services under --locality local-first (or the annotation) whose own name answers "
    "beyond the local cluster, by why: no-ready-local-member, no-local-service.",
    ["reason"],
    registry=REGISTRY,
)
LOCALITY_UNKNOWN = Gauge(
    "dnsside_locality_unknown_annotations",
    "Global services whose local Service's dnsside.io/locality annotation is neither all nor "
    "local-first (--locality applies to them).",
    registry=REGISTRY,
)
ZONE_SERIAL = Gauge("dnsside_zone_serial", "SOA serial of the served zones: the last version "
                    "cut, the Unix time of its second.", registry=REGISTRY)
ZONE_HISTORY_VERSIONS = Gauge(
    "dnsside_zone_history_versions",
    "Zone differences kept to answer IXFR (--ixfr-history), summed over the zones.",
    registry=REGISTRY,
)
ZONE_HISTORY_RECORDS = Gauge(
    "dnsside_zone_history_records",
    "Records held in those differences (removed and added), summed over the zones.",
    registry=REGISTRY,
)
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
LIST_RETRIES = Counter(
    "dnsside_list_retries",
    "Lists that failed and are tried again, by resource and reason (logged once per reason).",
    ["resource", "reason"],
    registry=REGISTRY,
)
RELOAD_ERRORS = Counter(
    "dnsside_file_reload_errors",
    "File source reloads that failed and kept the previous state.",
    registry=REGISTRY,
)
BUILD_INFO = Info("dnsside_build", "Version of dnsside.", registry=REGISTRY)
BUILD_INFO.info({"version": __version__})
LINKS_READABLE = Gauge(
    "dnsside_links_readable",
    "1 once Links have been listed (mirrors of unlinked clusters are left out; the last "
    "complete list stands through API faults), 0 while they never could be (CRD missing, "
    "RBAC): then nothing is filtered.",
    registry=REGISTRY,
)
LINKS_WATCH_UP = Gauge(
    "dnsside_links_watch_up",
    "1 while the Link watch follows changes, 0 while it is down (an API fault, a relist): "
    "the last complete Link list stands meanwhile.",
    registry=REGISTRY,
)
LINKS_LISTED = Gauge(
    "dnsside_links_last_complete_timestamp_seconds",
    "When the Link list was last known complete: the last list, or the moment the Link "
    "watch went down (0: never listed).",
    registry=REGISTRY,
)
LINKS_REFUSED = Gauge(
    "dnsside_links_refused",
    "Links the source delivered that do not count, by reason: outside-namespace (not in "
    "--links-namespace: a file dump's; the API is only asked for that namespace), duplicate "
    "(a second Link for a cluster another Link, created first, keeps).",
    ["reason"],
    registry=REGISTRY,
)
REMOTE_SYNCED = Gauge(
    "dnsside_remote_synced",
    "--flat-network: 1 while the linked cluster's API is watched and followed, 0 before its "
    "first sync, while it is lost (its last-known members stand) or its credentials fail.",
    ["cluster"],
    registry=REGISTRY,
)
REMOTE_CREDENTIALS_VALID = Gauge(
    "dnsside_remote_credentials_valid",
    "--flat-network: 0 while the Link's credentials Secret is missing or unreadable, its "
    "kubeconfig does not load, or the linked cluster rejects it; 1 otherwise.",
    ["cluster"],
    registry=REGISTRY,
)
REMOTE_TLS_WEAKENED = Gauge(
    "dnsside_remote_tls_weakened",
    "--flat-network: 1 while the Link's kubeconfig weakens TLS to the linked cluster "
    "(insecure-skip-tls-verify, a plain http:// server or a proxy-url, which only "
    "--insecure-remote-tls allows); 0 otherwise.",
    ["cluster"],
    registry=REGISTRY,
)
REMOTE_CAPPED = Gauge(
    "dnsside_remote_capped",
    "--flat-network: 1 while the linked cluster is past one of its caps (endpoints, objects, "
    "bytes of one object or list page, seconds of one list or watch event): its last "
    "complete list stands, and it is retried; 0 otherwise.",
    ["cluster"],
    registry=REGISTRY,
)
REMOTE_CAP_HITS = Counter(
    "dnsside_remote_cap_hits_total",
    "--flat-network: lists and watches of a linked cluster cut short by a cap, by cluster and "
    "cap (endpoints, objects, bytes, time).",
    ["cluster", "cap"],
    registry=REGISTRY,
)
REMOTE_IGNORED = Counter(
    "dnsside_remote_ignored_objects_total",
    "--flat-network: objects and watch events a linked cluster sent that are not served, by "
    "cluster and reason (namespace: not one of --flat-network-namespaces; invalid: an object "
    "that cannot be used; unknown-type: a watch event of no type Kubernetes sends; no-name: "
    "a DELETED event without namespace or name; not-object: a list item that is no object).",
    ["cluster", "reason"],
    registry=REGISTRY,
)
REMOTE_THROTTLED = Gauge(
    "dnsside_remote_throttled",
    "--flat-network: 1 while applying the linked cluster's watch events takes more than "
    "--flat-network-index-share of the time: they are coalesced and applied as that share "
    "allows, 1 to 20 seconds apart; 0 otherwise.",
    ["cluster"],
    registry=REGISTRY,
)
REMOTE_THROTTLED_EVENTS = Counter(
    "dnsside_remote_throttled_events_total",
    "--flat-network: watch events of a linked cluster held while it was throttled (each "
    "applied a second late at most, or replaced by a later state of its object).",
    ["cluster"],
    registry=REGISTRY,
)
ORPHANED_MIRRORS = Gauge(
    "dnsside_orphaned_mirrors",
    "Mirrors of a cluster no Link targets (left behind by a deleted Link), by cluster.",
    ["cluster"],
    registry=REGISTRY,
)
NAME_CLASHES = Gauge(
    "dnsside_name_clashes",
    "Remote members left out because a local member has the same name, by cluster.",
    ["cluster"],
    registry=REGISTRY,
)
UNSAFE_ADDRESSES = Gauge(
    "dnsside_unsafe_addresses",
    "Addresses left out of every answer because no pod or Service can own them, by the "
    "cluster that sent them and reason: unspecified, loopback, link-local, multicast, "
    "broadcast (IPv6 forms carrying an IPv4 address count as that address).",
    ["cluster", "reason"],
    registry=REGISTRY,
)
INVALID_NAMES = Gauge(
    "dnsside_invalid_names",
    "Members and ports left out because a name they would publish is not a DNS name (a "
    "hostname or port name that is no label, a protocol other than TCP, UDP, SCTP, a name "
    "over 255 octets), by cluster.",
    ["cluster"],
    registry=REGISTRY,
)
CONFIG_WARNINGS = Gauge(
    "dnsside_config_warning",
    "1 while a configuration mistake is detected: default-cluster-name, cluster-name-clash, "
    "no-mirror-slices.",
    ["warning"],
    registry=REGISTRY,
)
GATEWAY_STATE = Gauge(
    "dnsside_gateway_probe_state",
    "dnsside's probe of each link's gateway, one series per state set to 1: alive, failing, "
    "never-answered (not acted on).",
    ["cluster", "state"],
    registry=REGISTRY,
)
GATEWAY_PROBES = Counter(
    "dnsside_gateway_probes",
    "Gateway probes sent, by cluster and result (success, failure).",
    ["cluster", "result"],
    registry=REGISTRY,
)
HEAP_TRIM_MODE = Gauge(
    "dnsside_heap_trim_mode",
    "How freed heap memory goes back to the system after changes, one series set to 1: "
    "glibc (malloc_trim, at most once per --heap-trim-period) or off (no malloc_trim in "
    "this C library, or --heap-trim-period 0).",
    ["mode"],
    registry=REGISTRY,
)
HEAP_TRIMS = Counter(
    "dnsside_heap_trims",
    "Times freed heap memory was handed back to the system (malloc_trim) after changes.",
    registry=REGISTRY,
)
