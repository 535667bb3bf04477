"""dig (BIND) and kdig (Knot) against `dnsside serve`: the protocol rules as operators see them.

dig's text output is parsed (header, flags, counts, OPT pseudo-section,
sections); kdig speaks JSON (`+json`, RFC 8427), which is read as data.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.dig import dig, kdig, rcode, rdata
from testkit.serve import Dnsside, demo_server, expect_udp_io

NGINX = "nginx-svc.default.svc-global"
NGINX_A = ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]
ROACH = "cockroachdb.db.svc-global"


@pytest.fixture(scope="module")
def srv(udp_io: str) -> Iterator[Dnsside]:
    with demo_server() as s:
        yield expect_udp_io(s, udp_io)


# --------------------------------------------------------------------------- dig




def test_dig_answer_flags(srv: Dnsside) -> None:
    d = dig(srv, NGINX, "A")
    assert d.status == "NOERROR" and d.opcode == "QUERY"
    assert d.flags == {"qr", "aa", "rd"}, "AA set, RD copied, never RA or AD"
    assert d.rdata("ANSWER", "A") == NGINX_A
    assert "recursion requested but not available" in d.text


def test_dig_short(srv: Dnsside) -> None:
    out = subprocess.run(["dig", f"@{srv.host}", "-p", str(srv.port), "+short", NGINX],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert sorted(out.split()) == NGINX_A


def test_dig_srv_with_glue(srv: Dnsside) -> None:
    d = dig(srv, "_http._tcp." + NGINX, "SRV")
    assert d.status == "NOERROR" and d.counts["ANSWER"] == 5
    targets = sorted(rr.split()[3] for rr in d.rdata("ANSWER", "SRV"))
    glue = sorted(rr[0] for rr in d.sections["ADDITIONAL"] if rr[3] == "A")
    assert targets == glue and len(glue) == 5


def test_dig_flags_copied(srv: Dnsside) -> None:
    assert dig(srv, NGINX, "+norecurse").flags == {"qr", "aa"}
    assert dig(srv, NGINX, "+cdflag").flags == {"qr", "aa", "rd", "cd"}
    assert "ad" not in dig(srv, NGINX, "+adflag").flags


def test_dig_edns(srv: Dnsside) -> None:
    # dig sends a COOKIE by default; with NSID, an unknown option, DO and a 4096 buffer:
    d = dig(srv, NGINX, "+bufsize=4096", "+dnssec", "+nsid", "+ednsopt=65001:abcd")
    assert d.status == "NOERROR"
    assert d.edns == "; EDNS: version: 0, flags: do; udp: 1232", "1232, DO copied, version 0"
    assert d.opt_lines == [d.edns], "no option echoed: no COOKIE, NSID or unknown option"
    assert "ad" not in d.flags and d.rdata("ANSWER", "A") == NGINX_A
    plain = dig(srv, NGINX, "+noedns")
    assert plain.edns is None and "ADDITIONAL: 0" in plain.text


def test_dig_badvers(srv: Dnsside) -> None:
    d = dig(srv, NGINX, "+edns=1", "+noednsnegotiation")
    assert d.status == "BADVERS"
    assert d.edns is not None and "version: 0" in d.edns
    assert d.counts["ANSWER"] == 0


def test_dig_truncation_then_tcp(srv: Dnsside) -> None:
    tc = dig(srv, ROACH, "SRV", "+noedns", "+ignore")
    # As many whole SRV records as fit in 512 bytes, no glue.
    assert "tc" in tc.flags and tc.counts == {"QUERY": 1, "ANSWER": 7, "AUTHORITY": 0,
                                              "ADDITIONAL": 0}
    assert len(tc.rdata("ANSWER", "SRV")) == 7
    retried = dig(srv, ROACH, "SRV", "+noedns")
    assert "Truncated, retrying in TCP mode" in retried.text
    assert retried.counts["ANSWER"] == 10 and retried.counts["ADDITIONAL"] == 5
    assert "(TCP)" in retried.text


def test_dig_drops_glue_before_truncating(srv: Dnsside) -> None:
    full = dig(srv, ROACH, "SRV", "+bufsize=1232")
    assert "tc" not in full.flags and full.counts["ADDITIONAL"] == 6  # 5 A + OPT
    size = int(re.findall(r"MSG SIZE\s+rcvd: (\d+)", full.text)[-1])
    part = dig(srv, ROACH, "SRV", f"+bufsize={size - 1}", "+ignore")
    assert "tc" not in part.flags
    assert part.counts["ANSWER"] == 10 and part.counts["ADDITIONAL"] == 1  # only OPT


def test_dig_tcp(srv: Dnsside) -> None:
    d = dig(srv, NGINX, "+tcp")
    assert "(TCP)" in d.text and d.rdata("ANSWER", "A") == NGINX_A
    assert d.flags == {"qr", "aa", "rd"}


@pytest.mark.parametrize("opcode", ["notify", "status", "update", "15"])
def test_dig_opcode_notimp(srv: Dnsside, opcode: str) -> None:
    d = dig(srv, "svc-global", "SOA", f"+opcode={opcode}")
    assert d.status == "NOTIMP"
    assert d.opcode.lower() == opcode or d.opcode == "RESERVED15"
    assert "aa" not in d.flags
    assert d.edns is not None, "an EDNS query gets an OPT back, even with NOTIMP"
    assert "retry with '+noedns'" not in d.text


def test_dig_header_only_is_formerr(srv: Dnsside) -> None:
    d = dig(srv, "+header-only", "svc-global")
    assert d.status == "FORMERR" and d.counts["QUERY"] == 0


@pytest.mark.parametrize("qclass", ["CH", "HS", "ANY"])
def test_dig_class_refused(srv: Dnsside, qclass: str) -> None:
    d = dig(srv, "-c", qclass, "version.bind" if qclass == "CH" else NGINX, "TXT")
    assert d.status == "REFUSED" and "aa" not in d.flags


def test_dig_any_is_the_a_rrset(srv: Dnsside) -> None:
    """RFC 8482: one real RRset (a Java client asking for "A AAAA" sends ANY)."""
    d = dig(srv, ROACH, "ANY")
    a = dig(srv, ROACH, "A")
    assert d.status == "NOERROR" and d.counts["ANSWER"] == 5
    assert {rr[3] for rr in d.sections["ANSWER"]} == {"A"}
    # The same RRset, each in its turn (--round-robin: the A answer's next start).
    assert sorted(d.sections["ANSWER"]) == sorted(a.sections["ANSWER"])


def test_dig_any_at_the_apex_is_hinfo(srv: Dnsside) -> None:
    if dig(srv, "svc-global", "A").counts["ANSWER"]:  # an apex with addresses answers those
        assert dig(srv, "svc-global", "ANY").sections["ANSWER"] == dig(
            srv, "svc-global", "A").sections["ANSWER"]
        return
    d = dig(srv, "svc-global", "ANY")
    assert d.status == "NOERROR" and d.counts["ANSWER"] == 1
    assert d.sections["ANSWER"][0][3:] == ["HINFO", '"RFC8482" ""']
    assert int(re.findall(r"MSG SIZE\s+rcvd: (\d+)", d.text)[-1]) < 100


def test_dig_nodata(srv: Dnsside) -> None:
    for name in ("default.svc-global", "_tcp." + NGINX):
        d = dig(srv, name, "A")
        assert d.status == "NOERROR" and d.counts["ANSWER"] == 0 and "aa" in d.flags
        assert [rr[3] for rr in d.sections["AUTHORITY"]] == ["SOA"]
        assert d.sections["AUTHORITY"][0][0] == "svc-global."


def test_dig_nxdomain(srv: Dnsside) -> None:
    d = dig(srv, "metrics.default.svc-global", "A")
    assert d.status == "NXDOMAIN" and "aa" in d.flags
    assert [rr[3] for rr in d.sections["AUTHORITY"]] == ["SOA"]


def test_dig_refused_outside(srv: Dnsside) -> None:
    d = dig(srv, "example.com", "A")
    assert d.status == "REFUSED" and "aa" not in d.flags and d.counts["ANSWER"] == 0


def test_dig_axfr_refused(srv: Dnsside) -> None:
    d = dig(srv, "svc-global", "AXFR")
    assert "Transfer failed" in d.text


def test_dig_0x20(srv: Dnsside) -> None:
    d = dig(srv, "NgInX-SvC.DeFaUlT.sVc-GlObAl", "A")
    assert d.sections["QUESTION"][0][0] == "NgInX-SvC.DeFaUlT.sVc-GlObAl."
    assert {rr[0] for rr in d.sections["ANSWER"]} == {"NgInX-SvC.DeFaUlT.sVc-GlObAl."}
    assert d.rdata("ANSWER", "A") == NGINX_A


# --------------------------------------------------------------------------- kdig




def opt(msg: dict[str, Any]) -> dict[str, Any] | None:
    opts = [rr for rr in msg.get("additionalRRs", []) if rr["TYPE"] == 41]
    assert len(opts) <= 1
    return opts[0] if opts else None


@pytest.mark.parametrize("transport", ["+notcp", "+tcp"])
def test_kdig_answers(srv: Dnsside, transport: str) -> None:
    [a] = kdig(srv, transport, NGINX, "A")
    assert a["AA"] == 1 and a["RA"] == 0 and a["RCODE"] == 0 and rdata(a, "A") == NGINX_A
    # With EDNS: the five targets' glue of a rotating answer takes more than 512 bytes
    # (docs/protocol.md, answer order).
    [srv_] = kdig(srv, transport, "_http._tcp." + NGINX, "SRV", "+bufsize=1232")
    assert len(rdata(srv_, "SRV")) == 5 and len(rdata(srv_, "A", "additionalRRs")) == 5


def test_kdig_edns_options_not_echoed(srv: Dnsside) -> None:
    [m] = kdig(srv, NGINX, "+bufsize=4096", "+nsid", "+cookie", "+subnet=10.0.0.0/24",
               "+padding=64", "+ednsopt=65001:abcd", "+dnssec")
    o = opt(m)
    assert o is not None and o["CLASS"] == 1232 and o["TTL"] == 0x8000, "1232, version 0, DO"
    assert o["RDLENGTH"] == 0, "no option echoed"
    assert rdata(m, "A") == NGINX_A


@pytest.mark.parametrize("version", ["1", "7"])
def test_kdig_badvers(srv: Dnsside, version: str) -> None:
    [m] = kdig(srv, f"+edns={version}", NGINX)
    assert rcode(m) == 16 and m["ANCOUNT"] == 0
    o = opt(m)
    assert o is not None and (o["TTL"] >> 16) & 0xFF == 0, "we answer with version 0"


def test_kdig_no_edns_no_opt(srv: Dnsside) -> None:
    [m] = kdig(srv, "+noedns", NGINX)
    assert opt(m) is None and m["ARCOUNT"] == 0


def test_kdig_truncation(srv: Dnsside) -> None:
    [tc] = kdig(srv, "+noedns", "+ignore", ROACH, "SRV")
    assert tc["TC"] == 1 and tc["ANCOUNT"] == 7 and tc["msgLength"] <= 512
    assert len(rdata(tc, "SRV")) == 7 and not tc.get("additionalRRs")
    [full] = kdig(srv, "+noedns", ROACH, "SRV")  # kdig retries over TCP on TC
    assert full["TC"] == 0 and full["ANCOUNT"] == 10


def test_kdig_tcp_connection_reused(srv: Dnsside) -> None:
    msgs = kdig(srv, "+tcp", "+keepopen", NGINX, "A", ROACH, "SRV", "nope.svc-global", "A")
    assert [m["QNAME"] for m in msgs] == [NGINX + ".", ROACH + ".", "nope.svc-global."]
    assert [m["RCODE"] for m in msgs] == [0, 0, 3]
    assert msgs[1]["ANCOUNT"] == 10


def test_kdig_class_and_zone(srv: Dnsside) -> None:
    [ch] = kdig(srv, "-c", "CH", "version.bind", "TXT")
    assert ch["RCODE"] == 5 and ch["AA"] == 0
    [out] = kdig(srv, "example.com", "A")
    assert out["RCODE"] == 5 and out["AA"] == 0


def test_kdig_negative_answers(srv: Dnsside) -> None:
    [nx] = kdig(srv, "metrics.default.svc-global")
    assert nx["RCODE"] == 3 and nx["AA"] == 1
    assert [rr["TYPEname"] for rr in nx["authorityRRs"]] == ["SOA"]
    [nodata] = kdig(srv, "_tcp." + NGINX, "SRV")
    assert nodata["RCODE"] == 0 and nodata["ANCOUNT"] == 0
    assert [rr["TYPEname"] for rr in nodata["authorityRRs"]] == ["SOA"]


def test_kdig_any(srv: Dnsside) -> None:
    # (kdig lower-cases the names it sends, so 0x20 is dig's and dnspython's to show.)
    [m] = kdig(srv, ROACH, "ANY")
    assert [rr["TYPEname"] for rr in m["answerRRs"]] == ["A"] * 5
    assert rdata(m, "A") == ["10.42.2.20", "10.42.2.21", "10.43.90.1", "10.43.90.2",
                             "10.43.90.3"]
    [srv_any] = kdig(srv, "_grpc._tcp." + ROACH, "ANY")
    assert {rr["TYPEname"] for rr in srv_any["answerRRs"]} == {"SRV"}


def test_kdig_flags(srv: Dnsside) -> None:
    [m] = kdig(srv, "+nordflag", "+cdflag", "+adflag", "+zflag", NGINX)
    assert m["RD"] == 0 and m["CD"] == 1 and m["AD"] == 0 and m["RCODE"] == 0
