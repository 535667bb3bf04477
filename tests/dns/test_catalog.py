"""The catalog zone (``--catalog-zone``, RFC 9432 schema version 2, dns/catalog.py) without a
socket: its records as a transfer sends them and as queries get them, read by dnspython;
member IDs that depend on the member's name alone (stable across restarts); a serial that
the zones' versions never move; the flag's checks; explain; the catalog's one NOTIFY."""

from __future__ import annotations

import asyncio
import hashlib
from typing import cast

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
import pytest

from dnsside.core.explain import Explainer
from dnsside.core.index import Index
from dnsside.dns.catalog import CatalogZone, member_id
from dnsside.dns.tsig import make_key
from dnsside.dns.wire import PTR, SOA, TXT, to_wire
from dnsside.dns.zone import Zone, ZoneOptions
from dnsside.flagvalues import checked_config
from dnsside.netvalues import networks
from dnsside.serving.notify import Notifier
from dnsside.serving.transfer import Transfers
from testkit.inprocess import file_index
from testkit.rawdns import AXFR, NS, A, parse, query
from testkit.serve import DEMO

pytestmark = pytest.mark.quick

CATALOG = "catalog.invalid."
STARTED = 1795720000  # the second the process started: the catalog's serial
SVC_ID = hashlib.sha1(dns.name.from_text("svc-global.").to_wire()).hexdigest()
MCS_ID = hashlib.sha1(dns.name.from_text("clusterset.local.").to_wire()).hexdigest()


@pytest.fixture(scope="module")
def index() -> Index:
    idx = file_index(DEMO, mcs_zones=["clusterset.local"], allow_transfer=["127.0.0.0/8"],
                     catalog_zone=CATALOG, started=STARTED)
    idx.publisher.cut(STARTED + 1)  # the first version of the zones, as serve cuts it
    return idx


def transferred(index: Index, wire: bytes) -> list[tuple[str, str, str]]:
    """(owner, type, rdata) of every record the TCP side sends for ``wire`` from 127.0.0.1."""
    transfers = Transfers(index.responder, networks(["127.0.0.0/8"], "--allow-transfer"),
                          index.publisher.versions)
    replies = transfers.answer(wire, "127.0.0.1")
    assert replies is not None
    out = []
    for reply in replies:
        msg = dns.message.from_wire(reply, one_rr_per_rrset=True)
        assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
        out += [(rrset.name.to_text(), dns.rdatatype.to_text(rrset.rdtype), rd.to_text())
                for rrset in msg.answer for rd in rrset]
    return out


def ixfr_query(zone: str, serial: int) -> bytes:
    q = dns.message.make_query(zone, "IXFR")
    q.authority.append(dns.rrset.from_text(
        zone, 5, "IN", "SOA", f"{zone} hostmaster.{zone} {serial} 7200 1800 86400 5"))
    return q.to_wire()


def test_the_catalog_is_soa_ns_invalid_version_2_and_a_ptr_per_zone(index: Index) -> None:
    soa = (CATALOG, "SOA", f"{CATALOG} hostmaster.{CATALOG} {STARTED} 7200 1800 86400 5")
    records = transferred(index, query(CATALOG, AXFR))
    assert records[0] == records[-1] == soa
    assert sorted(records[1:-1]) == sorted([
        (CATALOG, "NS", "invalid."),
        (f"version.{CATALOG}", "TXT", '"2"'),
        (f"{SVC_ID}.zones.{CATALOG}", "PTR", "svc-global."),
        (f"{MCS_ID}.zones.{CATALOG}", "PTR", "clusterset.local."),
    ])


def test_the_catalog_is_transferred_under_the_zones_access_rules(index: Index) -> None:
    """Outside --allow-transfer: REFUSED. With a key: unsigned REFUSED, signed answered and
    signed, every message read by dnspython with the key."""
    allowed = Transfers(index.responder, networks(["127.0.0.0/8"], "--allow-transfer"),
                        index.publisher.versions)
    refused = allowed.answer(query(CATALOG, AXFR), "192.0.2.7")
    assert refused is not None and parse(next(iter(refused))).rcode() == dns.rcode.REFUSED
    key = dns.tsig.Key("xfr-key.", "c2VjcmV0IHNlY3JldCBzZWNyZXQgc2VjcmV0IDMyIGJ5dGVz",
                       "hmac-sha256")
    signed = Transfers(index.responder, versions=index.publisher.versions,
                       tsig=make_key("xfr-key.", "hmac-sha256", key.secret))
    unsigned = signed.answer(query(CATALOG, AXFR), "192.0.2.7")
    assert unsigned is not None and parse(next(iter(unsigned))).rcode() == dns.rcode.REFUSED
    q = dns.message.make_query(CATALOG, "AXFR")
    q.use_tsig(key)
    replies = signed.answer(q.to_wire(), "192.0.2.7")
    assert replies is not None
    got = []
    for wire in replies:
        msg = dns.message.from_wire(wire, keyring={key.name: key}, request_mac=q.mac, xfr=True)
        assert msg.had_tsig and msg.rcode() == dns.rcode.NOERROR
        got += [(r.name.to_text(), dns.rdatatype.to_text(r.rdtype)) for r in msg.answer]
    assert (f"{SVC_ID}.zones.{CATALOG}", "PTR") in got


def test_member_ids_are_the_members_names_hashed_whatever_the_process() -> None:
    """A restart (another serial, another order of flags, another spelling) lists each
    member under the same ID: a consumer never sees a reset of a zone that stays."""
    one = CatalogZone(CATALOG, ZoneOptions(), ["svc-global.", "clusterset.local."], 1)
    two = CatalogZone("CATALOG.invalid", ZoneOptions(ttl=30),
                      ["ClusterSet.Local", "SVC-GLOBAL."], 1795729999)
    assert one.members == {"svc-global.": SVC_ID, "clusterset.local.": MCS_ID}
    assert two.members == {"clusterset.local.": MCS_ID, "svc-global.": SVC_ID}
    assert set(one.owners) == set(two.owners)
    assert member_id(to_wire("svc-global.")) == SVC_ID
    assert len({member_id(to_wire(z)) for z in ("a.", "b.", "a.b.", "b.a.")}) == 4


def test_queries_to_the_catalog_are_answered_authoritatively(index: Index) -> None:
    responder = index.responder
    member = f"{SVC_ID}.zones.{CATALOG}"
    for name, qtype, rdata in ((CATALOG, NS, "invalid."), (f"version.{CATALOG}", TXT, '"2"'),
                               (member, PTR, "svc-global."),
                               (member.upper(), PTR, "svc-global.")):
        reply = parse(responder.respond(query(name, qtype)) or b"")
        assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA, name
        assert reply.question[0].name.to_text() == name  # the question as asked
        assert [rd.to_text() for rrset in reply.answer for rd in rrset] == [rdata], name
    soa = parse(responder.respond(query(CATALOG, SOA)) or b"")
    assert soa.answer[0][0].serial == STARTED
    # Names that exist (NODATA, the SOA in the authority), and one that does not.
    for name, rcode in ((member, dns.rcode.NOERROR), (f"zones.{CATALOG}", dns.rcode.NOERROR),
                        (f"version.{CATALOG}", dns.rcode.NOERROR), (CATALOG, dns.rcode.NOERROR),
                        (f"nothing.zones.{CATALOG}", dns.rcode.NXDOMAIN)):
        reply = parse(responder.respond(query(name, A)) or b"")
        assert reply.rcode() == rcode and not reply.answer, name
        assert reply.authority[0][0].serial == STARTED, name


def test_the_zones_versions_never_move_the_catalogs_serial(index: Index) -> None:
    before = transferred(index, query(CATALOG, AXFR))
    index.publisher.cut(STARTED + 7)
    index.publisher.cut(STARTED + 9)
    assert index.publisher.serial == STARTED + 9  # the zones' serial moved
    assert index.publisher.versions[to_wire(CATALOG)].serial == STARTED
    assert transferred(index, query(CATALOG, AXFR)) == before
    # IXFR: from the catalog's serial, the SOA alone; from an older one, the whole catalog.
    assert [r[1] for r in transferred(index, ixfr_query(CATALOG, STARTED))] == ["SOA"]
    assert transferred(index, ixfr_query(CATALOG, STARTED - 60)) == before
    reply = parse(index.responder.respond(ixfr_query(CATALOG, STARTED), udp=True) or b"")
    assert [rd.serial for rrset in reply.answer for rd in rrset] == [STARTED]


def test_without_the_flag_there_is_no_catalog() -> None:
    idx = file_index(DEMO, allow_transfer=["127.0.0.0/8"])
    assert idx.responder.fixed_zones == []
    reply = parse(idx.responder.respond(query(CATALOG, SOA)) or b"")
    assert reply.rcode() == dns.rcode.REFUSED


@pytest.mark.parametrize("catalog,error", [
    ("svc-global.", "--catalog-zone svc-global. overlaps --zone svc-global."),
    ("cat.svc-global", "--catalog-zone cat.svc-global. overlaps --zone svc-global."),
    ("local", "--catalog-zone local. overlaps --mcs-zone clusterset.local."),
    ("a..b", "--catalog-zone"),
])
def test_a_catalog_that_overlaps_a_zone_is_refused(catalog: str, error: str) -> None:
    with pytest.raises(ValueError, match="^" + error.replace(".", r"\.")):
        checked_config("serve", {"catalog_zone": catalog, "mcs_zone": ["clusterset.local"]}, {})


def test_the_flag_is_read_and_normalised() -> None:
    config = checked_config("serve", {}, {"DNSSIDE_CATALOG_ZONE": "Catalog.Invalid"})
    assert config.catalog_zone == "catalog.invalid."
    assert checked_config("serve", {}, {}).catalog_zone is None


def test_explain_says_what_each_name_of_the_catalog_is(index: Index) -> None:
    explain = Explainer(index).explain
    apex = explain(CATALOG, "SOA")
    assert apex["rcode"] == "NOERROR"
    assert f"svc-global. ({SVC_ID})" in apex["explanation"]
    assert f"clusterset.local. ({MCS_ID})" in apex["explanation"]
    assert apex["zone"]["serial"] == STARTED
    assert "no history" in apex["zone"]["transfers"]
    member = explain(f"{SVC_ID}.zones.{CATALOG}", "PTR")
    assert member["explanation"].startswith("member zone svc-global.")
    assert explain(f"version.{CATALOG}", "TXT")["explanation"].startswith(
        "the catalog's schema version")
    assert "NXDOMAIN" in explain(f"x.zones.{CATALOG}")["explanation"]


async def test_the_catalog_is_notified_once_at_its_own_serial() -> None:
    """With the zones' first version, the catalog's NOTIFY goes too, at the catalog's serial;
    the zones' next versions notify the zones alone."""
    got: list[dns.message.Message] = []
    seen = 0
    loop = asyncio.get_running_loop()

    class Secondary(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.DatagramTransport, transport)

        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            msg = dns.message.from_wire(data)
            got.append(msg)
            self.transport.sendto(dns.message.make_response(msg).to_wire(), addr)

    transport, _ = await loop.create_datagram_endpoint(Secondary, local_addr=("127.0.0.1", 0))
    target = f"127.0.0.1:{transport.get_extra_info('sockname')[1]}"
    zones = [Zone("svc-global.", ZoneOptions()), Zone("clusterset.local.", ZoneOptions())]
    catalog = CatalogZone(CATALOG, ZoneOptions(), [z.origin for z in zones], STARTED)
    notifier = Notifier([target], zones, fixed_zones=[catalog])

    async def until(n: int) -> dict[str, int]:
        """Once ``n`` NOTIFYs came in all: the zones and serials of those since the last call."""
        nonlocal seen
        async with asyncio.timeout(10):
            while len(got) < n:
                await asyncio.sleep(0.01)
        new, seen = got[seen:n], n
        return {m.question[0].name.to_text(): m.answer[0][0].serial for m in new}

    try:
        notifier.notify(STARTED + 1)
        assert await until(3) == {"svc-global.": STARTED + 1, "clusterset.local.": STARTED + 1,
                                  CATALOG: STARTED}
        notifier.notify(STARTED + 5)
        assert await until(5) == {"svc-global.": STARTED + 5, "clusterset.local.": STARTED + 5}
        notifier.notify(STARTED + 6)  # its two NOTIFYs come after any the last one sent
        assert await until(7) == {"svc-global.": STARTED + 6, "clusterset.local.": STARTED + 6}
        assert [m.question[0].name.to_text() for m in got[3:]].count(CATALOG) == 0
    finally:
        await notifier.close()
        transport.close()
