"""`dnsside check --dns HOST:PORT`: does dnsside answer what the API objects say it should?

The checks ask the server over TCP (``kubectl port-forward`` carries TCP only): the SOA of
each zone of the ConfigMap's ``DNSSIDE_ZONE`` and ``DNSSIDE_MCS_ZONE``, then one global
service in the first zone of each. Which service, its name and how many addresses it
should have are decided by dnsside's own index built from the objects the other checks
read, with the same zones, so check and serve cannot disagree about what a global service
is or what its name answers: the one with ready members in the most clusters (in an MCS
zone, of those its names have: an exported one) is asked for. The checks run over a
:class:`DnsServer` that :mod:`dnsside.ops.check` hands them; they read no API.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from dnsside.config import flag, normal_zones, zones_from_env
from dnsside.dns.names import service_name
from dnsside.dns.wire import to_text
from dnsside.model.linkerd import LinkRecord, Record, ServiceRecord, SliceRecord
from dnsside.netvalues import split_hostport
from dnsside.ops.checker import Finding, Findings, ForEach, Step, check, once

if TYPE_CHECKING:
    from dnsside.dns.responder import Responder

ZONE_KEY, MCS_ZONE = flag("--zone").env, flag("--mcs-zone")
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
    mcs_zone_setting: str = ""  # the ConfigMap's DNSSIDE_MCS_ZONE
    host: str = field(init=False, default="")
    port: int = field(init=False, default=0)
    address_error: str = field(init=False, default="")
    zones: tuple[str, ...] = field(init=False, default=())  # --zone's, then --mcs-zone's
    mcs_zones: tuple[str, ...] = field(init=False, default=())
    zones_error: str = field(init=False, default="")

    def __post_init__(self) -> None:
        try:
            self.host, self.port = split_hostport(self.address, 53)
        except ValueError as exc:
            self.address_error = f"--dns {self.address!r}: {exc}"
            return
        try:
            plain = zones_from_env(self.zone_setting)
            self.mcs_zones = normal_zones(MCS_ZONE.from_env(self.mcs_zone_setting),
                                          MCS_ZONE.env)
            self.zones = (*plain, *self.mcs_zones)
        except ValueError as exc:
            self.zones_error = str(exc)

    @property
    def reach(self) -> dict[str, str]:
        """The facts of the hint for a server that does not answer."""
        return {"address": self.address, "namespace": self.namespace}

    @cached_property
    def picks(self) -> tuple[Pick | None, ...]:
        """The global service to ask for in the first ``--zone`` and, with one, in the first
        ``--mcs-zone`` (None where no service has ready members)."""
        if not self.zones:
            return ()
        mcs = self.mcs_zones[:1]
        return _pick_service(self.services, self.slices, self.links, self.cluster_name,
                             self.zones[0], self.locality, mcs)

    @property
    def pick(self) -> Pick | None:
        """The global service asked for in the first ``--zone``."""
        return self.picks[0] if self.picks else None


class Pick(NamedTuple):
    """One name to ask: (name, A or AAAA, how many addresses the API objects give)."""

    name: str
    qtype: str
    expected: int


@dataclass
class ServiceQuery:
    server: DnsServer
    pick: Pick

    @once
    async def answer(self) -> tuple[str, list[str]] | BaseException:
        """The answer for :attr:`pick`, or why there is none."""
        try:
            return await query(self.server.host, self.server.port, self.pick.name,
                               self.pick.qtype, self.server.timeout)
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


async def each_service(server: DnsServer) -> AsyncGenerator[ServiceQuery, None]:
    for pick in server.picks:
        if pick is not None:
            yield ServiceQuery(server, pick)


@check("dns-answer-reach", "{name} {qtype} answers", "{error}; " + _REACH)
async def dns_answer_reach(q: ServiceQuery) -> Findings:
    answer = await q.answer()
    if isinstance(answer, BaseException):
        yield Finding(False, name=q.pick.name, qtype=q.pick.qtype, error=_describe(answer),
                      **q.server.reach)


@check("dns-answer", "{name} {qtype} answers{result}",
       "dnsside and the API disagree: `dnsside explain` (or /debug/explain on the pod) says "
       "member by member why")
async def dns_answer(q: ServiceQuery) -> Findings:
    answer = await q.answer()
    if isinstance(answer, tuple):
        (name, qtype, expected), (rcode, records) = q.pick, answer
        yield Finding(rcode == "NOERROR" and bool(records), name=name, qtype=qtype,
                      result=f" ({rcode}, {len(records)} records; the API objects give "
                      f"{expected})")


CHECKS: tuple[Step[DnsServer], ...] = (
    dns_address, dns_zones, ForEach(each_zone, (dns_soa_reach, dns_soa)),
    dns_service, ForEach(each_service, (dns_answer_reach, dns_answer)))


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _pick_service(services: Sequence[ServiceRecord], slices: Sequence[SliceRecord],
                  links: Sequence[LinkRecord] | None, cluster_name: str, zone: str,
                  locality: str = "all", mcs_zones: Sequence[str] = ()
                  ) -> tuple[Pick | None, ...]:
    """For ``zone`` and then each of ``mcs_zones``: a global service with ready members,
    as dnsside's own index builds it from these objects and answers its name there (so
    under ``local-first`` the addresses counted are the ones the name answers, and in an
    MCS zone only a service whose name it has is asked for)."""
    from dnsside.core.build import make_index
    from dnsside.core.index import IndexOptions
    from dnsside.core.locality import answering
    from dnsside.model.events import Kind, Replace, Synced
    from dnsside.model.locality import Locality

    known = locality in tuple(Locality)
    index = make_index(IndexOptions(cluster_name=cluster_name.lower(), zones=(zone,),
                                    mcs_zones=tuple(mcs_zones),
                                    locality=Locality(locality) if known else Locality.ALL))
    records: list[Record] = [*services, *slices, *(links or [])]
    kinds = {Kind.SERVICE, Kind.SLICE} | ({Kind.LINK} if links is not None else set())
    index.apply([Replace(frozenset(kinds), tuple(records)), Synced()])
    ranked: list[tuple[int, str, str, str]] = []  # (-clusters, namespace, name, qtype)
    for (namespace, name), gs in sorted(index.global_services.items()):
        ready = [m for m in answering(gs, gs.members) if m.ready]
        if not any(m.addresses for m in ready):
            continue
        v4 = any(":" not in a for m in ready for a in m.addresses)
        ranked.append((-len({m.cluster for m in ready}), namespace, name,
                       "A" if v4 else "AAAA"))
    ranked.sort(key=lambda r: r[0])  # stable: the first of the most clusters, by name
    picks: list[Pick | None] = []
    for served in index.responder.zones:
        found = None
        for _, namespace, name, qtype in ranked:
            owner = to_text(service_name(name, namespace, served.services_wire))
            if count := _answered(index.responder, owner, qtype):
                found = Pick(owner, qtype, count)
                break
        picks.append(found)
    return tuple(picks)


def _answered(responder: Responder, name: str, qtype: str) -> int:
    """How many ``qtype`` records dnsside's own responder answers for ``name``."""
    from dnslib import QTYPE, DNSRecord

    reply = responder.respond(bytes(DNSRecord.question(name, qtype).pack()), udp=False)
    if reply is None:
        return 0
    return sum(1 for rr in DNSRecord.parse(reply).rr if rr.rtype == getattr(QTYPE, qtype))


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
