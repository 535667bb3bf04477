"""The names dnsside serves, stated once: the grammar of both naming schemes.

A ``--zone`` Z (scheme ``svc-global``) names the global services so::

    Z                                     apex
    <ns>.Z                                namespace (owns no record)
    <svc>.<ns>.Z                          service
    <cluster>.<svc>.<ns>.Z                cluster
    <host>.<cluster>.<svc>.<ns>.Z         member (a pod with a hostname)
    _<proto>.<svc>.<ns>.Z                 protocol (owns no record)
    _<port>._<proto>.<svc>.<ns>.Z         SRV of one named port

A ``--mcs-zone`` M (scheme ``mcs``, the Multi-Cluster Services names of KEP-1645) hangs
the same shapes below ``svc.M``, which owns no record, and has ``dns-version.M`` at the
top. Its per-cluster name is in the grammar but owns no record (KEP-1645 has none): an
empty non-terminal above pod names, else NXDOMAIN; the encoder, not the grammar, decides
which names exist.

:func:`parse` reads a name as a typed :class:`Request`; the builders below it write the
owner names the encoders publish, and :func:`owner` is the exact inverse of
:func:`parse` (tests hold both ways). The responder never parses a name by this
grammar: a name exists when the tables hold it, so the grammar cannot disagree with
what is answered; the query path only asks :func:`find_zone`.

The grammar is unambiguous because every label taken from Kubernetes (namespace,
service, cluster, hostname) is an RFC 1123 label, which cannot start with ``_``: a
first label ``_x`` can only begin a protocol or SRV name.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from dnsside.dns.wire import to_wire

SVC_GLOBAL = "svc-global"
MCS = "mcs"

# The protocols an SRV name can carry, as Kubernetes spells them, and their labels.
PROTOCOL_LABELS = {"TCP": "_tcp", "UDP": "_udp", "SCTP": "_sctp"}
_PROTOCOLS = {text: protocol for protocol, text in PROTOCOL_LABELS.items()}
# A label of a name dnsside builds from an object (a namespace, a service, a cluster, a
# hostname, a port name), lower case; an underscore passes, as Kubernetes DNS lets it.
_OBJECT_LABEL = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
SERVICES_LABEL = "svc"  # an MCS zone's services hang below svc.M
VERSION_LABEL = "dns-version"  # dns-version.M TXT: the KEP-1645 schema version


def is_dns_label(value: str) -> bool:
    """``value`` (lower case) can be a label of a name built from an object: the rule every
    source's text passes before it reaches an owner name."""
    return bool(_OBJECT_LABEL.match(value))


class Shape(enum.Enum):
    """What a name is in its scheme's grammar (the shapes in the table above)."""

    APEX = "apex"
    VERSION = "dns-version"  # mcs only
    SERVICES = "services"  # svc.M, mcs only
    NAMESPACE = "namespace"
    SERVICE = "service"
    CLUSTER = "cluster"
    MEMBER = "member"
    PROTOCOL = "protocol"
    SRV = "srv"
    NONE = "none"  # below the apex, but no name of its scheme has this shape


@dataclass(frozen=True, slots=True)
class Request:
    """A name read by the grammar: what it is, and the labels that say which one.
    Fields the kind has no label for are empty."""

    kind: Shape
    scheme: str
    labels: tuple[str, ...] = ()  # everything below the apex, leftmost first
    namespace: str = ""
    service: str = ""
    cluster: str = ""
    host: str = ""
    port: str = ""  # SRV: the port's name, without its underscore
    protocol: str = ""  # SRV and PROTOCOL: TCP, UDP or SCTP


class ZoneName(Protocol):
    """What the grammar needs of a zone: its name in wire form and its scheme."""

    @property
    def wire(self) -> bytes: ...

    @property
    def scheme(self) -> str: ...


Z = TypeVar("Z")


def find_zone(qname: bytes, zones: Mapping[bytes, Z]) -> Z | None:
    """The zone a well-formed lower-case wire name lies in (the longest match wins, since
    the walk starts at the whole name), or None."""
    i = 0
    while True:
        zone = zones.get(qname[i:])
        if zone is not None:
            return zone
        n = qname[i]
        if n == 0:
            return None
        i += n + 1


def parse(name: bytes | str, zone: ZoneName) -> Request:
    """``name`` (wire form, or text with or without its final dot; any case) as a request
    of ``zone``'s scheme. ValueError when it is no DNS name or not in ``zone``."""
    wire = to_wire(name) if isinstance(name, str) else name.lower()
    labels, apex = _split(wire), _split(zone.wire)
    below = len(labels) - len(apex)
    if below < 0 or labels[below:] != apex:
        raise ValueError(f"{_text(labels)} is not in zone {_text(apex)}")
    relative = tuple(label.decode("latin-1") for label in labels[:below])
    scheme = zone.scheme
    if not relative:
        return Request(Shape.APEX, scheme)
    services = relative
    if scheme == MCS:
        if relative == (VERSION_LABEL,):
            return Request(Shape.VERSION, scheme, relative)
        if relative[-1] != SERVICES_LABEL:
            return Request(Shape.NONE, scheme, relative)
        services = relative[:-1]
        if not services:
            return Request(Shape.SERVICES, scheme, relative)
    return _below_services(services, scheme, relative)


def _below_services(labels: tuple[str, ...], scheme: str, relative: tuple[str, ...]) -> Request:
    """The shapes both schemes share, read from the right: ``<ns>``, then ``<svc>``, then
    either a cluster and a host, or the SRV labels."""
    n = len(labels)
    if n == 1:
        return Request(Shape.NAMESPACE, scheme, relative, namespace=labels[0])
    svc, ns = labels[-2], labels[-1]
    if labels[0].startswith("_"):
        if n == 3 and labels[0] in _PROTOCOLS:
            return Request(Shape.PROTOCOL, scheme, relative, namespace=ns, service=svc,
                           protocol=_PROTOCOLS[labels[0]])
        if n == 4 and labels[1] in _PROTOCOLS and len(labels[0]) > 1:
            return Request(Shape.SRV, scheme, relative, namespace=ns, service=svc,
                           port=labels[0][1:], protocol=_PROTOCOLS[labels[1]])
        return Request(Shape.NONE, scheme, relative)
    if n == 2:
        return Request(Shape.SERVICE, scheme, relative, namespace=ns, service=svc)
    if n == 3:
        return Request(Shape.CLUSTER, scheme, relative, namespace=ns, service=svc,
                       cluster=labels[0])
    if n == 4:
        return Request(Shape.MEMBER, scheme, relative, namespace=ns, service=svc,
                       cluster=labels[1], host=labels[0])
    return Request(Shape.NONE, scheme, relative)


def _split(wire: bytes) -> list[bytes]:
    labels = []
    i = 0
    while i < len(wire) and wire[i]:
        n = wire[i]
        if n > 63 or i + 1 + n >= len(wire):
            raise ValueError(f"malformed name {wire!r}")
        labels.append(wire[i + 1 : i + 1 + n])
        i += n + 1
    if i != len(wire) - 1:
        raise ValueError(f"malformed name {wire!r}")
    return labels


def _text(labels: list[bytes]) -> str:
    return ".".join(label.decode("latin-1") for label in labels) + "."


# --------------------------------------------------------------------------- owner names
# What the encoders write. Each builder takes the name it hangs below, so an encoder that
# writes thousands of names below one service builds that service's name once.


def label(text: str) -> bytes:
    """One label in wire form, lower case. ValueError when DNS cannot carry it."""
    raw = text.lower().encode("ascii")
    if not 0 < len(raw) < 64:
        raise ValueError(f"bad DNS label {text!r}")
    return bytes([len(raw)]) + raw


# How long a name grows, known from the text before the name is built, so a name over
# DNS's limit (RFC 1035 §2.3.4) is refused as its object arrives, never met when encoding.
# A zone is counted by what it adds below a namespace (its services name, with the root).
MAX_NAME_OCTETS = 255
DEFAULT_ZONE_OCTETS = 12  # svc-global., the default --zone: "\x0asvc-global\x00"
MEMBER_OCTETS_MAX = 2 * (1 + 63)  # <host>.<cluster>. below a service, at the most
SRV_OCTETS_MAX = (2 + 63) + (2 + 4)  # _<port>._<proto>. below a service (_sctp the longest)


def service_octets(service: str, namespace: str, zone_octets: int) -> int:
    """``<svc>.<ns>.<zone>`` in wire octets."""
    return 2 + len(service) + len(namespace) + zone_octets


def member_octets(service: int, cluster: str, host: str | None) -> int:
    """``<host>.<cluster>.<svc>...`` (``<cluster>.<svc>...`` without a host) in wire octets,
    ``service`` being its service name's."""
    return service + 1 + len(cluster) + (1 + len(host) if host else 0)


def srv_octets(service: int, port: str, protocol: str) -> int:
    """``_<port>._<proto>.<svc>...`` in wire octets (``protocol`` as Kubernetes spells it)."""
    return service + 4 + len(port) + len(protocol)


def services_name(zone: bytes, scheme: str) -> bytes:
    """The name namespaces hang below: the apex, or an MCS zone's ``svc.M``."""
    return label(SERVICES_LABEL) + zone if scheme == MCS else zone


def version_name(zone: bytes) -> bytes:
    """An MCS zone's ``dns-version.M``."""
    return label(VERSION_LABEL) + zone


def namespace_name(namespace: str, services: bytes) -> bytes:
    return label(namespace) + services


def service_name(service: str, namespace: str, services: bytes) -> bytes:
    return label(service) + label(namespace) + services


def cluster_name(cluster: str, service: bytes) -> bytes:
    return label(cluster) + service


def member_name(host: str, cluster: bytes) -> bytes:
    return label(host) + cluster


def protocol_name(protocol: str, service: bytes) -> bytes | None:
    """``_<proto>.<svc>...``; None for a protocol SRV names do not carry."""
    text = PROTOCOL_LABELS.get(protocol)
    return None if text is None else label(text) + service


def srv_name(port: str, protocol: bytes) -> bytes:
    """``_<port>._<proto>.<svc>...``; ValueError for a port name too long for a label."""
    return label("_" + port) + protocol


def owner(request: Request, zone: ZoneName) -> bytes:
    """The wire name :func:`parse` reads as ``request`` in ``zone``. ValueError for
    ``Shape.NONE``, which has no shape to write."""
    kind = request.kind
    if kind is Shape.APEX:
        return zone.wire
    if kind is Shape.VERSION:
        return version_name(zone.wire)
    services = services_name(zone.wire, zone.scheme)
    if kind is Shape.SERVICES:
        return services
    if kind is Shape.NAMESPACE:
        return namespace_name(request.namespace, services)
    if kind is Shape.NONE:
        raise ValueError("a name of no shape has no owner name")
    service = service_name(request.service, request.namespace, services)
    if kind is Shape.SERVICE:
        return service
    if kind is Shape.CLUSTER:
        return cluster_name(request.cluster, service)
    if kind is Shape.MEMBER:
        return member_name(request.host, cluster_name(request.cluster, service))
    protocol = protocol_name(request.protocol, service)
    if protocol is None:
        raise ValueError(f"SRV names carry no protocol {request.protocol!r}")
    return protocol if kind is Shape.PROTOCOL else srv_name(request.port, protocol)
