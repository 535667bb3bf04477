"""Zone transfer to the secondaries people run: NSD, BIND and Knot pull dnsside's zones and then
answer every name as dnsside does, pick up a change by their next SOA poll or at once on
a NOTIFY, take a NOTIFY only from the primary's address (and signed, with a key), and
serve what they held after a restart; dig and kdig transfer from an allowed address and
are refused from another; a zone too big for one message arrives whole."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.tsig
import dns.xfr
import pytest
import yaml

from bench import topology
from testkit.rawdns import AXFR, IXFR, bulk_objects, parse, query, udp
from testkit.secondaries import (
    BindSecondary,
    KnotSecondary,
    NsdSecondary,
    Secondary,
    Tsig,
    serial,
)
from testkit.serve import DEMO, Dnsside, answers, demo_server, wait_for

ZONES = ["svc-global", "clusterset.local"]
ALLOW = ("--allow-transfer", "127.0.0.1/32")
SECONDARIES = [NsdSecondary, BindSecondary, KnotSecondary]
# `tsig-keygen -a hmac-sha256 xfr-key`, and the same key with another secret
KEY: Tsig = ("xfr-key", "hmac-sha256", "cTaeNLkiyNPuYPuAmMvWRxrqIubyQ0EQavBnSShpBDU=")
WRONG: Tsig = ("xfr-key", "hmac-sha256", "qG0NP1r0jWTGNBJdSf3Dgxz3WqRNGDCsy8mFezNEFnI=")


@pytest.fixture(scope="module")
def primary() -> Iterator[Dnsside]:
    with demo_server("--mcs-zone", "clusterset.local", *ALLOW) as srv:
        yield srv


def transfer(srv: Dnsside | Secondary, zone: str, source: str = "127.0.0.1"
             ) -> list[tuple[str, str, str]]:
    """(owner, type, rdata) of every record of ``zone``, SOA first and last, in order."""
    out = []
    for msg in dns.query.xfr("127.0.0.1", zone, port=srv.port, source=source, lifetime=30,
                              relativize=False):
        out += [(rrset.name.to_text(), dns.rdatatype.to_text(rrset.rdtype), rd.to_text())
                for rrset in msg.answer for rd in rrset]
    return out


def names(records: list[tuple[str, str, str]], zone: str) -> tuple[list[str], list[str]]:
    """(every owner and one name that does not exist, every empty non-terminal: a name
    between an owner and the apex that owns nothing)."""
    apex = dns.name.from_text(zone)
    owners = {dns.name.from_text(owner) for owner, _t, _r in records}
    between = set()
    for name in owners:
        name = name.parent()
        while name != apex and name.is_subdomain(apex):
            between.add(name)
            name = name.parent()
    return (sorted(n.to_text() for n in owners | {dns.name.from_text("no-such-name", apex)}),
            sorted(n.to_text() for n in between - owners))


def assert_same_answers(primary: Dnsside, secondary: Secondary, zone: str) -> list[str]:
    """Every name of ``zone``, asked for A, AAAA, SRV and TXT, gets the same rcode and the
    same answer records from both. Empty non-terminals get no records from either; the
    ones dnsside calls NXDOMAIN where the secondary says NOERROR (RFC 8020), returned."""
    owners, empty = names(transfer(primary, zone), zone)
    assert len(owners) > 10
    for name in owners:
        for rdtype in ("A", "AAAA", "SRV", "TXT"):
            direct = primary.query(name, rdtype, tcp=True)
            via = secondary.query(name, rdtype)
            assert via.rcode() == direct.rcode(), f"{name} {rdtype}: {via}\n{direct}"
            assert answers(via, rdtype) == answers(direct, rdtype), f"{name} {rdtype}"
    differ = []
    for name in empty:
        direct = primary.query(name, "A", tcp=True)
        via = secondary.query(name, "A")
        assert via.rcode() == dns.rcode.NOERROR and not via.answer and not direct.answer
        if direct.rcode() != via.rcode():
            differ.append(name)
    return differ


def test_axfr_soa_first_and_last_apex_ns_and_glue(primary: Dnsside) -> None:
    for zone in ZONES:
        records = transfer(primary, zone)
        assert records[0][1] == records[-1][1] == "SOA" and records[0] == records[-1]
        assert [r for r in records if r[1] == "SOA"] == [records[0], records[-1]]
        assert (f"{zone}.", "NS", f"{zone}.") in records
        assert (f"{zone}.", "A", "127.0.0.1") in records
    mcs = transfer(primary, "clusterset.local")
    assert ("dns-version.clusterset.local.", "TXT", '"1.0.0"') in mcs


@pytest.mark.parametrize("kind", SECONDARIES, ids=lambda k: k.kind)
def test_secondary_answers_every_name_as_dnsside(primary: Dnsside, tmp_path: Path,
                                                 kind: type[Secondary]) -> None:
    secondary = kind(tmp_path, primary, ZONES)
    try:
        secondary.start()
        differ = {zone: assert_same_answers(primary, secondary, zone) for zone in ZONES}
    finally:
        secondary.stop()
    # Every name agrees, the cluster level of an MCS pod name (<cluster>.<svc>.<ns>.svc.M,
    # an empty non-terminal: NODATA from both, RFC 8020) included.
    assert differ == {"svc-global": [], "clusterset.local": []}, differ
    primary.wait_log("XFR of clusterset.local. to 127.0.0.1: serial")


def dig_axfr(srv: Dnsside, source: str, zone: str = "svc-global") -> str:
    return subprocess.run(["dig", "-b", source, f"@{srv.host}", "-p", str(srv.port), "AXFR",
                           zone, "+time=5", "+tries=1"],
                          capture_output=True, text=True, timeout=30).stdout


def kdig_axfr(srv: Dnsside, source: str,
              zone: str = "svc-global") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kdig", "-b", source, f"@{srv.host}", "-p", str(srv.port), "AXFR",
                           zone, "+time=5", "+retry=0"],
                          capture_output=True, text=True, timeout=30)


def metric(srv: Dnsside, series: str) -> float:
    value = srv.series(series)
    assert value is not None, series
    return value


def test_dig_and_kdig_axfr_from_an_allowed_and_a_refused_address(primary: Dnsside) -> None:
    ok = 'dnsside_transfers_total{result="ok",type="axfr"}'
    refused = 'dnsside_transfers_total{result="refused",type="axfr"}'
    before_ok, before_refused = metric(primary, ok), metric(primary, refused)
    before_bytes = metric(primary, "dnsside_transfer_bytes_total")
    allowed = dig_axfr(primary, "127.0.0.1")
    size = re.search(r";; XFR size: (\d+) records \(messages (\d+), bytes (\d+)\)", allowed)
    assert size, allowed
    assert int(size.group(1)) == len(transfer(primary, "svc-global"))
    assert "Transfer failed" in dig_axfr(primary, "127.0.0.2")
    k = kdig_axfr(primary, "127.0.0.1")
    assert k.returncode == 0 and "svc-global.\t" in k.stdout and "SOA" in k.stdout, k
    k = kdig_axfr(primary, "127.0.0.2")
    assert "REFUSED" in k.stdout + k.stderr, k
    with pytest.raises(dns.xfr.TransferError):
        transfer(primary, "svc-global", source="127.0.0.2")
    assert metric(primary, ok) >= before_ok + 3
    assert metric(primary, refused) >= before_refused + 3
    assert metric(primary, "dnsside_transfer_bytes_total") >= before_bytes + int(size.group(3))
    primary.wait_log("transfer: AXFR of svc-global. refused to 127.0.0.2, not in "
                     "--allow-transfer")


def test_no_transfer_by_default(tmp_path: Path) -> None:
    with demo_server() as srv:
        assert "Transfer failed" in dig_axfr(srv, "127.0.0.1")
        assert metric(srv, 'dnsside_transfers_total{result="refused",type="axfr"}') == 1


def test_ixfr_older_than_the_history_gets_the_whole_zone(primary: Dnsside) -> None:
    """dig IXFR=1: a version the history does not reach, so the zone in the AXFR form
    (RFC 1995 §4), which dig takes."""
    axfr = transfer(primary, "svc-global")
    out = subprocess.run(["dig", f"@{primary.host}", "-p", str(primary.port),
                          "IXFR=1", "svc-global", "+time=5", "+tries=1"],
                         capture_output=True, text=True, timeout=30).stdout
    size = re.search(r";; XFR size: (\d+) records", out)
    assert size and int(size.group(1)) == len(axfr), out
    primary.wait_log("transfer: IXFR from 1 of svc-global. to 127.0.0.1: serial")
    primary.wait_log("whole zone, the history does not reach its serial")


def test_ixfr_over_udp_is_the_current_soa_alone(primary: Dnsside) -> None:
    """dig +notcp IXFR=<serial>: the current SOA alone, whether the client is current or
    behind (RFC 1995 §2/§4, as BIND answers: a client behind asks again over TCP); an IXFR
    that names no version of its own is FORMERR."""
    held = answers(primary.query("svc-global", "SOA"), "SOA")[0].split()[2]
    for since in (held, int(held) - 1):
        out = subprocess.run(["dig", f"@{primary.host}", "-p", str(primary.port), "+notcp",
                              f"IXFR={since}", "svc-global", "+time=5", "+tries=1"],
                             capture_output=True, text=True, timeout=30).stdout
        soa = re.findall(r"^svc-global\.\s+5\s+IN\s+SOA\s.* (\d+) 7200", out, re.M)
        assert soa == [held] and "(UDP)" in out, out
    status, body = primary.http("/debug/explain?name=nginx-svc.default.svc-global")
    assert status == 200 and json.loads(body)["zone"]["serial"] == int(held)  # explain says it
    reply = udp(primary.host, primary.port, query("svc-global", IXFR))  # names no version
    assert reply is not None
    msg = parse(reply)
    assert msg.rcode() == dns.rcode.FORMERR and not msg.answer


def test_a_zone_of_several_messages_arrives_whole(tmp_path: Path) -> None:
    """A few thousand members: the transfer takes several messages, each under 64 KiB, and
    NSD serves every record (read back from it by AXFR)."""
    path = tmp_path / "topo.json"
    topology.write(3000, path, n_queries=10)
    with Dnsside("--source", str(path), "--cluster-name", "east", *ALLOW,
                 timeout=60) as srv:
        digged = dig_axfr(srv, "127.0.0.1")
        size = re.search(r";; XFR size: (\d+) records \(messages (\d+), bytes (\d+)\)", digged)
        assert size and int(size.group(2)) > 1, digged
        sent = transfer(srv, "svc-global")
        assert len(sent) == int(size.group(1))
        secondary = NsdSecondary(tmp_path, srv, ["svc-global"])
        try:
            secondary.start()
            got = transfer(secondary, "svc-global")
        finally:
            secondary.stop()
        assert sorted(got) == sorted(sent)
        line = srv.wait_log("transfer: AXFR of svc-global. to 127.0.0.1")
        print(line)


def test_a_slow_reader_gets_the_whole_zone_and_other_queries_are_answered_meanwhile(
        tmp_path: Path) -> None:
    """A transfer is packed as it is sent, a slice at a time: a client that reads one
    message and then waits holds no query of anyone else back, and gets the rest when it
    reads on."""
    path = tmp_path / "topo.json"
    topology.write(3000, path, n_queries=10)
    with Dnsside("--source", str(path), "--cluster-name", "east", *ALLOW,
                 timeout=60) as srv:
        whole = transfer(srv, "svc-global")
        with socket.create_connection((srv.host, srv.port), timeout=10) as slow:
            wire = query("svc-global", AXFR)
            slow.sendall(len(wire).to_bytes(2, "big") + wire)
            first = read_message(slow)
            assert parse(first).answer  # the transfer has begun, and the client pauses
            for _ in range(20):  # others are answered while it does not read
                assert answers(srv.query("svc-global", "SOA"), "SOA")
            got = [rr for rrset in parse(first).answer for rr in rrset]
            while sum(1 for rr in got if rr.rdtype == dns.rdatatype.SOA) < 2:
                got += [rr for rrset in parse(read_message(slow)).answer for rr in rrset]
        assert len(got) == len(whole)


def read_message(sock: socket.socket) -> bytes:
    """One length-prefixed DNS message from a TCP stream."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the server closed the connection"
            data += chunk
        return data
    return exactly(int.from_bytes(exactly(2), "big"))


def editable_demo(tmp_path: Path) -> tuple[dict[str, list[dict[str, object]]], Path]:
    """The demo source as a file a test changes, and its path."""
    demo = yaml.safe_load(DEMO.read_text())
    path = tmp_path / "zone.yaml"
    path.write_text(yaml.safe_dump(demo))
    return demo, path


@pytest.mark.parametrize("kind", SECONDARIES, ids=lambda k: k.kind)
def test_a_change_reaches_the_secondary_by_its_next_poll(tmp_path: Path,
                                                         kind: type[Secondary]) -> None:
    """Without NOTIFY: the secondary polls the SOA every 2 s (its refresh capped), sees
    the new serial and transfers the new zone."""
    demo, path = editable_demo(tmp_path)
    with Dnsside("--source", str(path), "--cluster-name", "east", "--reload-interval", "0.2",
                 *ALLOW) as srv:
        secondary = kind(tmp_path, srv, ["svc-global"], refresh=2)
        try:
            secondary.start()
            name = "fresh.bulk.svc-global"
            assert secondary.query(name, "A").rcode() == dns.rcode.NXDOMAIN
            demo["items"] += bulk_objects("fresh", "bulk", 3, 97)
            path.write_text(yaml.safe_dump(demo))
            wait_for(lambda: answers(srv.query(name, "A")), 10, "dnsside to reload")
            got = wait_for(lambda: answers(secondary.query(name, "A")), 30,
                           f"{kind.kind} to transfer the change")
            assert got == answers(srv.query(name, "A")) == ["10.97.0.1", "10.97.0.2",
                                                             "10.97.0.3"]
            # Holding a version, the secondary asked IXFR and got the differences (not
            # necessarily its first IXFR: one whose SOA probe over UDP went unanswered on a
            # loaded machine asks over TCP while current, and gets the SOA alone).
            line = srv.wait_log(", differences, ")
            assert "transfer: IXFR from " in line, line
        finally:
            secondary.stop()



@pytest.mark.parametrize("kind", SECONDARIES, ids=lambda k: k.kind)
def test_a_notify_from_the_primary_address_brings_a_change_before_the_poll(
        tmp_path: Path, kind: type[Secondary]) -> None:
    """With ``notify``, a NOTIFY from 127.0.0.1 (sent here by the test, from an ephemeral
    port as dnsside's --notify does) makes the secondary poll at once, where its refresh is
    an hour; one from 127.0.0.2 is refused (REFUSED from NSD and BIND, NOTAUTH from Knot)."""
    demo, path = editable_demo(tmp_path)
    with Dnsside("--source", str(path), "--cluster-name", "east", "--reload-interval", "0.2",
                 *ALLOW) as srv:
        secondary = kind(tmp_path, srv, ["svc-global"], refresh=3600, notify=True)
        try:
            secondary.start()
            name = "fresh.bulk.svc-global"
            assert secondary.query(name, "A").rcode() == dns.rcode.NXDOMAIN
            before = serial(srv.port, "svc-global")
            demo["items"] += bulk_objects("fresh", "bulk", 3, 97)
            path.write_text(yaml.safe_dump(demo))
            wait_for(lambda: answers(srv.query(name, "A")), 10, "dnsside to reload")
            # A NOTIFY names a version: the one cut a moment after the change.
            wait_for(lambda: serial(srv.port, "svc-global") != before, 10, "a new version")
            stranger = secondary.send_notify("svc-global.", source="127.0.0.2")
            assert stranger.rcode() in (dns.rcode.REFUSED, dns.rcode.NOTAUTH), stranger
            assert secondary.send_notify("svc-global.").rcode() == dns.rcode.NOERROR
            got = wait_for(lambda: answers(secondary.query(name, "A")), 30,
                           f"{kind.kind} to transfer on the NOTIFY")
            assert got == ["10.97.0.1", "10.97.0.2", "10.97.0.3"]
        finally:
            secondary.stop()


@pytest.mark.parametrize("kind", SECONDARIES, ids=lambda k: k.kind)
def test_with_tsig_a_secondary_takes_a_notify_signed_with_its_key(
        primary: Dnsside, tmp_path: Path, kind: type[Secondary]) -> None:
    """With ``tsig`` and ``notify``: the secondary loads the key and takes a NOTIFY signed
    with it (its reply signed too, which dnspython checks); a wrong secret fails the
    signature check; an unsigned NOTIFY is refused by NSD and Knot, and taken by BIND,
    which checks no key on a NOTIFY from its primary's address. The secondary signs its
    own requests, which this dnsside (no key) answers NOTAUTH (BADKEY): it never transfers
    here, so the test waits only until it answers."""
    secondary = kind(tmp_path, primary, ["svc-global"], refresh=3600, tsig=KEY, notify=True)
    try:
        secondary.start(until="listening")
        signed = secondary.send_notify("svc-global.", tsig=KEY)
        assert signed.rcode() == dns.rcode.NOERROR and signed.had_tsig
        with pytest.raises(dns.tsig.PeerBadSignature):
            secondary.send_notify("svc-global.", tsig=WRONG)
        unsigned = secondary.send_notify("svc-global.").rcode()
        if kind is BindSecondary:
            assert unsigned == dns.rcode.NOERROR
        else:
            assert unsigned in (dns.rcode.REFUSED, dns.rcode.NOTAUTH)
        assert secondary.serial("svc-global") is None
    finally:
        secondary.stop()


@pytest.mark.parametrize("kind", SECONDARIES, ids=lambda k: k.kind)
def test_a_restarted_secondary_serves_what_it_held_then_catches_up(
        tmp_path: Path, kind: type[Secondary]) -> None:
    """Stopped, then started on its own files while dnsside is down, the secondary serves
    the zone at the serial it held; pointed at a new dnsside with more in the zone, it
    transfers that at its next try (the retry time is capped like the refresh: the
    SOA's 1,800 s would hold it back after the failed tries while dnsside was down)."""
    demo, path = editable_demo(tmp_path)
    name = "fresh.bulk.svc-global"
    with Dnsside("--source", str(path), "--cluster-name", "east", *ALLOW) as first:
        owner = next(o for o, t, _r in transfer(first, "svc-global")
                     if t == "A" and o != "svc-global.")
        secondary = kind(tmp_path, first, ["svc-global"], refresh=2)
        secondary.start()
        held = secondary.serial("svc-global")
        assert held is not None
        before = answers(secondary.query(owner, "A"))
        assert before == answers(first.query(owner, "A"))
        # NSD writes a transferred zone out every zonefiles-write seconds, not at once
        wait_for(secondary.zone_file("svc-global").exists, 30, "the zone file")
    try:
        secondary.restart(until="held")
        assert secondary.serial("svc-global") == held
        assert answers(secondary.query(owner, "A")) == before
        assert secondary.query(name, "A").rcode() == dns.rcode.NXDOMAIN
        demo["items"] += bulk_objects("fresh", "bulk", 3, 97)
        path.write_text(yaml.safe_dump(demo))
        # No wait for the clock: a new dnsside's first serial is a later second than its
        # start, so later than any serial the first one gave.
        with Dnsside("--source", str(path), "--cluster-name", "east", *ALLOW) as second:
            secondary.restart(second)
            assert (secondary.serial("svc-global") or 0) > held
            assert answers(secondary.query(name, "A")) == ["10.97.0.1", "10.97.0.2",
                                                           "10.97.0.3"]
    finally:
        secondary.stop()
