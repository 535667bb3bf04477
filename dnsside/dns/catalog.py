"""The catalog zone (``--catalog-zone``, RFC 9432, schema version 2): a zone that lists
dnsside's other zones, so that a secondary configured with the catalog alone (and the
key) serves every zone dnsside serves, and drops one dnsside stops serving.

Its records, all of them fixed when the process starts::

    C                          SOA, NS invalid. (RFC 9432 recommends it: no consumer uses it)
    version.C                  TXT "2", the schema version
    zones.C                    an empty non-terminal
    <id>.zones.C               PTR <member zone>, one per --zone and --mcs-zone

The subtle points, both about time:

- **The member IDs never change for a zone.** A consumer that sees a member's ID change
  drops the zone's data and transfers it again (RFC 9432's "reset"). dnsside keeps nothing
  across restarts, so the ID is worked out from the member's name alone: the SHA-1 of the
  name in wire form, lower case, in hex (:func:`member_id`), the ID the catalog schema of
  version 1 prescribed (BIND's catalogs before RFC 9432). Knot, producing a catalog,
  hashes the name with the time the member was added, which it keeps in its database;
  dnsside has none, and the name alone gives the same ID in every replica too.
- **The serial moves only with the set of zones**, which is fixed for the life of a process
  (the zones are flags). It is the second the process started: service churn never moves
  it, and a restart with another set of zones gets a higher one (a restart takes longer
  than a second), which is all a consumer needs to see the change. A restart with the same
  set gets a higher serial too, with the same records: the consumers transfer the catalog
  again (a handful of records) and find nothing to do, the IDs being the same.

The catalog answers and transfers as any zone: its records are the zone's "apex"
answers (:class:`~dnsside.dns.zone.Zone`), installed when the responder turns ready, and
its one version (:class:`FixedVersions`) is cut at once and never again.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from dnsside.dns.versions import Difference, ZoneVersions
from dnsside.dns.wire import (
    AT_QUESTION,
    CLASS_IN,
    NOERROR,
    NS,
    NXDOMAIN,
    PTR,
    SOA,
    TXT,
    Answer,
    rr_head,
    to_text,
    to_wire,
)
from dnsside.dns.zone import Zone, ZoneOptions

CATALOG = "catalog"  # the scheme of a catalog zone (no service is ever encoded into it)
SCHEMA_VERSION = b"2"  # RFC 9432's schema
INVALID = to_wire("invalid.")  # the NS target RFC 9432 recommends
VERSION_LABEL = b"\x07version"
ZONES_LABEL = b"\x05zones"


def member_id(zone_wire: bytes) -> str:
    """A member's ID (its ``<unique-N>`` label): the SHA-1 of the member's name in wire
    form, lower case, in hex. Stable across restarts and replicas, and 40 characters, well
    within a label's 63."""
    return hashlib.sha1(zone_wire.lower()).hexdigest()


def _key(name: bytes, rtype: int) -> bytes:
    return name + struct.pack("!HH", rtype, CLASS_IN)


def _record(rtype: int, ttl: int, rdata: bytes) -> bytes:
    """A record of the answer to a question for its owner (the owner points at it)."""
    return AT_QUESTION + rr_head(rtype, ttl, len(rdata)) + rdata


class CatalogZone(Zone):
    """The catalog of ``members`` (the other zones' origins, absolute), with the serial it
    keeps for the life of the process."""

    scheme = CATALOG

    def __init__(self, origin: str, options: ZoneOptions, members: Sequence[str],
                 serial: int) -> None:
        wires = [to_wire(m if m.endswith(".") else m + ".") for m in members]
        self.member_wires = tuple(dict.fromkeys(w.lower() for w in wires))
        super().__init__(origin, options, serial)
        self.version_wire = VERSION_LABEL + self.wire
        self.zones_wire = ZONES_LABEL + self.wire
        # Member owner → member zone; the names that exist: the apex, version, zones, each
        # member's (the responder's NODATA, not NXDOMAIN, for their other types).
        self.owners = {self.member_owner(w): w for w in self.member_wires}
        self.fixed_names = (self.wire, self.version_wire, self.zones_wire, *self.owners)

    def member_owner(self, member_wire: bytes) -> bytes:
        """``<id>.zones.C`` of the member zone ``member_wire``."""
        label = member_id(member_wire).encode("ascii")
        return bytes([len(label)]) + label + ZONES_LABEL + self.wire

    @property
    def members(self) -> dict[str, str]:
        """Member zone → its ID, in the order the flags gave them (for logs and explain)."""
        return {to_text(w): member_id(w) for w in self.member_wires}

    def set_serial(self, serial: int) -> None:
        """Every record of the catalog, with ``serial`` in its SOA (set once: nothing but
        the constructor calls it, the catalog being no zone the index numbers)."""
        self.serial = serial & 0xFFFFFFFF
        ttl = self.options.ttl
        self.soa_rr = self.soa_record(self.serial)
        self.nodata = Answer(NOERROR, 0, (), (self.soa_rr,))
        self.nxdomain = Answer(NXDOMAIN, 0, (), (self.soa_rr,))
        txt = bytes([len(SCHEMA_VERSION)]) + SCHEMA_VERSION
        self.apex = {
            _key(self.wire, SOA): Answer(NOERROR, SOA, (self.soa_rr,)),
            _key(self.wire, NS): Answer(NOERROR, NS, (_record(NS, ttl, INVALID),)),
            _key(VERSION_LABEL + self.wire, TXT): Answer(NOERROR, TXT, (_record(TXT, ttl, txt),)),
        }
        for member in self.member_wires:
            self.apex[_key(self.member_owner(member), PTR)] = Answer(
                NOERROR, PTR, (_record(PTR, ttl, member),))

    def describe(self, wire: bytes) -> str:
        """What ``wire`` (a lower-case name of the catalog) is, for ``dnsside explain``."""
        if wire == self.wire:
            members = ", ".join(f"{zone} ({mid})" for zone, mid in self.members.items())
            return (f"the catalog zone {self.origin} (RFC 9432, schema version 2), listing "
                    f"{members}; its serial is the second the serving process started: the zones' "
                    "versions never move it")
        if wire == self.version_wire:
            return "the catalog's schema version (TXT \"2\", RFC 9432)"
        if wire == self.zones_wire:
            return f"zones.{self.origin}: an empty non-terminal above the member zones"
        member = self.owners.get(wire)
        if member is not None:
            return (f"member zone {to_text(member)} (PTR); its ID is the SHA-1 of the zone's "
                    "name, the same across restarts and replicas")
        return f"no name of the catalog {self.origin}: NXDOMAIN"


class FixedVersions(ZoneVersions):
    """The one version of a zone whose records never change while the process runs (the
    catalog): cut at the zone's own serial when made, and never again. The clock that
    cuts the other zones' versions passes it by, so its serial moves with nothing but a
    restart; an IXFR from an older serial gets the whole zone (there is no history)."""

    def __init__(self, zone: Zone) -> None:
        super().__init__(zone, limit=0)
        super().cut(zone.serial)

    def cut(self, serial: int) -> Difference | None:
        return None
