"""`dnsside check --dns HOST:PORT`: does dnsside answer what the API objects say it should?

The checks ask the server over TCP (``kubectl port-forward`` carries TCP only): the SOA of
each zone of the ConfigMap's ``DNSSIDE_ZONE``, then one global service. Which service,
and how many addresses it should have, is decided by dnsside's own index built from the
objects the other checks read, so check and serve cannot disagree about what a global
service is: the one with ready members in the most clusters is asked for. The checks
run over a :class:`DnsServer` that :mod:`dnsside.ops.check` hands them; they read no API.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from dnsside.config import flag, zones_from_env
from dnsside.model.linkerd import LinkRecord, Record, ServiceRecord, SliceRecord
from dnsside.netvalues import split_hostport
from dnsside.ops.checker import Finding, Findings, ForEach, Step, check, once

ZONE_KEY = flag("--zone").env
_REACH = ("is dnsside reachable at {address}? e.g. `kubectl -n {namespace} port-forward "
          "svc/dnsside 5353:53` (TCP only: check queries over TCP)")
QUERY_ERRORS = (OSError, TimeoutError, ValueError)  # no answer: unreachable, cut, garbled


@dataclass
class DnsServer:
    """The server to ask, and what the API objects say it should answer."""

    address: str  # --dns, as given
    namespace: str  # where dnsside runs (the port-forward hint names it)
    zone_setting: str  # the ConfigMap's DNSSIDE_ZONE
    cluster_name: str
    services: Sequence[ServiceRecord]
    slices: Sequence[SliceRecord]
    links: Sequence[LinkRecord] | None
    timeout: float
    locality: str = "all"  # the ConfigMap's DNSSIDE_LOCALITY: what the server answers
    host: str = field(init=False, default="")
    port: int = field(init=False, default=0)
    address_error: str = field(init=False, default="")
    zones: tuple[str, ...] = field(init=False, default=())
    zones_error: str = field(init=False, default="")

    def __post_init__(self) -> None:
        try:
            self.host, self.port = split_hostport(self.address, 53)
        except ValueError as exc:
            self.address_error = f"--dns {self.address!r}: {exc}"
            return
        try:
            self.zones = zones_from_env(self.zone_setting)
        except ValueError as exc:
            self.zones_error = str(exc)

    @property
    def reach(self) -> dict[str, str]:
        """The facts of the hint for a server that does not answer."""
        return {"address": self.address, "namespace": self.namespace}

    @cached_property
    def pick(self) -> tuple[str, str, int] | None:
        """The global service to ask for: (name, A or AAAA, how many addresses)."""
        if not self.zones:
            return None
        return _pick_service(self.services, self.slices, self.links, self.cluster_name,
                             self.zones[0], self.locality)

    @once
    async def answer(self) -> tuple[str, list[str]] | BaseException | None:
        """The answer for :attr:`pick`, or why there is none (None: nothing to ask)."""
        if self.pick is None:
            return None
        try:
            return await query(self.host, self.port, self.pick[0], self.pick[1], self.timeout)
        except QUERY_ERRORS as exc:
            return exc


@dataclass
class ZoneQuery:
    server: DnsServer
    zone: str

    @once
    async def soa(self) -> tuple[str, list[str]] | BaseException:
        try:
            return await query(self.server.host, self.server.port, self.zone, "SOA",
                               self.server.timeout)
        except QUERY_ERRORS as exc:
            return exc


@check("dns-address", "--dns {address}", "{error}")
async def dns_address(server: DnsServer) -> Findings:
    if server.address_error:
        yield Finding(False, address=server.address, error=server.address_error)


@check("dns-zones", "the zones of " + ZONE_KEY + " are domain names", "{error}")
async def dns_zones(server: DnsServer) -> Findings:
    if server.zones_error:
        yield Finding(False, error=server.zones_error)


async def each_zone(server: DnsServer) -> AsyncGenerator[ZoneQuery, None]:
    for zone in server.zones:
        yield ZoneQuery(server, zone)


@check("dns-soa-reach", "SOA of {zone} answers through {address}", "{error}; " + _REACH)
async def dns_soa_reach(q: ZoneQuery) -> Findings:
    answer = await q.soa()
    if isinstance(answer, BaseException):
        yield Finding(False, zone=q.zone, error=_describe(answer), **q.server.reach)


@check("dns-soa", "SOA of {zone} answers through {address}{result}",
       "SERVFAIL means dnsside has not synced yet; REFUSED means the zone is not one it "
       "serves (its " + ZONE_KEY + ")")
async def dns_soa(q: ZoneQuery) -> Findings:
    answer = await q.soa()
    if not isinstance(answer, BaseException):
        rcode, records = answer
        serial = f", serial {records[0].split()[2]}" if records else ""
        yield Finding(rcode == "NOERROR" and bool(records), zone=q.zone,
                      address=q.server.address, result=f" ({rcode}{serial})")


@check("dns-service", "a global service answers",
       "no global service with a ready member in the cluster to ask for: export a service "
       "(mirror.linkerd.io/exported) and link the clusters")
async def dns_service(server: DnsServer) -> Findings:
    if server.zones and server.pick is None:
        yield Finding(False)


@check("dns-answer-reach", "{name} {qtype} answers", "{error}; " + _REACH)
async def dns_answer_reach(server: DnsServer) -> Findings:
    answer = await server.answer()
    if server.pick is not None and isinstance(answer, BaseException):
        name, qtype, _ = server.pick
        yield Finding(False, name=name, qtype=qtype, error=_describe(answer), **server.reach)


@check("dns-answer", "{name} {qtype} answers{result}",
       "dnsside and the API disagree: `dnsside explain` (or /debug/explain on the pod) says "
       "member by member why")
async def dns_answer(server: DnsServer) -> Findings:
    answer = await server.answer()
    if server.pick is not None and isinstance(answer, tuple):
        (name, qtype, expected), (rcode, records) = server.pick, answer
        yield Finding(rcode == "NOERROR" and bool(records), name=name, qtype=qtype,
                      result=f" ({rcode}, {len(records)} records; the API objects give "
                      f"{expected})")


CHECKS: tuple[Step[DnsServer], ...] = (
    dns_address, dns_zones, ForEach(each_zone, (dns_soa_reach, dns_soa)),
    dns_service, dns_answer_reach, dns_answer)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _pick_service(services: Sequence[ServiceRecord], slices: Sequence[SliceRecord],
                  links: Sequence[LinkRecord] | None, cluster_name: str, zone: str,
                  locality: str = "all") -> tuple[str, str, int] | None:
    """A global service with ready members, as dnsside's own index builds it from these
    objects: (name to ask, A or AAAA, how many addresses the objects give). Under
    ``local-first`` the addresses counted are the ones the name answers."""
    from dnsside.core.build import make_index
    from dnsside.core.index import IndexOptions
    from dnsside.core.locality import answering
    from dnsside.model.events import Kind, Replace, Synced
    from dnsside.model.locality import Locality

    known = locality in tuple(Locality)
    index = make_index(IndexOptions(cluster_name=cluster_name.lower(), zones=(zone,),
                                    locality=Locality(locality) if known else Locality.ALL))
    records: list[Record] = [*services, *slices, *(links or [])]
    kinds = {Kind.SERVICE, Kind.SLICE} | ({Kind.LINK} if links is not None else set())
    index.apply([Replace(frozenset(kinds), tuple(records)), Synced()])
    best: tuple[int, str, str, int] | None = None
    for (namespace, name), gs in sorted(index.global_services.items()):
        ready = [m for m in answering(gs, gs.members) if m.ready]
        v4 = sum(1 for m in ready for a in m.addresses if ":" not in a)
        v6 = sum(1 for m in ready for a in m.addresses if ":" in a)
        if not v4 and not v6:
            continue
        clusters = len({m.cluster for m in ready})
        qtype, count = ("A", v4) if v4 else ("AAAA", v6)
        if best is None or clusters > best[0]:
            best = (clusters, f"{name}.{namespace}.{zone}", qtype, count)
    return None if best is None else (best[1], best[2], best[3])


_RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


async def query(host: str, port: int, name: str, qtype: str, timeout: float
                ) -> tuple[str, list[str]]:
    """One query over TCP: (rcode, answer RRs)."""
    from dnslib import QTYPE, DNSRecord

    q = DNSRecord.question(name, qtype)
    q.header.id = random.randrange(1 << 16)
    wire = q.pack()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(struct.pack("!H", len(wire)) + wire)
        await writer.drain()
        size = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), timeout))[0]
        data = await asyncio.wait_for(reader.readexactly(size), timeout)
    except asyncio.IncompleteReadError:
        raise ValueError("the server closed the connection without answering") from None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    reply = DNSRecord.parse(data)
    if reply.header.id != q.header.id:
        raise ValueError("the answer's ID does not match the query's")
    want = getattr(QTYPE, qtype)
    answers = [str(rr.rdata) for rr in reply.rr if rr.rtype == want]
    return _RCODES.get(reply.header.rcode, str(reply.header.rcode)), answers


__all__ = ["CHECKS", "DnsServer", "query"]
