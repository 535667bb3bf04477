"""No trap address in any answer, from any source.

An address no pod or Service can own (unspecified, loopback, link-local, multicast, the
limited broadcast, the documented cloud metadata endpoints outside link-local, and IPv6
forms carrying one) is refused wherever it comes from: a local
EndpointSlice, a local ClusterIP, each kind of mirror (gateway, per-pod, remote-discovery,
federated) and a linked cluster's own slices or Endpoints (--flat-network). Seen from
outside: real DNS queries, /debug/explain, /metrics and the log of a running dnsside; the
pure function underneath is checked against :mod:`ipaddress` networks with hypothesis.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.rcode
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dnsside.core.assembly import ClusterView, assemble
from dnsside.model.addresses import Unsafe, describe, normal_ip, unsafe_address
from dnsside.model.linkerd import parse_service, parse_slice
from testkit.clusters import linked_cluster, local_cluster, serve_flat
from testkit.fakekube import FakeKube
from testkit.fakekube_rbac import REMOTE_ACCESS_RULES, REMOTE_ACCESS_RULES_PRE_214
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    local_objects,
    service,
    v1_endpoints,
)
from testkit.serve import Dnsside, answers, run_cli, wait_for
from testkit.threadedkube import ThreadedKube
from testkit.topology import CLUSTER, MIRROR, headless_link, write
from testkit.topology import endpoint_slice as slice_of
from testkit.topology import service as svc_of
from tests.ops.test_check import SA, check, demo, line, only_failure

# --------------------------------------------------------------------------- the function

IPV4_TRAPS = {
    "0.0.0.0": Unsafe.UNSPECIFIED, "0.1.2.3": Unsafe.UNSPECIFIED,
    "127.0.0.1": Unsafe.LOOPBACK, "127.254.0.9": Unsafe.LOOPBACK,
    "169.254.169.254": Unsafe.LINK_LOCAL, "169.254.0.1": Unsafe.LINK_LOCAL,
    "224.0.0.1": Unsafe.MULTICAST, "239.255.255.250": Unsafe.MULTICAST,
    "255.255.255.255": Unsafe.BROADCAST,
    # The documented cloud metadata and host endpoints outside link-local (SPEC §3).
    "168.63.129.16": Unsafe.CLOUD_METADATA, "100.100.100.200": Unsafe.CLOUD_METADATA,
}
IPV6_TRAPS = {
    "::": Unsafe.UNSPECIFIED, "::1": Unsafe.LOOPBACK,
    "fe80::1": Unsafe.LINK_LOCAL, "febf:ffff::1": Unsafe.LINK_LOCAL,
    "ff02::1": Unsafe.MULTICAST, "ff05::1:3": Unsafe.MULTICAST,
    # IPv6 forms carrying an IPv4 address are judged by it.
    "::ffff:127.0.0.1": Unsafe.LOOPBACK, "::ffff:169.254.169.254": Unsafe.LINK_LOCAL,
    "::ffff:0.0.0.0": Unsafe.UNSPECIFIED, "::ffff:224.0.0.1": Unsafe.MULTICAST,
    "::ffff:255.255.255.255": Unsafe.BROADCAST,
    "::127.0.0.1": Unsafe.LOOPBACK, "::2": Unsafe.UNSPECIFIED,  # IPv4-compatible
    "::ffff:0:127.0.0.1": Unsafe.LOOPBACK,  # IPv4-translated
    "64:ff9b::a9fe:a9fe": Unsafe.LINK_LOCAL, "64:ff9b::7f00:1": Unsafe.LOOPBACK,  # NAT64
    "2002:7f00:1::": Unsafe.LOOPBACK, "2002:a9fe:a9fe::1": Unsafe.LINK_LOCAL,  # 6to4
    "fd00:ec2::254": Unsafe.CLOUD_METADATA, "::ffff:168.63.129.16": Unsafe.CLOUD_METADATA,
}
FINE = ["10.42.0.1", "192.168.1.1", "100.64.0.1", "8.8.8.8", "240.0.0.1", "169.253.255.255",
        "223.255.255.255", "255.255.255.254", "126.255.255.255", "128.0.0.1", "1.0.0.0",
        "fd00::1", "2001:db8::1", "fec0::1", "fe7f::1", "fec0::", "feff::", "::ffff:10.0.0.1",
        "::10.1.2.3", "64:ff9b::a01:203", "2002:a00:1::", "64:ff9b:1::7f00:1", "2001::1",
        # Only the metadata endpoints themselves, never their neighbours.
        "168.63.129.15", "168.63.129.17", "100.100.100.199", "100.100.100.201",
        "fd00:ec2::253", "fd00:ec2::1:254", "fd00:10:244::254"]


@pytest.mark.parametrize("address, reason", [*IPV4_TRAPS.items(), *IPV6_TRAPS.items()])
def test_every_trap_class_is_named(address: str, reason: Unsafe) -> None:
    canonical = normal_ip(address)
    assert unsafe_address(canonical) is reason
    assert describe(canonical, reason).startswith(f"{canonical} ({reason}")


@pytest.mark.parametrize("address", FINE)
def test_pod_and_service_addresses_are_fine(address: str) -> None:
    assert unsafe_address(normal_ip(address)) is None


def test_the_embedded_address_is_named() -> None:
    assert describe("::ffff:127.0.0.1", Unsafe.LOOPBACK) == (
        "::ffff:127.0.0.1 (loopback: IPv4-mapped 127.0.0.1)")
    assert describe("2002:7f00:1::", Unsafe.LOOPBACK) == "2002:7f00:1:: (loopback: 6to4 127.0.0.1)"


def test_an_address_with_a_scope_is_no_address() -> None:
    with pytest.raises(ValueError):
        normal_ip("fd00::1%eth0")


_V4 = [(ipaddress.ip_network(n), r) for n, r in (
    ("0.0.0.0/8", Unsafe.UNSPECIFIED), ("127.0.0.0/8", Unsafe.LOOPBACK),
    ("169.254.0.0/16", Unsafe.LINK_LOCAL), ("224.0.0.0/4", Unsafe.MULTICAST),
    ("255.255.255.255/32", Unsafe.BROADCAST), ("168.63.129.16/32", Unsafe.CLOUD_METADATA),
    ("100.100.100.200/32", Unsafe.CLOUD_METADATA))]


def _reference_v4(ip: ipaddress.IPv4Address) -> Unsafe | None:
    return next((r for net, r in _V4 if ip in net), None)


def _reference_v6(ip: ipaddress.IPv6Address) -> Unsafe | None:
    """The module docstring's table, written with ipaddress networks."""
    n = int(ip)
    if n == 0:
        return Unsafe.UNSPECIFIED
    if n == 1:
        return Unsafe.LOOPBACK
    if ip in ipaddress.ip_network("fe80::/10"):
        return Unsafe.LINK_LOCAL
    if ip in ipaddress.ip_network("ff00::/8"):
        return Unsafe.MULTICAST
    if ip == ipaddress.IPv6Address("fd00:ec2::254"):
        return Unsafe.CLOUD_METADATA
    for prefix in ("::ffff:0:0/96", "::/96", "::ffff:0:0:0/96", "64:ff9b::/96"):
        if ip in ipaddress.ip_network(prefix):
            return _reference_v4(ipaddress.IPv4Address(n & 0xFFFFFFFF))
    if ip in ipaddress.ip_network("2002::/16"):
        return _reference_v4(ipaddress.IPv4Address((n >> 80) & 0xFFFFFFFF))
    return None


TRAP_NETWORKS = ["0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "fe80::/10",
                 "ff00::/8", "::ffff:0:0/96", "::/96", "::ffff:0:0:0/96", "64:ff9b::/96",
                 "2002::/16", "169.0.0.0/8", "255.0.0.0/8", "10.0.0.0/8", "fc00::/7",
                 "168.63.129.0/28", "100.100.100.192/28", "fd00:ec2::/120", "fd00::/16"]
addresses = st.one_of(st.ip_addresses(), *(st.ip_addresses(network=n) for n in TRAP_NETWORKS))


@given(addresses)
def test_the_fast_paths_agree_with_ipaddress(ip: ipaddress.IPv4Address | ipaddress.IPv6Address
                                             ) -> None:
    expected = (_reference_v4(ip) if isinstance(ip, ipaddress.IPv4Address)
                else _reference_v6(ip))
    assert unsafe_address(str(ip)) is expected
    # Any spelling ipaddress accepts gives the same verdict (upper-case IPv6, the
    # long form, the dotted tail).
    assert unsafe_address(ip.exploded.upper()) is expected


def test_a_dual_stack_endpoint_keeps_its_good_address() -> None:
    svc = parse_service(svc_of("db", "pg", None, [("pg", 5432)],
                               {"mirror.linkerd.io/exported": "true"}))
    v4 = parse_slice(slice_of("db", "pg-v4", "pg", [
        {"addresses": ["10.42.0.5"], "hostname": "pg-0"}], [("pg", 5432)]))
    v6 = parse_slice(slice_of("db", "pg-v6", "pg", [
        {"addresses": ["fe80::5"], "hostname": "pg-0"}], [("pg", 5432)], "IPv6"))
    gs = assemble("db", "pg", svc, [v4, v6], [], ClusterView("east"))
    assert gs is not None
    assert [(m.hostname, m.addresses) for m in gs.members] == [("pg-0", ("10.42.0.5",))]
    [out] = gs.excluded
    assert (out.hostname, out.addresses, out.source) == ("pg-0", ("fe80::5",), "pg-v6")
    assert out.why_not_ready.startswith("unsafe address fe80::5 (link-local)")


# --------------------------------------------------------------------------- local + mirrors

ZONE = "svc-global."
GW = "172.18.0.9"  # the gateway endpoint of a gateway-mode mirror's slice
LINKS = [{"apiVersion": "multicluster.linkerd.io/v1alpha3", "kind": "Link",
          "metadata": {"name": c, "namespace": "linkerd-multicluster"},
          "spec": {"targetClusterName": c}} for c in ("west", "north")]
EXPORTED = {"mirror.linkerd.io/exported": "true"}
PORTS = [("http", 80)]


# Each trap's hostname in the local slices.
HOST = {ip: f"bad-{i}" for i, ip in enumerate(IPV4_TRAPS)} | {
    ip: f"bad6-{i}" for i, ip in enumerate(IPV6_TRAPS)}


def _ep(ip: str, host: str) -> dict[str, Any]:
    return {"addresses": [ip], "hostname": host, "conditions": {"ready": True}}


def _mirror(name: str, cluster: str, ip: str, *, remote_discovery: bool = False
            ) -> list[dict[str, Any]]:
    labels = {MIRROR: "true", CLUSTER: cluster}
    if remote_discovery:
        labels["multicluster.linkerd.io/remote-discovery"] = cluster
        return [svc_of("evil", f"{name}-{cluster}", [ip], PORTS, labels)]
    return [svc_of("evil", f"{name}-{cluster}", [ip], PORTS, labels),
            slice_of("evil", f"{name}-{cluster}-gw", f"{name}-{cluster}", [
                {"addresses": [GW], "conditions": {"ready": True}}], [("http", 4143)],
                labels=labels)]


def local_topology() -> list[dict[str, Any]]:
    """Namespace `evil`: every local source and every kind of mirror carries traps, each
    next to a valid neighbour that must still be answered."""
    v4 = {HOST[ip]: ip for ip in IPV4_TRAPS}
    v6 = {HOST[ip]: ip for ip in IPV6_TRAPS}
    return [
        *LINKS,
        # A local headless Service: its slices (IPv4 and IPv6).
        svc_of("evil", "db", None, PORTS, EXPORTED),
        slice_of("evil", "db-v4", "db", [*(_ep(ip, h) for h, ip in v4.items()),
                                         _ep("10.42.0.1", "good-0"),
                                         _ep("10.42.0.9", "dual-0")], PORTS),
        slice_of("evil", "db-v6", "db", [*(_ep(ip, h) for h, ip in v6.items()),
                                         _ep("fd00::1", "good-0"),
                                         _ep("fe80::9", "dual-0")], PORTS, "IPv6"),
        # Local ClusterIP Services: all bad, and dual-stack with one bad address.
        svc_of("evil", "api", ["169.254.169.254", "fe80::5"], PORTS, EXPORTED),
        svc_of("evil", "dual", ["10.43.0.6", "::ffff:127.0.0.1"], PORTS, EXPORTED),
        slice_of("evil", "dual-1", "dual", [_ep("10.42.0.20", "x")], PORTS),
        # Gateway-mode mirrors of `gw`: west's is loopback, north's fine.
        *_mirror("gw", "west", "127.0.0.1"), *_mirror("gw", "north", "10.96.0.2"),
        # Remote-discovery mirrors of `rd`: west's unspecified, north's fine.
        *_mirror("rd", "west", "0.0.0.0", remote_discovery=True),
        *_mirror("rd", "north", "10.96.0.3", remote_discovery=True),
        # Per-pod mirrors of `pods`: west's p-0 is multicast, p-1 fine.
        *headless_link("evil", "pods", "west", {"p-0": ["224.0.0.5"], "p-1": ["10.96.0.4"]},
                       PORTS),
        # A federated Service of `fed` with the limited broadcast; west's mirror is fine.
        svc_of("evil", "fed-federated", ["255.255.255.255"], PORTS, {MIRROR: "true"},
               {"multicluster.linkerd.io/local-discovery": "fed"}),
        *_mirror("fed", "west", "10.96.0.5"),
    ]


def every_address(srv: Dnsside, names: list[str]) -> set[str]:
    found: set[str] = set()
    for name in names:
        for rdtype in ("A", "AAAA"):
            found |= set(answers(srv.query(name, rdtype), rdtype))
    return found


def metric_lines(srv: Dnsside, name: str) -> dict[tuple[str, ...], float]:
    _, text = srv.http("/metrics")
    return {tuple(re.findall(r'="([^"]*)"', m.group(1))): float(m.group(2))
            for m in re.finditer(rf"^{name}{{([^}}]*)}} (\S+)$", text, re.M)}


def explain(srv: Dnsside, name: str) -> str:
    status, text = srv.http(f"/debug/explain?name={name}")
    assert status == 200, text
    return text


def told(srv: Dnsside, obj: str) -> int:
    """Log lines refusing something of ``obj``."""
    return sum(f" {obj}: " in line and "left out of every answer" in line
               for line in list(srv.lines))


NAMES = [f"{x}.evil.{ZONE}" for x in ("db", "api", "dual", "gw", "rd", "pods", "fed")] + [
    f"{c}.{x}.evil.{ZONE}" for x in ("db", "api", "dual", "gw", "rd", "pods", "fed")
    for c in ("east", "west", "north", "federated")] + [
    f"{h}.east.db.evil.{ZONE}" for h in ("good-0", "dual-0", *(f"bad-{i}" for i in range(9)),
                                        *(f"bad6-{i}" for i in range(20)))] + [
    f"{h}.west.pods.evil.{ZONE}" for h in ("p-0", "p-1")]


def test_no_local_or_mirrored_trap_is_answered(tmp_path: Path) -> None:
    source = write(tmp_path / "evil.json", local_topology())
    with Dnsside("--source", str(source), "--cluster-name", "east") as srv:
        served = every_address(srv, NAMES)
        # The valid neighbours are all answered, each trap none.
        assert served == {"10.42.0.1", "fd00::1", "10.42.0.9", "10.43.0.6", "10.96.0.2",
                          "10.96.0.3", "10.96.0.4", "10.96.0.5"}
        for bad in [*IPV4_TRAPS, *IPV6_TRAPS, "fe80::5", "fe80::9", "224.0.0.5"]:
            assert normal_ip(bad) not in served
        reply = srv.query(f"bad-2.east.db.evil.{ZONE}", "A")
        assert reply.rcode() == dns.rcode.NXDOMAIN
        srv_reply = srv.query(f"_http._tcp.db.evil.{ZONE}", "SRV")
        targets = {rd.target.to_text() for rrset in srv_reply.answer for rd in rrset}
        assert targets == {f"good-0.east.db.evil.{ZONE}", f"dual-0.east.db.evil.{ZONE}"}
        glue = {rd.to_text() for rrset in srv_reply.additional for rd in rrset}
        assert glue == {"10.42.0.1", "fd00::1", "10.42.0.9"}

        # explain names the address and its class, for each source.
        for name, text in [
            (f"{HOST['169.254.169.254']}.east.db.evil.{ZONE}",
             "unsafe address 169.254.169.254 (link-local)"),
            (f"{HOST['::ffff:127.0.0.1']}.east.db.evil.{ZONE}",
             f"unsafe address {normal_ip('::ffff:127.0.0.1')} (loopback: IPv4-mapped "
             "127.0.0.1)"),
            (f"dual-0.east.db.evil.{ZONE}", "unsafe address fe80::9 (link-local)"),
            (f"api.evil.{ZONE}", "unsafe addresses 169.254.169.254 (link-local), "
                                 "fe80::5 (link-local)"),
            (f"dual.evil.{ZONE}", f"unsafe address {normal_ip('::ffff:127.0.0.1')} (loopback"),
            (f"gw.evil.{ZONE}", "unsafe address 127.0.0.1 (loopback)"),
            (f"rd.evil.{ZONE}", "unsafe address 0.0.0.0 (unspecified)"),
            (f"p-0.west.pods.evil.{ZONE}", "unsafe address 224.0.0.5 (multicast)"),
            (f"fed.evil.{ZONE}", "unsafe address 255.255.255.255 (broadcast)"),
            (f"{HOST['168.63.129.16']}.east.db.evil.{ZONE}",
             "unsafe address 168.63.129.16 (cloud-metadata)"),
            (f"{HOST['fd00:ec2::254']}.east.db.evil.{ZONE}",
             "unsafe address fd00:ec2::254 (cloud-metadata)"),
        ]:
            assert text in explain(srv, name), name
        # The good half of a dual-stack member is in the answer, beside its bad half.
        report = explain(srv, f"dual-0.east.db.evil.{ZONE}")
        assert "in the answer" in report and "10.42.0.9" in report

        # Counted by cluster and reason: one per address.
        counts = metric_lines(srv, "dnsside_unsafe_addresses")
        assert counts == {
            ("east", "unspecified"): 2 + 3,  # 0.0.0.0, 0.1.2.3; ::, ::ffff:0.0.0.0, ::2
            ("east", "loopback"): 2 + 6 + 1,  # and the dual ClusterIP's ::ffff:127.0.0.1
            ("east", "link-local"): 2 + 5 + 2 + 1,  # api's two, dual-0's fe80::9
            ("east", "multicast"): 2 + 3,
            ("east", "broadcast"): 1 + 1,
            ("east", "cloud-metadata"): 2 + 2,  # and fd00:ec2::254, ::ffff:168.63.129.16
            ("west", "loopback"): 1, ("west", "unspecified"): 1, ("west", "multicast"): 1,
            ("federated", "broadcast"): 1,
        }

        # Logged once per object: the object, the address and the reason.
        for obj in ("EndpointSlice evil/db-v4", "EndpointSlice evil/db-v6", "Service evil/api",
                    "Service evil/dual", "Service evil/gw-west", "Service evil/rd-west",
                    "Service evil/p-0-west", "Service evil/fed-federated"):
            assert told(srv, obj) == 1, obj
        line = srv.wait_log("EndpointSlice evil/db-v4: 11 unsafe addresses left out of every "
                            "answer (no pod or Service can own one): ")
        assert "WARNING" in line and "cluster east: " in line
        assert f"{HOST['169.254.169.254']} 169.254.169.254 (link-local)" in line

        # A change to the same global service rebuilds it: nothing is told again, and a new
        # trap in another object is told (once).
        objects = local_topology()
        objects.append(slice_of("evil", "db-more", "db", [_ep("10.42.0.2", "good-1"),
                                                           _ep("127.0.0.2", "bad-x")], PORTS))
        write(source, objects)
        wait_for(lambda: "10.42.0.2" in every_address(srv, [f"db.evil.{ZONE}"]), 10, "good-1")
        srv.wait_log("EndpointSlice evil/db-more: 1 unsafe address left out")
        assert told(srv, "EndpointSlice evil/db-v4") == 1
        assert told(srv, "EndpointSlice evil/db-more") == 1
        assert metric_lines(srv, "dnsside_unsafe_addresses")[("east", "loopback")] == 10

        # Gone: east's series go back to 0 (it still has a member), nothing is answered
        # differently for the neighbours.
        write(source, [*(o for o in local_topology()
                         if o["metadata"]["name"] not in ("db-v4", "db-v6", "api", "dual")),
                       svc_of("evil", "dual", ["10.43.0.6"], PORTS, EXPORTED)])
        wait_for(lambda: {v for k, v in metric_lines(srv, "dnsside_unsafe_addresses").items()
                          if k[0] == "east"} == {0}, 10, "east's counts back to 0")
        assert every_address(srv, [f"dual.evil.{ZONE}", f"gw.evil.{ZONE}"]) == {
            "10.43.0.6", "10.96.0.2"}


def test_the_cli_explain_names_the_trap(tmp_path: Path) -> None:
    source = write(tmp_path / "evil.json", local_topology())
    out = run_cli(["explain", "--source", str(source), "--cluster-name", "east",
                   f"gw.evil.{ZONE}"])
    assert out.returncode == 0, out.stderr
    assert "unsafe address 127.0.0.1 (loopback)" in out.stdout
    assert "10.96.0.2" in out.stdout  # north's mirror answers


# --------------------------------------------------------------------------- --flat-network

DB = "db.data.svc-global"
EAST_DB = {"10.42.0.10", "10.42.0.11"}
WEST_V4 = {"bad-0": "127.0.0.1", "bad-1": "169.254.169.254", "bad-2": "0.0.0.0",
           "bad-3": "224.0.0.1", "bad-4": "255.255.255.255", "bad-5": "168.63.129.16",
           "bad-6": "100.100.100.200"}
WEST_V6 = {"bad6-0": "::1", "bad6-1": "fe80::1", "bad6-2": "ff02::1", "bad6-3": "::",
           "bad6-4": "::ffff:169.254.169.254", "bad6-5": "2002:7f00:1::",
           "bad6-6": "fd00:ec2::254"}


def west_objects() -> list[dict[str, Any]]:
    """west's db: db-0 dual-stack and fine, every other endpoint a trap."""
    return [
        service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("db-v4", "db", [endpoint("10.244.1.5", "db-0"),
                                       *(endpoint(ip, h) for h, ip in WEST_V4.items())]),
        endpoint_slice("db-v6", "db", [endpoint("fd00:244::5", "db-0"),
                                       *(endpoint(ip, h) for h, ip in WEST_V6.items())],
                       address_type="IPv6"),
    ]


@pytest.fixture
def clusters(tmp_path: Path, request: pytest.FixtureRequest
             ) -> Iterator[tuple[ThreadedKube, ThreadedKube, str]]:
    """east linked to west, whose db holds the traps: in EndpointSlices, or in v1
    Endpoints when west's remote-access role predates Linkerd 2.14."""
    objects = west_objects()
    if request.param is REMOTE_ACCESS_RULES_PRE_214:  # Endpoints, not slices
        objects = [objects[0], v1_endpoints(
            "db", [("10.244.1.5", "db-0"), *((ip, h) for h, ip in WEST_V4.items()),
                   ("fd00:244::5", "db-0"), *((ip, h) for h, ip in WEST_V6.items())])]
    west = linked_cluster(tmp_path / "west", objects, rules=request.param)
    east = local_cluster(tmp_path / "east", local_objects(), {"west": west})
    try:
        yield east, west, ("Endpoints" if request.param is REMOTE_ACCESS_RULES_PRE_214
                           else "EndpointSlice")
    finally:
        east.close()
        west.close()


@pytest.mark.parametrize("clusters", [REMOTE_ACCESS_RULES, REMOTE_ACCESS_RULES_PRE_214],
                         ids=["endpointslices", "endpoints"], indirect=True)
def test_no_remote_trap_is_answered(clusters: tuple[ThreadedKube, ThreadedKube, str]
                                    ) -> None:
    east, west, kind = clusters
    with serve_flat(east) as srv:
        wait_for(lambda: "10.244.1.5" in set(answers(srv.query(DB, "A"), "A")), 15, "west db-0")
        hosts = [f"{h}.west.{DB}" for h in ("db-0", *WEST_V4, *WEST_V6)]
        served = every_address(srv, [DB, f"west.{DB}", *hosts])
        assert served == EAST_DB | {"10.244.1.5", "fd00:244::5"}
        for name in hosts[1:]:
            assert srv.query(name, "A").rcode() == dns.rcode.NXDOMAIN, name
        # The example: the cloud metadata address behind a pod name.
        assert srv.query(f"bad-1.west.{DB}", "A").rcode() == dns.rcode.NXDOMAIN
        report = explain(srv, f"bad-1.west.{DB}")
        assert "unsafe address 169.254.169.254 (link-local)" in report
        assert (f"unsafe address {normal_ip('::ffff:169.254.169.254')} (link-local: IPv4-mapped"
                in explain(srv, f"bad6-4.west.{DB}"))
        counts = metric_lines(srv, "dnsside_unsafe_addresses")
        assert {k: v for k, v in counts.items() if k[0] == "west"} == {
            ("west", "loopback"): 3, ("west", "link-local"): 3, ("west", "unspecified"): 2,
            ("west", "multicast"): 2, ("west", "broadcast"): 1, ("west", "cloud-metadata"): 3}
        # AWS's, Azure's and Alibaba's metadata endpoints outside link-local (issue 33).
        for host, text in (("bad-5", "168.63.129.16 (cloud-metadata)"),
                           ("bad-6", "100.100.100.200 (cloud-metadata)"),
                           ("bad6-6", "fd00:ec2::254 (cloud-metadata)")):
            assert f"unsafe address {text}" in explain(srv, f"{host}.west.{DB}"), host
        objects = ["db-v4", "db-v6"] if kind == "EndpointSlice" else ["db"]
        for name in objects:
            obj = f"{kind} data/{name} (its own API, --flat-network)"
            line = srv.wait_log(f"{obj}: ")
            assert "WARNING" in line
            assert "cluster west: " in line
        # A rebuild of the same service (a new ready pod) tells nothing again.
        if kind == "EndpointSlice":
            west.call(west.kube.apply, endpoint_slice("db-v4", "db", [
                endpoint("10.244.1.5", "db-0"), endpoint("10.244.1.7", "db-2"),
                *(endpoint(ip, h) for h, ip in WEST_V4.items())]))
        else:
            west.call(west.kube.apply, v1_endpoints("db", [
                ("10.244.1.5", "db-0"), ("10.244.1.7", "db-2"),
                *((ip, h) for h, ip in WEST_V4.items()), ("fd00:244::5", "db-0"),
                *((ip, h) for h, ip in WEST_V6.items())]))
        wait_for(lambda: "10.244.1.7" in every_address(srv, [DB]), 10, "db-2")
        for name in objects:
            assert told(srv, f"{kind} data/{name} (its own API, --flat-network)") == 1


# --------------------------------------------------------------------------- dnsside check


async def test_check_names_each_object_holding_a_trap(fake_kube: FakeKube) -> None:
    kube = demo(fake_kube)
    results = await check(kube, as_user=SA)
    assert line(results, "no served object holds an address no pod or Service can own").ok
    # The demo's exported headless nginx-svc gets a loopback endpoint, and west's gateway
    # mirror of web a link-local ClusterIP.
    kube.apply(slice_of("default", "nginx-svc-evil", "nginx-svc", [_ep("127.0.0.1", "x")],
                        PORTS))
    web_west = kube.get("Service", "default", "web-west")
    assert web_west is not None
    web_west["spec"]["clusterIP"], web_west["spec"]["clusterIPs"] = "169.254.169.254", [
        "169.254.169.254"]
    kube.apply(web_west)
    results = await check(kube, as_user=SA)
    bad = only_failure(results, "2 served objects hold an address no pod or Service can own")
    assert "EndpointSlice default/nginx-svc-evil: 127.0.0.1 (loopback)" in bad.hint
    assert "Service default/web-west: 169.254.169.254 (link-local)" in bad.hint
