"""The edges of zone transfer, asked of dnsside and of BIND 9.18 as the reference primary
(issue 36): the same request to both, the bytes read back with dnspython, the answers
compared. BIND serves the very zone dnsside sends (its AXFR written out as BIND's zone
file), allows transfers to 127.0.0.1 as dnsside does, and both are asked from 127.0.0.1
(allowed) and 127.0.0.2 (not).

What is compared, per request: the rcode (extended, so BADVERS), whether each reply has
an OPT record (RFC 6891 §6.1.1: a request with OPT gets one, in every message of a
transfer as BIND sends it), TC, and over UDP the records (an IXFR from an older version
gets the current SOA alone, RFC 1995 §2/§4)."""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.xfr
import dns.zone
import pytest

from testkit.resolvers import PeerProcess, named_places
from testkit.secondaries import check, serial
from testkit.serve import DEMO, Dnsside, demo_server, wait_for

ZONE = "svc-global."
Reply = tuple[str, bool, bool, list[str]]  # rcode, OPT, TC, records (UDP only)


class BindPrimary(PeerProcess):
    """named as a primary of ``zone_text`` on 127.0.0.1, transfers allowed to 127.0.0.1."""

    kind = "bind-primary"

    def __init__(self, tmp: Path, zone_text: str) -> None:
        super().__init__(tmp)
        (tmp / "zone.db").write_text(zone_text)

    def configure(self) -> list[str]:
        conf = self.tmp / "named.conf"
        conf.write_text(f"""
options {{
{named_places(self.tmp, self.port)}    recursion no;
    dnssec-validation no;
    notify no;
    allow-transfer {{ 127.0.0.1; }};
    max-records-per-type 0;
}};
controls {{ }};
zone "{ZONE}" {{ type primary; file "{self.tmp}/zone.db"; }};
""")
        check(["named-checkconf", str(conf)])
        return ["named", "-4", "-g", "-c", str(conf)]

    def start(self) -> None:
        self.start_on_a_free_port(self.configure, lambda: serial(self.port, ZONE) is not None,
                                  30, "BIND to serve the zone")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dnsside, BindPrimary]]:
    with demo_server("--allow-transfer", "127.0.0.1/32") as srv:
        zone = dns.zone.from_xfr(dns.query.xfr("127.0.0.1", ZONE, port=srv.port, lifetime=30))
        bind = BindPrimary(tmp_path_factory.mktemp("bind"), zone.to_text())
        bind.start()
        try:
            assert serial(bind.port, ZONE) == serial(srv.port, ZONE)
            yield srv, bind
        finally:
            bind.stop()


def ixfr(name: str, held: int | None, **kw: object) -> dns.message.Message:
    """An IXFR as a secondary holding ``held`` sends it (None: without the SOA)."""
    q = dns.message.make_query(name, "IXFR", **kw)  # type: ignore[arg-type]
    if held is not None:
        q.authority.append(dns.rrset.from_text(
            name, 5, "IN", "SOA", f"{name} hostmaster.{name} {held} 7200 1800 86400 5"))
    return q


def read(wire: bytes) -> dns.message.Message:
    return dns.message.from_wire(wire, one_rr_per_rrset=True)


def seen(msg: dns.message.Message, udp: bool) -> Reply:
    records = [f"{rr.name} {dns.rdatatype.to_text(rr.rdtype)} {rd}"
               for rr in msg.answer for rd in rr] if udp else []
    return (dns.rcode.to_text(msg.rcode()), msg.edns >= 0, bool(msg.flags & dns.flags.TC),
            records)


def over_tcp(port: int, q: dns.message.Message, source: str = "127.0.0.1") -> list[Reply]:
    """Every message the server sends for ``q`` over one TCP connection, until the
    transfer's closing SOA or an error."""
    wire = q.to_wire()
    out: list[Reply] = []
    soas = 0
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        sock.sendall(len(wire).to_bytes(2, "big") + wire)
        while True:
            size = int.from_bytes(sock.recv(2, socket.MSG_WAITALL), "big")
            msg = read(sock.recv(size, socket.MSG_WAITALL))
            out.append(seen(msg, udp=False))
            soas += sum(1 for rr in msg.answer if rr.rdtype == dns.rdatatype.SOA)
            if msg.rcode() or soas >= 2 or (len(out) == 1 and len(msg.answer) == 1):
                return out


def over_udp(port: int, q: dns.message.Message, source: str = "127.0.0.1") -> Reply:
    return seen(dns.query.udp(q, "127.0.0.1", port=port, source=source, timeout=5), udp=True)


def edges(held: int) -> list[tuple[str, str, dns.message.Message, str]]:
    """(what, transport, request, source): the edges of issue 36, items 1 to 3."""
    below = "nginx-svc.default." + ZONE
    return [
        ("IXFR from an older version over UDP", "udp", ixfr(ZONE, held - 1), "127.0.0.1"),
        ("the same, with EDNS", "udp", ixfr(ZONE, held - 1, use_edns=0, payload=1232),
         "127.0.0.1"),
        ("IXFR from the current version over UDP", "udp", ixfr(ZONE, held), "127.0.0.1"),
        ("IXFR without the client's SOA over UDP", "udp", ixfr(ZONE, None), "127.0.0.1"),
        ("AXFR with EDNS", "tcp", dns.message.make_query(ZONE, "AXFR", use_edns=0), "127.0.0.1"),
        ("IXFR with EDNS", "tcp", ixfr(ZONE, held - 1, use_edns=0), "127.0.0.1"),
        ("AXFR with EDNS version 1", "tcp", dns.message.make_query(ZONE, "AXFR", use_edns=1),
         "127.0.0.1"),
        ("AXFR below the apex", "tcp", dns.message.make_query(below, "AXFR"), "127.0.0.1"),
        ("the same, with EDNS", "tcp", dns.message.make_query(below, "AXFR", use_edns=0),
         "127.0.0.1"),
        ("IXFR below the apex", "tcp", ixfr(below, held - 1), "127.0.0.1"),
        ("AXFR outside every zone", "tcp", dns.message.make_query("example.com.", "AXFR"),
         "127.0.0.1"),
        ("IXFR without the client's SOA", "tcp", ixfr(ZONE, None), "127.0.0.1"),
        ("the same, with EDNS", "tcp", ixfr(ZONE, None, use_edns=0), "127.0.0.1"),
        ("AXFR from an address not allowed", "tcp", dns.message.make_query(ZONE, "AXFR"),
         "127.0.0.2"),
        ("AXFR below the apex from it", "tcp", dns.message.make_query(below, "AXFR"),
         "127.0.0.2"),
        ("IXFR without the client's SOA from it", "tcp", ixfr(ZONE, None), "127.0.0.2"),
    ]


def test_every_edge_is_answered_as_bind_answers_it(servers: tuple[Dnsside, BindPrimary]
                                                    ) -> None:
    srv, bind = servers
    held = serial(srv.port, ZONE)
    assert held is not None
    differ = []
    for what, transport, q, source in edges(held):
        ask = over_udp if transport == "udp" else over_tcp
        ours, bind_says = ask(srv.port, q, source), ask(bind.port, q, source)
        print(f"{what} ({transport}, from {source}): dnsside {ours}, BIND {bind_says}")
        if ours != bind_says:
            differ.append((what, transport, source, ours, bind_says))
    assert differ == []
    # and what the issue saw, as figures: the UDP IXFR is one SOA, the current one
    rcode, _opt, tc, records = over_udp(srv.port, ixfr(ZONE, held - 1))
    assert (rcode, tc) == ("NOERROR", False) and len(records) == 1
    assert records[0].startswith(f"{ZONE} SOA ") and f" {held} " in records[0]
    every = over_tcp(srv.port, dns.message.make_query(ZONE, "AXFR", use_edns=0))
    assert every and all(opt for _r, opt, _tc, _rr in every)


def test_dnspython_tries_udp_first_then_takes_the_differences_over_tcp(
        servers: tuple[Dnsside, BindPrimary]) -> None:
    """dns.query.inbound_xfr(udp_mode=TRY_FIRST): the single SOA over UDP tells it to ask
    over TCP (dns.xfr.UseTCP), where it gets the zone; it failed with FormError on an
    empty answer with TC."""
    srv, bind = servers
    for port in (srv.port, bind.port):
        held = serial(port, ZONE)
        assert held is not None
        zone = dns.zone.Zone(ZONE)
        q, _ = dns.xfr.make_query(zone, serial=held - 1)
        dns.query.inbound_xfr("127.0.0.1", zone, q, port=port,
                              udp_mode=dns.query.UDPMode.TRY_FIRST, lifetime=30)
        soa = zone.get_rdataset(ZONE, "SOA")
        assert soa is not None and soa[0].serial == held
        assert len(list(zone.iterate_rdatas())) > 20


def test_from_the_first_answer_on_the_soa_names_a_version_that_transfers() -> None:
    """Issue 36, item 5: the first SOA a client gets names the first version, cut at the
    initial sync before any answer, and a transfer right after it sends that version (it
    used to be the second the process started, with no version behind it until a second
    later: a transfer meanwhile got SERVFAIL)."""
    with Dnsside("--source", str(DEMO), "--cluster-name", "east", "--allow-transfer",
                 "127.0.0.1/32", wait_synced=False) as srv:

        def first_soa() -> int | None:
            msg = srv.query(ZONE, "SOA", timeout=0.5)
            if msg.rcode() != dns.rcode.NOERROR:
                return None  # SERVFAIL until the first sync
            return int(msg.answer[0][0].serial)

        held = wait_for(first_soa, 15, "the first answer")
        msgs = list(dns.query.xfr("127.0.0.1", ZONE, port=srv.port, lifetime=10))
        assert msgs[0].rcode() == dns.rcode.NOERROR
        assert msgs[0].answer[0].rdtype == dns.rdatatype.SOA
        assert msgs[0].answer[0][0].serial == held
        srv.wait_log(f"zone version {held} cut at the initial sync")


def test_explain_names_a_secondary_that_does_not_answer_its_notify() -> None:
    """A --notify secondary that never answers (a socket this test holds and never reads)
    is told in the log once and in /debug/explain, where a zone's serial is (issue 36)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{silent.getsockname()[1]}"
        with demo_server("--allow-transfer", "127.0.0.1/32", "--notify", target) as srv:
            srv.wait_log(f"notify: {target} does not answer; the NOTIFY of")
            status, body = srv.http("/debug/explain?name=nginx-svc.default.svc-global")
            assert status == 200, body
            state = json.loads(body)["zone"]["notify"][target]
            assert state.startswith("does not answer: NOTIFY sent again, at most 10 times")
            assert srv.series(f'dnsside_notify_given_up{{target="{target}"}}') == 0


DOCS = Path(__file__).resolve().parents[2] / "docs" / "zone-transfer.md"


def docs_block(heading: str) -> str:
    """The first fenced block after ``heading`` in docs/zone-transfer.md, as printed."""
    text = DOCS.read_text()
    after = text[text.index(heading):]
    start = after.index("```\n") + 4
    return after[start:after.index("```", start)]


def test_the_docs_knot_configuration_runs_outside_systemd(tmp_path: Path) -> None:
    """Issue 36, item 6: docs/zone-transfer.md's knot.conf, as printed but for the
    addresses, paths and secret (and the clusterset.local entry uncommented, as the docs
    say to with --mcs-zone), started by hand with `knotd -c`: it used to stop at once
    without systemd's /run/knot. The directories are made as the docs say (`install -d -o
    knot -g knot`); run by another user than root, the `user:` line names that user."""
    secret = "cTaeNLkiyNPuYPuAmMvWRxrqIubyQ0EQavBnSShpBDU="
    key = tmp_path / "xfr.key"
    key.write_text(f'key "xfr-key" {{\n\talgorithm hmac-sha256;\n\tsecret "{secret}";\n}};\n')
    conf = docs_block("### Knot DNS 3")
    owner = "knot:knot"
    if os.geteuid() != 0:
        owner = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"
    # pytest's tmp_path is its user's alone: knot's directories go where knot may reach
    home = Path(tempfile.mkdtemp(prefix="knot-by-hand-"))
    home.chmod(0o755)
    run, lib = home / "run", home / "lib"
    for directory in (run, lib):
        subprocess.run(["install", "-d", "-o", owner.split(":")[0], "-g", owner.split(":")[1],
                        str(directory)], check=True)
    flags = ("--source", str(DEMO), "--cluster-name", "east", "--mcs-zone", "clusterset.local",
             "--allow-transfer", "127.0.0.1/32", "--tsig-key-file", str(key))
    with contextlib.ExitStack() as cleanup, Dnsside(*flags) as srv:
        knot = KnotByHand(tmp_path, conf.replace("10.0.0.53@53", f"127.0.0.1@{srv.port}")
                          .replace("address: 10.0.0.53", "address: 127.0.0.1")
                          .replace('"/run/knot"', f'"{run}"')
                          .replace('"/var/lib/knot"', f'"{lib}"')
                          .replace("<the secret in xfr.key>", secret)
                          .replace("user: knot:knot", f"user: {owner}")
                          .replace("  # - domain: clusterset.local", "  - domain: clusterset.local")
                          .replace("  #   ", "    "))
        cleanup.callback(shutil.rmtree, home, ignore_errors=True)
        cleanup.callback(knot.stop)
        knot.start(srv)
        for zone in ("svc-global.", "clusterset.local."):
            assert serial(knot.port, zone) == serial(srv.port, zone)
        assert (lib / "clusterset.local.zone").exists()  # the zone file, written at once


class KnotByHand(PeerProcess):
    """knotd started from a shell (no systemd), from a config text with 10.0.0.54@53 in it."""

    kind = "knot-by-hand"

    def __init__(self, tmp: Path, conf: str) -> None:
        super().__init__(tmp)
        self.conf = conf

    def start(self, primary: Dnsside) -> None:
        def argv() -> list[str]:
            path = self.tmp / "knot.conf"
            path.write_text(self.conf.replace("10.0.0.54@53", f"127.0.0.1@{self.port}"))
            check(["knotc", "-c", str(path), "conf-check"])
            return ["knotd", "-c", str(path)]

        def current() -> bool:
            self.exited()
            return all(serial(self.port, z) == serial(primary.port, z)
                       for z in ("svc-global.", "clusterset.local."))

        self.start_on_a_free_port(argv, current, 30, "knotd to transfer both zones")
