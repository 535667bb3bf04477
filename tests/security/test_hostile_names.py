"""Names are checked where they enter.

A linked cluster's API server (--flat-network) validates nothing: whatever it sends that
becomes part of a DNS name (namespace, Service name, endpoint hostname, port name and
protocol) is checked as a label of the right kind, and every name dnsside would publish
must fit in 255 octets under the longest served zone. A bad one leaves out that Service,
endpoint or port, with a notice, and its neighbours are still served. Seen from outside:
DNS answers, /debug/explain, /metrics and the log of a running dnsside.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.rcode
import pytest

from testkit.clusters import linked_cluster, local_cluster, serve_flat
from testkit.flatnet import (
    DB_PORTS,
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    local_objects,
    service,
)
from testkit.serve import Dnsside, answers, wait_for
from testkit.threadedkube import ThreadedKube

DB = "db.data.svc-global."
EAST_DB = {"10.42.0.10", "10.42.0.11"}
# A second zone of 184 octets in wire form: `<svc>.<ns>` of db.data and cluster west leave
# 57 octets for a hostname, 56 for a port name (_<port>._tcp).
LONG_ZONE = ".".join(c * 60 for c in "abc") + "."
FITS, TOO_LONG = "h" * 57, "h" * 58
PORT_FITS, PORT_TOO_LONG = "p" * 56, "p" * 57

BAD_PORTS = [{"name": "bad name", "port": 1, "protocol": "TCP"},
             {"name": "x" * 64, "port": 2, "protocol": "TCP"},
             {"name": "icmp", "port": 3, "protocol": "ICMP"},
             {"name": PORT_TOO_LONG, "port": 4, "protocol": "TCP"},
             {"name": PORT_FITS, "port": 5, "protocol": "UDP"}]
BAD_HOSTS = {"evil.host": "10.244.1.6", "-lead": "10.244.1.7", "x" * 64: "10.244.1.8",
             TOO_LONG: "10.244.1.11"}
# Services whose namespace or name is no DNS label: never served, whatever their pods.
BAD_SERVICES = [("data", "DB", "10.244.2.1"), ("UPPER", "db", "10.244.2.2"),
                ("data", "a.b", "10.244.2.3"), ("data", "y" * 64, "10.244.2.4"),
                ("n" * 64, "db", "10.244.2.5"), ("data", "-db", "10.244.2.6")]


def west_objects() -> list[dict[str, Any]]:
    objects = [
        service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("db-x1y2z", "db", [
            endpoint("10.244.1.5", "db-0"),
            endpoint("10.244.1.9"),  # no hostname: its dashed address names it
            endpoint("10.244.1.10", FITS),
            *(endpoint(ip, host) for host, ip in BAD_HOSTS.items())],
            ports=[*DB_PORTS, *BAD_PORTS]),
    ]
    for namespace, name, ip in BAD_SERVICES:
        svc = service(name, namespace, labels=dict(REMOTE_DISCOVERY_LABELS))
        objects += [svc, endpoint_slice(f"s-{ip.replace('.', '-')}", name, [endpoint(ip, "p-0")],
                                        namespace=namespace)]
    return objects


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[ThreadedKube, ThreadedKube]]:
    west = linked_cluster(tmp_path / "west", west_objects())
    # east's own db has one endpoint with a hostname no label can hold: the local path
    # refuses it the same way, visibly.
    east = local_cluster(tmp_path / "east", [
        *local_objects(), endpoint_slice("db-extra", "db", [endpoint("10.42.0.99", "bad.host")])],
        {"west": west})
    try:
        yield east, west
    finally:
        east.close()
        west.close()


def addresses(srv: Dnsside, name: str, rdtype: str = "A") -> set[str]:
    return set(answers(srv.query(name, rdtype), rdtype))


def srv_records(srv: Dnsside, name: str) -> set[tuple[str, int]]:
    reply = srv.query(name, "SRV")
    return {(rd.target.to_text(), rd.port) for rrset in reply.answer for rd in rrset}


def metric(srv: Dnsside, name: str, cluster: str) -> float | None:
    return srv.metric(name, cluster=cluster)


def lines(srv: Dnsside, *texts: str) -> list[str]:
    return [line for line in list(srv.lines) if all(t in line for t in texts)]


def test_bad_remote_names_are_left_out_and_neighbours_served(
        clusters: tuple[ThreadedKube, ThreadedKube]) -> None:
    east, west = clusters
    with serve_flat(east, "--zone", "svc-global.", "--zone", LONG_ZONE) as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv, DB), 15, "west's db-0")
        # The neighbours: db-0, the dashed-address pod, the hostname that just fits.
        assert addresses(srv, DB) == EAST_DB | {"10.244.1.5", "10.244.1.9", "10.244.1.10"}
        assert addresses(srv, f"10-244-1-9.west.{DB}") == {"10.244.1.9"}
        long_host = f"{FITS}.west.db.data.{LONG_ZONE}"
        assert len(long_host) + 1 == 255  # the longest a name may be, in wire octets
        assert addresses(srv, long_host) == {"10.244.1.10"}
        for host in ("-lead", "evil.host", TOO_LONG):
            assert srv.query(f"{host}.west.{DB}", "A").rcode() == dns.rcode.NXDOMAIN, host

        # Bad ports are in no SRV record; the good ones, and the port name that just fits
        # under the long zone, are.
        assert {port for _, port in srv_records(srv, DB)} == {26257, 8080, 5}
        assert {t for t, _ in srv_records(srv, f"_grpc._tcp.{DB}")} == {
            f"db-0.west.{DB}", f"10-244-1-9.west.{DB}", f"{FITS}.west.{DB}",
            "db-0.east.db.data.svc-global.", "db-1.east.db.data.svc-global."}
        assert {p for _, p in srv_records(srv, f"_{PORT_FITS}._udp.db.data.{LONG_ZONE}")} == {5}
        assert srv.query(f"_icmp._icmp.{DB}", "SRV").rcode() == dns.rcode.NXDOMAIN

        # Services with a bad namespace or name: not served at all, their pods nowhere.
        every = set().union(*(addresses(srv, n, t) for n in (
            DB, f"west.{DB}", "db.upper.svc-global.", "-db.data.svc-global.")
            for t in ("A", "AAAA")))
        assert not every & {ip for _, _, ip in BAD_SERVICES}
        assert srv.query("db.upper.svc-global.", "A").rcode() == dns.rcode.NXDOMAIN

        # explain says why, for each refused endpoint and port.
        _, report = srv.http(f"/debug/explain?name={DB}")
        for text in ["hostname 'evil.host' is not a DNS label",
                     "hostname '-lead' is not a DNS label",
                     f"hostname '{'x' * 64}' is not a DNS label",
                     f"the name {TOO_LONG}.west.db.data.<zone> would be 256 octets",
                     "port bad name/TCP:1: name 'bad name' is not a DNS label",
                     "protocol 'ICMP' is not TCP, UDP or SCTP",
                     f"_{PORT_TOO_LONG}._tcp.db.data.<zone> would be 256 octets"]:
            assert text in report, text
        assert metric(srv, "dnsside_invalid_names", "west") == 4 + 4  # 4 hosts, 4 ports
        assert metric(srv, "dnsside_invalid_names", "east") == 1

        # The log: one line for the slice (its hosts and ports), one per bad Service.
        [line] = lines(srv, "EndpointSlice data/db-x1y2z (its own API, --flat-network): left out")
        assert "WARNING" in line and "evil.host: hostname 'evil.host'" in line
        [line] = lines(srv, "EndpointSlice data/db-extra: left out")
        assert "cluster east: " in line and "bad.host" in line
        for namespace, name, _ in BAD_SERVICES:
            what = (f"namespace {namespace!r}" if namespace != "data"
                    else f"service {name!r}")
            found = lines(srv, f"Service {namespace}/{name}:", f"{what} cannot be a DNS label")
            assert len(found) == 1 and "WARNING" in found[0], (namespace, name, found)

        # A rebuild of the same service (a new pod) tells nothing again.
        west.call(west.kube.apply, endpoint_slice("db-x1y2z", "db", [
            endpoint("10.244.1.5", "db-0"), endpoint("10.244.1.9"),
            endpoint("10.244.1.10", FITS), endpoint("10.244.1.12", "db-2"),
            *(endpoint(ip, host) for host, ip in BAD_HOSTS.items())],
            ports=[*DB_PORTS, *BAD_PORTS]))
        wait_for(lambda: "10.244.1.12" in addresses(srv, DB), 10, "db-2")
        assert len(lines(srv, "EndpointSlice data/db-x1y2z (its own API, --flat-network): ",
                         "left out")) == 1

        # A refused Service sent again (a watch event) is counted, and not told again.
        def ignored() -> float:
            _, text = srv.http("/metrics")
            m = re.search(r'^dnsside_remote_ignored_objects_total\{cluster="west",'
                          r'reason="invalid"\} (\S+)$', text, re.M)
            return float(m.group(1)) if m else 0.0
        before = ignored()
        assert before >= len(BAD_SERVICES)
        namespace, name, _ = BAD_SERVICES[0]
        west.call(west.kube.apply, service(name, namespace, labels={
            **REMOTE_DISCOVERY_LABELS, "touched": "yes"}))
        wait_for(lambda: ignored() > before, 10, "the refused Service counted again")
        assert len(lines(srv, f"Service {namespace}/{name}:", "cannot be a DNS label")) == 1
