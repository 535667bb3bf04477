"""Network values of flags and peers: ``HOST:PORT``, CIDR lists, a socket peer as a client.

Every flag that names an address or a network is read here, so ``serve``, ``install``
and ``check`` accept and refuse the same spellings with the same message. The subtle
point is :func:`peer_ip`: a dual-stack socket reports an IPv4 client as
``::ffff:a.b.c.d``, which must count as the IPv4 address it is for every allow-list and
every per-client cap.

In the bottom layer with :mod:`dnsside.config`; it imports nothing else of dnsside.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def split_hostport(value: str, default_port: int | None = None) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT``; with ``default_port`` also ``HOST``,
    ``[IPv6]`` and a bare IPv6 address. Raises ValueError (the caller names the flag)."""
    text = value.strip()
    port: str | None = None
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError("expected [IPv6]:PORT")
        port = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:  # a host name, an IPv4 address, or an IPv6 address without a port
        host = text
    if port is None:
        if default_port is None:
            raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:5353 or [::1]:5353")
        return host, default_port
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"the port {port!r} is not a number from 0 to 65535")
    return host, int(port)


def parse_hostport(value: str, what: str) -> tuple[str, int]:
    """A listen address: `HOST:PORT`, `[v6]:PORT` or `:PORT` (all addresses). Raises
    ValueError naming ``what``."""
    try:
        host, port = split_hostport(value)
    except ValueError as exc:
        raise ValueError(f"{what} {value!r}: {exc}") from None
    return host or "0.0.0.0", port


def networks(values: Sequence[str], what: str) -> tuple[IPNetwork, ...]:
    """CIDRs (a bare address is its own /32 or /128); ValueError naming ``what``."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{what} {value!r} is not a network such as 10.0.0.0/8 or "
                             "::1/128") from None
    return tuple(out)


def peer_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """A socket peer's address as the client it is: an IPv4-mapped IPv6 peer of a
    dual-stack socket is its IPv4, a zone index (``%eth0``) is dropped; None when it is
    no IP address (a Unix socket's peer)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def allowed_peer(address: str, nets: Sequence[IPNetwork]) -> bool:
    """``address`` (read by :func:`peer_ip`) is in one of ``nets``."""
    ip = peer_ip(address)
    return ip is not None and any(ip.version == net.version and ip in net for net in nets)


def format_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def ns_addresses(explicit: Sequence[str] | None, pod_ip: str | None,
                 listen: str | None, explicit_what: str = "--ns-address") -> tuple[str, ...]:
    """The addresses of the zone's name server (the apex's A/AAAA records, the NS glue).

    ``--ns-address`` when given; else ``$POD_IP`` (the downward API's status.podIP);
    else the DNS listen address when it is a specific one; else 127.0.0.1. Each is
    checked and normalised; a ValueError names where a bad one came from
    (``explicit_what`` for the explicit ones).
    """
    if explicit:
        where, values = explicit_what, list(explicit)
    elif pod_ip and pod_ip.strip():
        where, values = "$POD_IP", pod_ip.split(",")
    else:
        host = parse_hostport(listen, "--listen")[0] if listen is not None else ""
        try:
            specific = not ipaddress.ip_address(host).is_unspecified
        except ValueError:  # a host name, or "" for every address: nothing to publish
            specific = False
        where, values = "--listen", [host] if specific else ["127.0.0.1"]
    out: dict[str, None] = {}
    for value in values:
        try:
            address = ipaddress.ip_address(value.strip())
        except ValueError:
            raise ValueError(f"{where}: {value.strip()!r} is not an IPv4 or IPv6 address") from None
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
            raise ValueError(f"{where}: {value.strip()!r}: a scoped address cannot be published")
        out[str(address)] = None
    return tuple(out)
