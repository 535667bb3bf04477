"""The zone as a whole and the EDNS rules of issue 10, through real sockets.

* The apex is the zone's name server: `Z. NS Z.`, glue `Z. A/AAAA` from
  `--ns-address` (default `$POD_IP`, else a specific `--listen` address, else
  127.0.0.1); the SOA MNAME names it; `named-checkzone` accepts the zone as served.
* The DO bit is copied into the OPT record of every reply (RFC 3225 §3), on the
  fast path and the slow one.
* Extended DNS Errors (RFC 8914) on replies to EDNS queries: SERVFAIL before the
  first sync carries EDE 14 (Not Ready), REFUSED outside the zones EDE 20 (Not
  Authoritative).
* A UDP reply that must be truncated carries, with TC=1, as many whole answer
  records as fit.
* The apex answers SERVFAIL before the first sync, like every in-zone name.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dnsside.serving.app import ns_addresses
from testkit import topology as t
from testkit.dig import dig
from testkit.fuzzing import PROFILE, responder
from testkit.rawdns import (
    AAAA,
    NS,
    SOA,
    SRV,
    A,
    bulk_objects,
    exchange,
    opt_rr,
    option,
    parse,
    query,
    question_of,
)
from testkit.serve import DEMO, Dnsside, answers, demo_server, run_cli, wait_for
from testkit.threadedkube import ThreadedKube

TRANSPORTS = ["udp", "tcp"]
NGINX = "nginx-svc.default.svc-global"
ROACH = "cockroachdb.db.svc-global"
BIG = "big.bulk.svc-global"
EDE = 15
DO = 0x8000


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dnsside]:
    """The demo plus `big.bulk` (120 addresses, too big for any UDP reply)."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += bulk_objects("big", "bulk", 120, 99)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    with Dnsside("--source", str(path), "--cluster-name", "east") as s:
        yield s


def ask(srv: Dnsside, wire: bytes, transport: str = "udp") -> bytes:
    reply = exchange(srv.host, srv.port, wire, transport, timeout=3.0)
    assert reply is not None, "no reply"
    return reply


def ede(msg: dns.message.Message) -> list[tuple[int, str]]:
    return [(o.code, o.text or "") for o in msg.options if o.otype == EDE]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- NS and glue


def test_dig_ns_norec_shows_the_glue(srv: Dnsside) -> None:
    d = dig(srv, "svc-global", "NS", "+norec")
    assert d.status == "NOERROR" and d.flags == {"qr", "aa"}
    assert d.sections["ANSWER"] == [["svc-global.", "5", "IN", "NS", "svc-global."]]
    assert d.sections["ADDITIONAL"] == [["svc-global.", "5", "IN", "A", "127.0.0.1"]]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ns_target_exists_and_soa_names_it(srv: Dnsside, transport: str) -> None:
    ns = parse(ask(srv, query("svc-global", NS), transport))
    assert answers(ns, "NS") == ["svc-global."]
    glue = [(rr.name.to_text(), rd.to_text()) for rr in ns.additional for rd in rr]
    assert glue == [("svc-global.", "127.0.0.1")]
    a = parse(ask(srv, query("svc-global", A), transport))
    assert a.flags & dns.flags.AA and answers(a) == ["127.0.0.1"]
    aaaa = parse(ask(srv, query("svc-global", AAAA), transport))
    assert aaaa.rcode() == dns.rcode.NOERROR and not aaaa.answer, "no IPv6 address: NODATA"
    soa = parse(ask(srv, query("svc-global", SOA), transport))
    assert soa.answer[0][0].mname.to_text() == "svc-global."


def test_no_generated_name_can_be_the_ns_target(tmp_path: Path) -> None:
    """Every name a Kubernetes object can produce has at least two labels below the
    apex (`<svc>.<ns>.Z`; `<ns>.Z` is an empty non-terminal): a Service `ns` in
    namespace `dns` (the old NS target's name) is just another service now, and the
    NS target, the apex, is untouched by it."""
    objs = [t.service("dns", "ns", None, [("dns", 53)], {"mirror.linkerd.io/exported": "true"}),
            t.endpoint_slice("dns", "ns-1", "ns", [
                {"addresses": ["10.42.9.9"], "hostname": "ns", "conditions": {"ready": True}}],
                [("dns", 53)])]
    path = t.write(tmp_path / "ns.json", objs)
    with Dnsside("--source", str(path), "--cluster-name", "east") as srv:
        assert answers(srv.query("ns.dns.svc-global", "A")) == ["10.42.9.9"]
        assert answers(srv.query("svc-global", "A")) == ["127.0.0.1"]
        assert answers(srv.query("svc-global", "NS"), "NS") == ["svc-global."]
        assert srv.query("dns.svc-global", "A").rcode() == dns.rcode.NOERROR  # ENT


def dump_zone(srv: Dnsside, zone: str, path: Path) -> str:
    """The zone's apex as dnsside serves it (SOA, NS, the NS target's A/AAAA), by dig."""
    lines = []
    for rtype in ("SOA", "NS", "A", "AAAA"):
        out = subprocess.run(["dig", f"@{srv.host}", "-p", str(srv.port), "+noall", "+answer",
                              "+norec", zone, rtype], capture_output=True, text=True, timeout=30,
                             check=True).stdout
        lines += [line for line in out.splitlines() if line.strip()]
    path.write_text("\n".join(lines) + "\n")
    return path.read_text()


def named_checkzone(zone: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["named-checkzone", zone, str(path)], capture_output=True, text=True,
                          timeout=30)


def test_named_checkzone_accepts_the_zone_as_served(tmp_path: Path) -> None:
    with demo_server("--zone", "svc-global.", "--zone", "global.example.",
                     "--ns-address", "127.0.0.1", "--ns-address", "::1") as srv:
        for zone in ("svc-global", "global.example"):
            text = dump_zone(srv, zone, tmp_path / f"{zone}.db")
            assert f"{zone}.\t\t5\tIN\tNS\t{zone}." in text.replace(" ", "\t") or \
                f"IN\tNS\t{zone}." in text, text
            assert "IN\tA\t127.0.0.1" in text and "IN\tAAAA\t::1" in text, text
            check = named_checkzone(zone, tmp_path / f"{zone}.db")
            assert check.returncode == 0 and check.stdout.strip().endswith("OK"), check.stdout
    # The checker bites: the NS target of old, without an address, is rejected.
    old = tmp_path / "old.db"
    old.write_text(text.replace(f"NS\t{zone}.", f"NS\tns.dns.{zone}.")
                   .replace("IN\tA\t127.0.0.1", "IN\tTXT\t\"x\""))
    check = named_checkzone("global.example", old)
    assert check.returncode != 0 and "has no address records" in check.stdout, check.stdout


# --------------------------------------------------------------------------- --ns-address


def test_ns_address_defaults() -> None:
    assert ns_addresses(None, None, "127.0.0.1:5353") == ("127.0.0.1",)
    assert ns_addresses(None, None, "127.0.0.7:53") == ("127.0.0.7",)
    assert ns_addresses(None, None, "[::1]:5353") == ("::1",)
    assert ns_addresses(None, None, "0.0.0.0:5353") == ("127.0.0.1",), "not a specific one"
    assert ns_addresses(None, None, "[::]:5353") == ("127.0.0.1",)
    assert ns_addresses(None, None, ":5353") == ("127.0.0.1",)
    assert ns_addresses(None, None, "localhost:5353") == ("127.0.0.1",), "a name: not an address"
    assert ns_addresses(None, None, None) == ("127.0.0.1",), "explain has no --listen"
    assert ns_addresses(None, "10.42.0.17", "0.0.0.0:5353") == ("10.42.0.17",)
    assert ns_addresses(None, "10.42.0.17", "127.0.0.1:5353") == ("10.42.0.17",), "$POD_IP first"
    assert ns_addresses(None, "", "127.0.0.3:53") == ("127.0.0.3",), "empty $POD_IP: unset"
    assert ns_addresses(["fd00:0::53", "10.0.0.1", "fd00::53"], "10.42.0.17", None) == (
        "fd00::53", "10.0.0.1"), "explicit wins, normalised, deduplicated"


@pytest.mark.parametrize(
    ("explicit", "pod_ip", "message"),
    [(["nope"], None, "--ns-address (or DNSSIDE_NS_ADDRESS): 'nope' is not an IPv4 or IPv6"),
     (["10.0.0.1", "10.0.0.300"], None, "'10.0.0.300' is not an IPv4 or IPv6 address"),
     (None, "pod", "$POD_IP: 'pod' is not an IPv4 or IPv6 address"),
     (["fe80::1%eth0"], None, "a scoped address cannot be published")],
)
def test_bad_ns_address_names_where_it_came_from(
    explicit: list[str] | None, pod_ip: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ns_addresses(explicit, pod_ip, "127.0.0.1:53")


def test_bad_ns_address_is_a_clean_cli_error() -> None:
    out = run_cli(["serve", "--source", str(DEMO), "--ns-address", "ns.example"])
    assert out.returncode == 2
    assert "dnsside: --ns-address (or DNSSIDE_NS_ADDRESS): 'ns.example' is not" in out.stderr
    assert "Traceback" not in out.stderr


def glue_of(srv: Dnsside) -> list[str]:
    ns = srv.query("svc-global", "NS")
    a = sorted(rd.to_text() for rr in ns.additional for rd in rr)
    direct = answers(srv.query("svc-global", "A"), "A") + answers(
        srv.query("svc-global", "AAAA"), "AAAA")
    assert sorted(direct) == a, "the glue is the apex's own A/AAAA"
    return a


def test_ns_address_from_pod_ip_explicit_env_and_ipv6_listen() -> None:
    with demo_server(env={"POD_IP": "127.0.5.3"}) as srv:
        assert glue_of(srv) == ["127.0.5.3"]
        assert "name server of svc-global.: the apex itself, at 127.0.5.3" in "\n".join(srv.lines)
    with demo_server("--ns-address", "127.0.5.4", "--ns-address", "fd00:5::3",
                     env={"POD_IP": "127.0.5.3"}) as srv:
        assert glue_of(srv) == ["127.0.5.4", "fd00:5::3"]
        ns = srv.query("svc-global", "NS")
        assert [dns.rdatatype.to_text(rr.rdtype) for rr in ns.additional] == ["A", "AAAA"]
    with demo_server(env={"DNSSIDE_NS_ADDRESS": "fd00:5::4,127.0.5.5"}) as srv:
        assert glue_of(srv) == ["127.0.5.5", "fd00:5::4"]
    with Dnsside("--source", str(DEMO), "--cluster-name", "east", listen="[::1]:0") as srv:
        assert srv.host == "::1" and glue_of(srv) == ["::1"]
        assert srv.query("svc-global", "A").answer == [], "IPv6 only: NODATA for A"


# --------------------------------------------------------------------------- DO bit


# (name, qtype, which path answers it): the fast path takes names with a pre-encoded
# answer and a plain OPT record; everything else goes the slow path.
DO_CASES = [
    (NGINX, A, "fast"), ("svc-global", NS, "fast"), ("nope.svc-global", A, "slow"),
    ("default.svc-global", A, "slow"), ("example.com", A, "slow"), ("svc-global", 252, "slow"),
]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("name", "qtype", "path"), DO_CASES)
def test_do_bit_copied(srv: Dnsside, transport: str, name: str, qtype: int, path: str) -> None:
    for do in (True, False, True):  # the fast path caches OPT records: alternate
        for options in (b"", option(65001, b"x")):  # an option sends even a hit the slow way
            reply = ask(srv, query(name, qtype, edns=opt_rr(do=do, options=options)), transport)
            msg = parse(reply)
            assert msg.edns == 0 and msg.payload == 1232
            assert bool(msg.ednsflags & DO) == do, (name, do, options)
            assert msg.ednsflags & ~DO == 0, "no other flag"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_do_bit_copied_into_badvers_and_notimp(srv: Dnsside, transport: str) -> None:
    for do in (True, False):
        bad = parse(ask(srv, query(NGINX, edns=opt_rr(version=1, do=do)), transport))
        assert bad.rcode() == dns.rcode.BADVERS and bool(bad.ednsflags & DO) == do
        notimp = ask(srv, query(NGINX, flags=4 << 11, edns=opt_rr(do=do)), transport)
        assert notimp[3] & 0xF == dns.rcode.NOTIMP
        assert notimp[-11:-8] == b"\x00\x00\x29" and bool(notimp[-4] & 0x80) == do


def test_dig_dnssec_shows_do(srv: Dnsside) -> None:
    assert "flags: do;" in (dig(srv, NGINX, "+dnssec").edns or "")
    assert "flags:;" in (dig(srv, NGINX).edns or "")
    assert "flags: do;" in (dig(srv, "nope.svc-global", "+dnssec").edns or "")


# --------------------------------------------------------------------------- EDE


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("name", "qclass"), [("example.com", 1), ("com", 1), (".", 1),
                                              (NGINX, 3), ("svc-global", 255)])
def test_refused_carries_ede_not_authoritative(
    srv: Dnsside, transport: str, name: str, qclass: int
) -> None:
    for do in (False, True):
        msg = parse(ask(srv, query(name, qclass=qclass, edns=opt_rr(do=do)), transport))
        assert msg.rcode() == dns.rcode.REFUSED
        assert ede(msg) == [(20, "dnsside serves only its own zones, class IN")]
        assert bool(msg.ednsflags & DO) == do
    plain = parse(ask(srv, query(name, qclass=qclass), transport))
    assert plain.rcode() == dns.rcode.REFUSED and plain.edns == -1, "no EDNS, no EDE"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_answers_carry_no_ede(srv: Dnsside, transport: str) -> None:
    for name, qtype in ((NGINX, A), ("nope.svc-global", A), ("default.svc-global", A),
                        ("svc-global", SOA), (BIG, A)):
        msg = parse(ask(srv, query(name, qtype, edns=opt_rr(do=True)), transport))
        assert not msg.options, (name, msg.options)


def test_dig_shows_ede(srv: Dnsside) -> None:
    d = dig(srv, "example.com")
    assert d.status == "REFUSED"
    assert "; EDE: 20 (Not Authoritative): (dnsside serves only its own zones, class IN)" \
        in d.opt_lines, d.opt_lines


def test_before_the_first_sync_everything_in_the_zone_is_servfail_with_ede(
    kube: ThreadedKube,
) -> None:
    """The apex too (SOA, NS, its address): nothing answers NOERROR while /readyz says 503."""
    kube.call(kube.kube.fail_next, 10_000, 500, match=lambda r: "services" in r.path)
    with Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                 "--kube-backoff-cap", "0.3", wait_synced=False) as srv:
        wait_for(lambda: srv.query(NGINX), what="an answer")
        assert srv.http("/readyz")[0] == 503
        for transport in TRANSPORTS:
            for name, qtype in ((NGINX, A), ("svc-global", SOA), ("svc-global", NS),
                                ("svc-global", A), ("nope.svc-global", A)):
                for do in (False, True):
                    wire = query(name, qtype, edns=opt_rr(do=do))
                    msg = parse(ask(srv, wire, transport))
                    assert msg.rcode() == dns.rcode.SERVFAIL, (name, qtype, msg)
                    assert not msg.answer and not msg.flags & dns.flags.AA
                    assert ede(msg) == [(14, "dnsside has not synced its source yet")]
                    assert bool(msg.ednsflags & DO) == do
                plain = parse(ask(srv, query(name, qtype), transport))
                assert plain.rcode() == dns.rcode.SERVFAIL and plain.edns == -1
            out = parse(ask(srv, query("example.com", A, edns=opt_rr()), transport))
            assert out.rcode() == dns.rcode.REFUSED and ede(out)[0][0] == 20
        d = dig(srv, "svc-global", "SOA")
        assert d.status == "SERVFAIL"
        assert "; EDE: 14 (Not Ready): (dnsside has not synced its source yet)" in d.opt_lines
        kube.call(kube.kube._failures.clear)
        srv.wait_log("initial sync done")
        assert srv.query("svc-global", "SOA").rcode() == dns.rcode.NOERROR
        assert answers(srv.query("svc-global", "NS"), "NS") == ["svc-global."]
        assert answers(srv.query("svc-global", "A")) == ["127.0.0.1"]
        assert srv.http("/readyz")[0] == 200


# --------------------------------------------------------------------------- truncation


def check_partial(reply: bytes, wire: bytes, limit: int, full: dns.message.Message,
                  rdtype: str) -> int:
    """A TC reply with as many whole answer records as fit: counts right, nothing else."""
    msg = parse(reply)  # parses: every record whole, counts match the records
    assert msg.flags & dns.flags.TC and msg.flags & dns.flags.AA
    assert msg.rcode() == dns.rcode.NOERROR
    assert len(reply) <= limit
    q = question_of(wire)
    assert reply[12 : 12 + len(q)] == q
    an, ns, ar = struct.unpack("!3H", reply[6:12])
    n = len(answers(msg, rdtype))
    assert an == n > 0 and ns == 0 and ar == (1 if msg.edns == 0 else 0)
    assert set(answers(msg, rdtype)) <= set(answers(full, rdtype))
    # Maximal: the next record would not have fitted.
    sizes = [len(r) for r in _records(reply, an)]
    assert len(reply) + max(sizes) > limit
    return n


def _records(reply: bytes, count: int) -> list[bytes]:
    """The first ``count`` answer records, raw (owners are 2-byte pointers here)."""
    i = 12
    while reply[i]:
        i += reply[i] + 1
    i += 5
    out = []
    for _ in range(count):
        start = i
        i += 2 if reply[i] >= 0xC0 else 0
        rdlen = struct.unpack_from("!H", reply, i + 8)[0]
        i += 10 + rdlen
        out.append(reply[start:i])
    return out


@pytest.mark.parametrize("payload", [None, 512, 700, 1000, 1232, 4096])
@pytest.mark.parametrize(("name", "qtype"), [(BIG, A), (BIG, SRV), (ROACH, SRV),
                                             ("BiG.bUlK.SvC-gLoBaL", A)])
def test_udp_truncation_keeps_the_whole_records_that_fit(
    srv: Dnsside, payload: int | None, name: str, qtype: int
) -> None:
    rdtype = "A" if qtype == A else "SRV"
    full = parse(ask(srv, query(name, qtype), "tcp"))
    limit = 512 if payload is None else min(max(payload, 512), 1232)
    for options in (b"", option(65001, b"slow path")):
        if payload is None and options:
            continue
        edns = None if payload is None else opt_rr(payload, options=options)
        wire = query(name, qtype, edns=edns)
        reply = ask(srv, wire)
        if ROACH in name.lower() and limit >= 700:  # fits once its glue is dropped: no TC
            msg = parse(reply)
            assert not msg.flags & dns.flags.TC and len(reply) <= limit
            assert answers(msg, "SRV") == answers(full, "SRV")
            continue
        n = check_partial(reply, wire, limit, full, rdtype)
        assert n < len(answers(full, rdtype))


def test_musl_style_client_gets_addresses_without_tcp(srv: Dnsside) -> None:
    """No EDNS, UDP only, ignore TC (musl before 1.2.4): addresses, not an empty reply."""
    msg = parse(ask(srv, query(BIG, A)))
    assert msg.flags & dns.flags.TC and len(answers(msg)) == 29  # (512 - 12 - 25) // 16


def test_kdig_shows_a_partial_answer(srv: Dnsside) -> None:
    from test_dig import kdig

    [tc] = kdig(srv, "+noedns", "+ignore", BIG, "A")
    assert tc["TC"] == 1 and tc["ANCOUNT"] == 29 and len(tc["answerRRs"]) == 29


@settings(parent=PROFILE)
@given(name=st.sampled_from([NGINX, ROACH, "_http._tcp." + NGINX, "svc-global",
                             "nope.svc-global", "example.com", "default.svc-global"]),
       qtype=st.sampled_from([A, AAAA, SRV, NS, SOA, 255]),
       payload=st.none() | st.integers(0, 0xFFFF), do=st.booleans(),
       options=st.sampled_from([b"", option(10, b"12345678"), option(65001, b"")]))
def test_property_do_copied_and_truncation_whole(
    name: str, qtype: int, payload: int | None, do: bool, options: bytes
) -> None:
    """In-process over the demo: every UDP reply to an EDNS query copies DO; every TC
    reply parses (whole records, right counts) and fits the limit."""
    r = responder()
    edns = None if payload is None else opt_rr(payload, do=do, options=options)
    wire = query(name, qtype, edns=edns)
    reply = r.respond(wire, True)
    assert reply is not None
    msg = parse(reply)
    limit = 512 if payload is None else min(max(payload, 512), 1232)
    assert len(reply) <= limit
    if payload is not None:
        assert msg.edns == 0 and bool(msg.ednsflags & DO) == do
    if msg.flags & dns.flags.TC:
        assert msg.answer and not msg.additional and not msg.authority


# --------------------------------------------------------------------------- manifests


def test_manifests_give_dnsside_its_pod_ip() -> None:
    """Both installs set POD_IP from the downward API, so the glue is the pod's address."""
    from test_deploy import base_deployment, sidecar_container

    (base,) = base_deployment()["spec"]["template"]["spec"]["containers"]
    for container in (base, sidecar_container()):
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert "DNSSIDE_NS_ADDRESS" not in env, "the default is the pod's address"
    assert ns_addresses(None, "10.42.0.17", "0.0.0.0:5353") == ("10.42.0.17",)
