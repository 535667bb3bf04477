"""The name grammar (dnsside/dns/names.py): each shape of both schemes read as a typed
request, and every name the encoders publish read back to exactly the name written."""

from __future__ import annotations

import pytest

from dnsside.core.explain import Explainer
from dnsside.core.index import IndexOptions
from dnsside.dns.names import MCS, SVC_GLOBAL, Request, Shape, owner, parse
from dnsside.dns.wire import to_wire
from dnsside.dns.zone import McsZone, Zone, ZoneOptions
from testkit.inprocess import synced_index
from tests.core.test_index import BOTH, demo_records

pytestmark = pytest.mark.quick

Z = Zone("svc-global.", ZoneOptions())
M = McsZone("clusterset.local.", ZoneOptions())

CASES = [
    (Z, "svc-global.", Request(Shape.APEX, SVC_GLOBAL)),
    (Z, "default.svc-global.", Request(Shape.NAMESPACE, SVC_GLOBAL, ("default",),
                                       namespace="default")),
    (Z, "web.default.svc-global", Request(Shape.SERVICE, SVC_GLOBAL, ("web", "default"),
                                          namespace="default", service="web")),
    (Z, "west.web.default.svc-global.", Request(
        Shape.CLUSTER, SVC_GLOBAL, ("west", "web", "default"), namespace="default",
        service="web", cluster="west")),
    (Z, "Web-0.West.web.default.SVC-global.", Request(
        Shape.MEMBER, SVC_GLOBAL, ("web-0", "west", "web", "default"), namespace="default",
        service="web", cluster="west", host="web-0")),
    (Z, "_udp.web.default.svc-global.", Request(
        Shape.PROTOCOL, SVC_GLOBAL, ("_udp", "web", "default"), namespace="default",
        service="web", protocol="UDP")),
    (Z, "_http._tcp.web.default.svc-global.", Request(
        Shape.SRV, SVC_GLOBAL, ("_http", "_tcp", "web", "default"), namespace="default",
        service="web", port="http", protocol="TCP")),
    (M, "clusterset.local.", Request(Shape.APEX, MCS)),
    (M, "dns-version.clusterset.local.", Request(Shape.VERSION, MCS, ("dns-version",))),
    (M, "svc.clusterset.local.", Request(Shape.SERVICES, MCS, ("svc",))),
    (M, "default.svc.clusterset.local.", Request(Shape.NAMESPACE, MCS, ("default", "svc"),
                                                 namespace="default")),
    (M, "web.default.svc.clusterset.local.", Request(
        Shape.SERVICE, MCS, ("web", "default", "svc"), namespace="default", service="web")),
    (M, "west.web.default.svc.clusterset.local.", Request(
        Shape.CLUSTER, MCS, ("west", "web", "default", "svc"), namespace="default",
        service="web", cluster="west")),
    (M, "web-0.west.web.default.svc.clusterset.local.", Request(
        Shape.MEMBER, MCS, ("web-0", "west", "web", "default", "svc"), namespace="default",
        service="web", cluster="west", host="web-0")),
    (M, "_sctp.web.default.svc.clusterset.local.", Request(
        Shape.PROTOCOL, MCS, ("_sctp", "web", "default", "svc"), namespace="default",
        service="web", protocol="SCTP")),
    (M, "_dns._udp.web.default.svc.clusterset.local.", Request(
        Shape.SRV, MCS, ("_dns", "_udp", "web", "default", "svc"), namespace="default",
        service="web", port="dns", protocol="UDP")),
]


@pytest.mark.parametrize(("zone", "name", "request_"), CASES)
def test_each_shape_reads_as_its_request_and_writes_back(
    zone: Zone, name: str, request_: Request
) -> None:
    assert parse(name, zone) == request_
    assert parse(to_wire(name), zone) == request_
    assert owner(request_, zone) == to_wire(name)


@pytest.mark.parametrize(("zone", "name"), [
    (Z, "a.web-0.west.web.default.svc-global."),  # deeper than a member
    (Z, "_http.default.svc-global."),  # an underscore where a service goes
    (Z, "_http._quic.web.default.svc-global."),  # no such protocol label
    (Z, "_._tcp.web.default.svc-global."),  # an SRV name without a port name
    (M, "web.default.clusterset.local."),  # not below svc.M
    (M, "dns-version.svc.x.clusterset.local."),
    (M, "a.web-0.west.web.default.svc.clusterset.local."),
])
def test_names_of_no_shape_are_none(zone: Zone, name: str) -> None:
    request = parse(name, zone)
    assert request.kind is Shape.NONE
    with pytest.raises(ValueError):
        owner(request, zone)


def test_a_name_outside_the_zone_is_refused() -> None:
    for name in ("example.com.", "xsvc-global.", "svc-global.example."):
        with pytest.raises(ValueError, match="not in zone"):
            parse(name, Z)
    with pytest.raises(ValueError, match="malformed"):
        parse(b"\x03web\x07default", Z)  # no root label


def test_every_published_name_parses_to_the_name_written() -> None:
    """Every owner name of the demo, in both schemes, is a name of the grammar (no NONE)
    whose request writes the very same bytes: encoders and parser agree."""
    index = synced_index(demo_records(), IndexOptions(cluster_name="east"), kinds=BOTH,
                         mcs_zones=["clusterset.local."])
    responder = index.responder
    names = {key[:-4] for key in responder.answers} | set(responder.names)
    kinds: dict[str, set[Shape]] = {SVC_GLOBAL: set(), MCS: set()}
    for name in names:
        zone = responder.zone_of(name)
        assert zone is not None
        request = parse(name, zone)
        assert request.kind is not Shape.NONE, name
        assert owner(request, zone) == name
        kinds[zone.scheme].add(request.kind)
    everything = {Shape.APEX, Shape.NAMESPACE, Shape.SERVICE, Shape.MEMBER, Shape.PROTOCOL,
                  Shape.SRV}
    assert kinds[SVC_GLOBAL] == everything | {Shape.CLUSTER}
    # KEP-1645: a CLUSTER name owns no record; it exists as an empty non-terminal
    assert kinds[MCS] == everything | {Shape.VERSION, Shape.SERVICES, Shape.CLUSTER}
    mcs_owners = [(key[:-4], zone) for key in responder.answers
                  if (zone := responder.zone_of(key[:-4])) is not None and zone.scheme == MCS]
    assert mcs_owners and not [n for n, zone in mcs_owners
                               if parse(n, zone).kind is Shape.CLUSTER]
    # explain reads names through the same grammar: an SRV name filters the service.
    report = Explainer(index).explain("_http._tcp.nginx-svc.default.svc-global", "SRV")
    assert report["global_service"] == "default/nginx-svc"
    assert report["srv_filter"] == "_http._tcp"
    deep = Explainer(index).explain("a.b.c.nginx-svc.default.svc-global")
    assert deep["rcode"] == "NXDOMAIN" and "no name of the zone has this shape" in \
        deep["explanation"]


@pytest.mark.parametrize("zone", ["svc-global.", "a.much.longer.zone.example.",
                                  "clusterset.local."])
@pytest.mark.parametrize(("service", "namespace", "cluster", "host", "port", "protocol"), [
    ("web", "default", "east", "web-0", "http", "TCP"),
    ("s" * 63, "n" * 63, "c" * 63, "h" * 63, "p" * 62, "SCTP"),
    ("db", "ns", "west", None, "grpc-web", "UDP"),
])
def test_name_lengths_are_the_lengths_of_the_names_built(
        zone: str, service: str, namespace: str, cluster: str, host: str | None, port: str,
        protocol: str) -> None:
    """The arithmetic that refuses a too-long name before it is built agrees with the
    builders, in both schemes, for every shape it measures."""
    from dnsside.dns import names

    for z in (Zone(zone, ZoneOptions()), McsZone(zone, ZoneOptions())):
        services = names.services_name(z.wire, z.scheme)
        service_wire = names.service_name(service, namespace, services)
        octets = names.service_octets(service, namespace, len(services))
        assert octets == len(service_wire)
        cluster_wire = names.cluster_name(cluster, service_wire)
        owner_wire = cluster_wire if host is None else names.member_name(host, cluster_wire)
        assert names.member_octets(octets, cluster, host) == len(owner_wire)
        assert names.member_octets(octets, cluster, host) <= octets + names.MEMBER_OCTETS_MAX
        srv = names.srv_name(port, names.protocol_name(protocol, service_wire) or b"")
        assert names.srv_octets(octets, port, protocol) == len(srv)
        assert names.srv_octets(octets, port, protocol) <= octets + names.SRV_OCTETS_MAX
    assert names.DEFAULT_ZONE_OCTETS == len(to_wire("svc-global."))


@pytest.mark.parametrize(("text", "ok"), [
    ("web", True), ("web-0", True), ("_http", False), ("my_port", True), ("-web", False),
    ("web-", False), ("Web", False), ("a" * 63, True), ("a" * 64, False), ("", False),
    ("web.default", False),
])
def test_a_label_built_from_an_object(text: str, ok: bool) -> None:
    from dnsside.dns.names import is_dns_label

    assert is_dns_label(text) is ok
