"""The name grammar (dnsside/dns/names.py): each shape of both schemes read as a typed
request, and every name the encoders publish read back to exactly the name written."""

from __future__ import annotations

import pytest

from dnsside.core.explain import Explainer
from dnsside.core.index import IndexOptions
from dnsside.dns.names import MCS, SVC_GLOBAL, Kind, Request, owner, parse
from dnsside.dns.wire import to_wire
from dnsside.dns.zone import McsZone, Zone, ZoneOptions
from testkit.inprocess import synced_index
from tests.core.test_index import BOTH, demo_records

pytestmark = pytest.mark.quick

Z = Zone("svc-global.", ZoneOptions())
M = McsZone("clusterset.local.", ZoneOptions())

CASES = [
    (Z, "svc-global.", Request(Kind.APEX, SVC_GLOBAL)),
    (Z, "default.svc-global.", Request(Kind.NAMESPACE, SVC_GLOBAL, ("default",),
                                       namespace="default")),
    (Z, "web.default.svc-global", Request(Kind.SERVICE, SVC_GLOBAL, ("web", "default"),
                                          namespace="default", service="web")),
    (Z, "west.web.default.svc-global.", Request(
        Kind.CLUSTER, SVC_GLOBAL, ("west", "web", "default"), namespace="default",
        service="web", cluster="west")),
    (Z, "Web-0.West.web.default.SVC-global.", Request(
        Kind.MEMBER, SVC_GLOBAL, ("web-0", "west", "web", "default"), namespace="default",
        service="web", cluster="west", host="web-0")),
    (Z, "_udp.web.default.svc-global.", Request(
        Kind.PROTOCOL, SVC_GLOBAL, ("_udp", "web", "default"), namespace="default",
        service="web", protocol="UDP")),
    (Z, "_http._tcp.web.default.svc-global.", Request(
        Kind.SRV, SVC_GLOBAL, ("_http", "_tcp", "web", "default"), namespace="default",
        service="web", port="http", protocol="TCP")),
    (M, "clusterset.local.", Request(Kind.APEX, MCS)),
    (M, "dns-version.clusterset.local.", Request(Kind.VERSION, MCS, ("dns-version",))),
    (M, "svc.clusterset.local.", Request(Kind.SERVICES, MCS, ("svc",))),
    (M, "default.svc.clusterset.local.", Request(Kind.NAMESPACE, MCS, ("default", "svc"),
                                                 namespace="default")),
    (M, "web.default.svc.clusterset.local.", Request(
        Kind.SERVICE, MCS, ("web", "default", "svc"), namespace="default", service="web")),
    (M, "west.web.default.svc.clusterset.local.", Request(
        Kind.CLUSTER, MCS, ("west", "web", "default", "svc"), namespace="default",
        service="web", cluster="west")),
    (M, "web-0.west.web.default.svc.clusterset.local.", Request(
        Kind.MEMBER, MCS, ("web-0", "west", "web", "default", "svc"), namespace="default",
        service="web", cluster="west", host="web-0")),
    (M, "_sctp.web.default.svc.clusterset.local.", Request(
        Kind.PROTOCOL, MCS, ("_sctp", "web", "default", "svc"), namespace="default",
        service="web", protocol="SCTP")),
    (M, "_dns._udp.web.default.svc.clusterset.local.", Request(
        Kind.SRV, MCS, ("_dns", "_udp", "web", "default", "svc"), namespace="default",
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
    assert request.kind is Kind.NONE
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
    kinds: dict[str, set[Kind]] = {SVC_GLOBAL: set(), MCS: set()}
    for name in names:
        zone = responder.zone_of(name)
        assert zone is not None
        request = parse(name, zone)
        assert request.kind is not Kind.NONE, name
        assert owner(request, zone) == name
        kinds[zone.scheme].add(request.kind)
    everything = {Kind.APEX, Kind.NAMESPACE, Kind.SERVICE, Kind.MEMBER, Kind.PROTOCOL,
                  Kind.SRV}
    assert kinds[SVC_GLOBAL] == everything | {Kind.CLUSTER}
    assert kinds[MCS] == everything | {Kind.VERSION, Kind.SERVICES}  # KEP-1645: no CLUSTER
    # explain reads names through the same grammar: an SRV name filters the service.
    report = Explainer(index).explain("_http._tcp.nginx-svc.default.svc-global", "SRV")
    assert report["global_service"] == "default/nginx-svc"
    assert report["srv_filter"] == "_http._tcp"
    deep = Explainer(index).explain("a.b.c.nginx-svc.default.svc-global")
    assert deep["rcode"] == "NXDOMAIN" and "no name of the zone has this shape" in \
        deep["explanation"]
