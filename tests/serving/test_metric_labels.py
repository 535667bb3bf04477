"""Metric label values come from known sets only (issue 33: every QTYPE a client sent
became a `qtype` value of dnsside_queries_total, 196,605 permanent series in 10 s, a
15 MB /metrics).

A real dnsside is asked 100 query types nobody serves, in the zone, outside it (REFUSED)
and malformed (FORMERR), over UDP and TCP; the
series on /metrics must stay the known ones, with the strangers counted as `other`."""

from __future__ import annotations

import re

from testkit.rawdns import A, Tcp, query, udp
from testkit.serve import DEMO, NGINX, Dnsside

KNOWN = {"none", "A", "NS", "CNAME", "SOA", "PTR", "MX", "TXT", "AAAA", "SRV", "NAPTR", "DS",
         "DNSKEY", "SVCB", "HTTPS", "IXFR", "AXFR", "ANY", "CAA", "other"}
RCODES = {"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "NOTAUTH",
          "BADVERS", "other"}
STRANGE = range(1000, 1100)  # no name owns these types


def series(text: str) -> list[tuple[str, str, str, float]]:
    return [(m[1], m[2], m[3], float(m[4])) for m in re.finditer(
        r'^dnsside_queries_total\{qtype="([^"]*)",rcode="([^"]*)",transport="([^"]*)"\} (\S+)$',
        text, re.M)]


def test_query_types_nobody_serves_are_one_series() -> None:
    with Dnsside("--source", str(DEMO), "--cluster-name", "east") as s:
        for qtype in STRANGE:
            for wire in (query(NGINX, qtype), query("example.com", qtype),
                         query(NGINX, qtype, arcount=1)):  # an OPT that is not there: FORMERR
                assert udp(s.host, s.port, wire, timeout=3) is not None
        with Tcp(s.host, s.port) as conn:
            for qtype in STRANGE:
                assert conn.exchange(query(NGINX, qtype)) is not None
        assert udp(s.host, s.port, query(NGINX, A)) is not None
        _, text = s.http("/metrics")
        found = series(text)
        assert {q for q, _, _, _ in found} <= KNOWN, sorted({q for q, *_ in found} - KNOWN)
        assert {r for _, r, _, _ in found} <= RCODES
        other = {(r, t): n for q, r, t, n in found if q == "other"}
        assert other == {("NOERROR", "udp"): 100, ("REFUSED", "udp"): 100,
                         ("FORMERR", "udp"): 100, ("NOERROR", "tcp"): 100}, other
        assert ("A", "NOERROR", "udp", 1.0) in found
        assert len(found) <= 8, found
        assert not re.search(r'qtype="TYPE\d+"', text)
