"""The zones dnsside serves: each one's apex (SOA, NS and its glue) and the negative
answers that carry its SOA, as bytes; the index fills the names below the apex.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dnsside.dns.names import MCS, SVC_GLOBAL, services_name, version_name
from dnsside.dns.wire import (
    AAAA,
    AT_QUESTION,
    CLASS_IN,
    NOERROR,
    NS,
    NXDOMAIN,
    SOA,
    TXT,
    A,
    Answer,
    pack_addresses,
    resource_record,
    rr_head,
    to_wire,
)


@dataclass(frozen=True)
class ZoneOptions:
    ttl: int = 5
    publish_not_ready: bool = False
    srv_priority: str = "equal"  # or "local-first"
    # --round-robin: A, AAAA and SRV answers of more than one record start one record
    # further on each time (dnsside.dns.wire.Ring); False: always in one order.
    round_robin: bool = True
    # Addresses of the zone's name server, the apex (validated, normalised IPv4/IPv6).
    ns_addresses: tuple[str, ...] = ("127.0.0.1",)


class Zone:
    """One served zone: its apex records and the negative answers that carry its SOA.

    The zone's name server is the apex itself: ``Z. NS Z.``, with ``Z. A`` / ``Z.
    AAAA`` giving ``ZoneOptions.ns_addresses`` and the SOA MNAME naming it too.
    Every name the zone generates (a service, a cluster, a member, an SRV name, a
    namespace) lies strictly below the apex, so no Kubernetes object can ever take
    or shadow the name server's name, and the NS answer carries its own glue.

    ``scheme`` names its grammar (:mod:`dnsside.dns.names`) and the encoder that fills it;
    ``services_wire`` is the name namespaces hang below (``<ns>.Z``); ``fixed_names`` exist
    whatever the index holds (the apex, and for an MCS zone ``svc.M`` and ``dns-version.M``).
    """

    scheme = SVC_GLOBAL

    def __init__(self, origin: str, options: ZoneOptions, serial: int = 1) -> None:
        self.origin = origin if origin.endswith(".") else origin + "."
        self.wire = to_wire(self.origin)
        self.options = options
        self.ns_host = self.wire
        self.services_wire = services_name(self.wire, self.scheme)
        self.fixed_names: tuple[bytes, ...] = (self.wire,)
        self.set_serial(serial)

    def soa_record(self, serial: int) -> bytes:
        """The zone's SOA record with ``serial``, owner spelled out (an IXFR names old
        versions by theirs)."""
        ttl = self.options.ttl
        rdata = (self.ns_host + to_wire("hostmaster." + self.origin)
                 + struct.pack("!5I", serial & 0xFFFFFFFF, 7200, 1800, 86400, ttl))
        return resource_record(self.wire, SOA, ttl, rdata)

    def set_serial(self, serial: int) -> None:
        """The serial of a new version of the zone; only zone-level bytes depend on it."""
        self.serial = serial & 0xFFFFFFFF
        ttl = self.options.ttl
        self.soa_rr = self.soa_record(self.serial)
        self.nodata = Answer(NOERROR, 0, (), (self.soa_rr,))
        self.nxdomain = Answer(NXDOMAIN, 0, (), (self.soa_rr,))
        v4, v6 = pack_addresses(self.options.ns_addresses)
        glue_a = [resource_record(self.ns_host, A, ttl, p) for p in v4]
        glue_aaaa = [resource_record(self.ns_host, AAAA, ttl, p) for p in v6]
        self.apex = {
            self.wire + struct.pack("!HH", SOA, CLASS_IN): Answer(NOERROR, SOA, (self.soa_rr,)),
            self.wire + struct.pack("!HH", NS, CLASS_IN): Answer(
                NOERROR, NS, (resource_record(self.wire, NS, ttl, self.ns_host),), (),
                glue_a + glue_aaaa
            ),
        }
        if glue_a:
            self.apex[self.wire + struct.pack("!HH", A, CLASS_IN)] = Answer(NOERROR, A, glue_a)
        if glue_aaaa:
            self.apex[self.wire + struct.pack("!HH", AAAA, CLASS_IN)] = Answer(
                NOERROR, AAAA, glue_aaaa)


MCS_DNS_VERSION = b"1.0.0"  # the KEP-1645 DNS specification's schema version (§1, §2.2)


class McsZone(Zone):
    """A ``--mcs-zone``: the Multi-Cluster Services names of the same global
    services, all below ``svc.M``, plus ``dns-version.M`` TXT at the top. SOA, NS and
    every negative answer work as in any zone."""

    scheme = MCS

    def __init__(self, origin: str, options: ZoneOptions, serial: int = 1) -> None:
        super().__init__(origin, options, serial)
        self.fixed_names = (self.wire, self.services_wire, version_name(self.wire))

    def set_serial(self, serial: int) -> None:
        super().set_serial(serial)
        txt = bytes([len(MCS_DNS_VERSION)]) + MCS_DNS_VERSION
        self.apex[version_name(self.wire) + struct.pack("!HH", TXT, CLASS_IN)] = Answer(
            NOERROR, TXT, (AT_QUESTION + rr_head(TXT, self.options.ttl, len(txt)) + txt,)
        )


