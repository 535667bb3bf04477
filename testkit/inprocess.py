"""The query path without a process or a socket: the `Responder` that `dnsside serve
--source FILE` would publish, built in-process, so a protocol test can call
``respond(bytes, udp) -> bytes`` as h11 is tested without sockets.

It is built the way `serve` builds it (the same Config defaults, index options and
responder, one full Replace then Synced), so its answers are the served ones byte for
byte but for the SOA serial, which starts at the clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dnsside.config import Config
from dnsside.core.build import make_index
from dnsside.core.index import Index
from dnsside.dns.responder import Responder
from dnsside.model.events import Kind, Replace, Synced
from dnsside.sources.file import load_records
from testkit.rawdns import exchange, udp
from testkit.serve import Dnsside

# What a protocol test asks: the Responder in-process, or a `dnsside serve` over sockets.
Server = Responder | Dnsside


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


def ask(server: Server, wire: bytes, transport: str = "udp") -> bytes:
    """The reply to ``wire`` over ``transport`` ("udp" or "tcp"); in-process, `respond`
    with the same size rule the transport gets."""
    if isinstance(server, Responder):
        reply = server.respond(wire, transport == "udp")
    else:
        reply = exchange(server.host, server.port, wire, transport, timeout=3.0)
    assert reply is not None, "no reply"
    assert reply[:2] == wire[:2], "reply carries another ID"
    return reply


def no_reply_udp(server: Server, wire: bytes) -> bool:
    """True when ``wire`` over UDP gets no reply (dropped, not answered)."""
    if isinstance(server, Responder):
        return server.respond(wire, True) is None
    return udp(server.host, server.port, wire, timeout=0.5) is None
