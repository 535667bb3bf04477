"""The query path without a process or a socket: the `Responder` that `dnsside serve
--source FILE` would publish, built in-process, so a protocol test can call
``respond(bytes, udp) -> bytes`` as h11 is tested without sockets.

It is built the way `serve` builds it (the same Config defaults, index options and
responder, one full Replace then Synced), so its answers are the served ones byte for
byte but for the SOA serial, which starts at the clock.

`empty_index` is the one place the tests build an `Index` (every other helper here, and
every test that needs an index of its own records, goes through it), so a change to how
the index is built lands in one place; `ask` and `ask_name` are the one way a test asks
an in-process index or responder, or a `dnsside serve`, a question.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import dns.message

from dnsside.config import Config
from dnsside.core.build import make_index
from dnsside.core.index import Index, IndexOptions, Observer
from dnsside.dns.responder import Responder
from dnsside.model.events import Kind, Replace, Synced
from dnsside.model.linkerd import Record
from dnsside.sources.file import load_records
from testkit.rawdns import exchange, udp
from testkit.serve import Dnsside

# What a protocol test asks: the Responder in-process, or a `dnsside serve` over sockets.
Server = Responder | Dnsside
# What `ask` takes: those, or an index (its responder is asked).
Asked = Responder | Dnsside | Index


def empty_index(options: IndexOptions | None = None, *, zones: Sequence[str] = ("svc-global.",),
                mcs_zones: Sequence[str] = (), observer: Observer | None = None,
                catalog_zone: str | None = None, started: int = 0) -> Index:
    """An index nothing has been applied to, answering ``zones`` and the ``mcs_zones``
    (KEP-1645 names) under ``options`` (default: `IndexOptions()`), telling ``observer``
    (e.g. the server's `IndexReporter`, for its log lines and metrics) what each apply did."""
    options = IndexOptions() if options is None else options
    return make_index(replace(options, zones=tuple(zones), mcs_zones=tuple(mcs_zones),
                              catalog_zone=catalog_zone), observer, started=started)


def synced_index(records: Iterable[Record], options: IndexOptions | None = None, *,
                 kinds: Iterable[Kind] = frozenset(Kind), zones: Sequence[str] = ("svc-global.",),
                 mcs_zones: Sequence[str] = (), observer: Observer | None = None) -> Index:
    """`empty_index` after one full list of ``records`` (a Replace of ``kinds``) and the
    initial sync, as a source's first list leaves it."""
    index = empty_index(options, zones=zones, mcs_zones=mcs_zones, observer=observer)
    index.apply([Replace(frozenset(kinds), tuple(records)), Synced()])
    return index


def file_index(source: Path, *, cluster_name: str = "east", mcs_zones: Sequence[str] = (),
               allow_transfer: Sequence[str] = (), ixfr_history: int = 64,
               round_robin: str = "on", catalog_zone: str | None = None,
               started: int = 1795720000) -> Index:
    """The index `dnsside serve --source SOURCE --cluster-name CLUSTER_NAME` builds, synced
    (with ``allow_transfer``, keeping the zones' versions, the first cut at the sync; with
    ``catalog_zone``, its catalog, the process ``started`` at that second)."""
    config = Config(source=str(source), cluster_name=cluster_name)
    config.mcs_zones = tuple(mcs_zones)
    config.allow_transfer = tuple(allow_transfer)
    config.ixfr_history = ixfr_history
    config.round_robin = round_robin
    config.catalog_zone = catalog_zone
    index = make_index(config, started=started)
    records, warnings = load_records(source)
    assert not warnings, warnings
    index.apply([Replace(frozenset(Kind), tuple(records)), Synced()])
    assert index.responder.ready
    return index


def file_responder(source: Path, *, cluster_name: str = "east",
                   mcs_zones: Sequence[str] = (), round_robin: str = "on") -> Responder:
    """What `dnsside serve --source SOURCE --cluster-name CLUSTER_NAME` answers once synced."""
    return file_index(source, cluster_name=cluster_name, mcs_zones=mcs_zones,
                      round_robin=round_robin).responder


def ask(server: Asked, wire: bytes, transport: str = "udp") -> bytes:
    """The reply to ``wire`` over ``transport`` ("udp" or "tcp"); in-process, `respond`
    with the same size rule the transport gets."""
    if isinstance(server, Index):
        server = server.responder
    if isinstance(server, Responder):
        reply = server.respond(wire, transport == "udp")
    else:
        reply = exchange(server.host, server.port, wire, transport, timeout=3.0)
    assert reply is not None, "no reply"
    assert reply[:2] == wire[:2], "reply carries another ID"
    return reply


def ask_name(server: Asked, name: str, rdtype: str = "A", transport: str = "udp", *,
                edns: int | None = None) -> dns.message.Message:
    """The parsed reply to dnspython's query for ``name`` ``rdtype`` (with EDNS version
    ``edns``, none by default) over ``transport``: `ask` for a name rather than bytes."""
    query = dns.message.make_query(name, rdtype, use_edns=edns)
    return dns.message.from_wire(ask(server, query.to_wire(), transport))


def no_reply_udp(server: Server, wire: bytes) -> bool:
    """True when ``wire`` over UDP gets no reply (dropped, not answered)."""
    if isinstance(server, Responder):
        return server.respond(wire, True) is None
    return udp(server.host, server.port, wire, timeout=0.5) is None
