"""Addresses no pod or Service can own: never published, whoever hands them to dnsside.

A Kubernetes API validates the addresses it stores (``ValidateEndpointIP`` refuses
unspecified, loopback and link-local ones); a linked cluster's API server, a file
source or a hand-written mirror validates nothing. An answer of ``127.0.0.1`` or
``169.254.169.254`` (cloud metadata) points a client at itself or at its node's
secrets, so :func:`unsafe_address` names the class of every address that can
never be a pod's or a Service's, and the assembly leaves those out (visibly).

Some IPv6 forms *carry* an IPv4 address, and are judged by it. The table, one class per
row (the reason is the low-cardinality name the metric, the log and `explain` use):

=====================================  ==========================  ===============
range                                  what it is                  reason
=====================================  ==========================  ===============
0.0.0.0/8                              "this network" (RFC 1122)   unspecified
127.0.0.0/8                            loopback                    loopback
169.254.0.0/16                         link-local, cloud metadata  link-local
224.0.0.0/4                            multicast                   multicast
255.255.255.255/32                     limited broadcast           broadcast
::/128                                 unspecified                 unspecified
::1/128                                loopback                    loopback
fe80::/10                              link-local                  link-local
ff00::/8                               multicast                   multicast
::ffff:0:0/96                          IPv4-mapped (RFC 4291)      its IPv4's
::/96 (but :: and ::1)                 IPv4-compatible, deprecated its IPv4's
::ffff:0:0:0/96                        IPv4-translated (RFC 2765)  its IPv4's
64:ff9b::/96                           NAT64 well-known (RFC 6052) its IPv4's
2002::/16                              6to4 (RFC 3056), bits 16-47 its IPv4's
168.63.129.16/32                       Azure's host endpoint       cloud-metadata
100.100.100.200/32                     Alibaba Cloud's metadata    cloud-metadata
fd00:ec2::254/128                      AWS's metadata over IPv6    cloud-metadata
=====================================  ==========================  ===============

The last three are the documented metadata and host endpoints outside link-local (SPEC
§3): ordinary-looking private or unique-local addresses that a pod network could in
principle hold, but that on those clouds answer with the node's credentials (AWS's
``fd00:ec2::254`` on Nitro instances with IPv6 metadata, Azure's WireServer
``168.63.129.16``, Alibaba's ``100.100.100.200``). Only those exact addresses are
refused, never their ranges; the IPv6 forms carrying one (``::ffff:168.63.129.16``) are
judged by it.

So ``::ffff:127.0.0.1``, ``::127.0.0.1``, ``64:ff9b::a9fe:a9fe`` and ``2002:7f00:1::``
are loopback, loopback, link-local and loopback; ``::2`` is unspecified (0.0.0.2).

Deliberately *not* refused: the rest of 240.0.0.0/4 (GKE can give pods Class E
addresses), unique-local fc00::/7 and private IPv4 (ordinary pod ranges),
deprecated site-local fec0::/10 (routable unicast), Teredo 2001::/32 (its client
address is obfuscated, and no host on a pod network relays it), and the
local-use NAT64 prefix 64:ff9b:1::/48 (where the IPv4 sits depends on the
operator's prefix length).

Cost: the common dotted-quad pod address is judged by its first octet with one
dict lookup, and IPv6 by its first group; only IPv6 addresses starting with
``::``, ``64:ff9b::`` or ``2002:`` go through :mod:`ipaddress`.
"""

from __future__ import annotations

import enum
import ipaddress
import socket


def normal_ip(text: str) -> str:
    """The canonical text of an IP address; ValueError when it is none.

    Dotted-quad IPv4, by far the common case, is checked by inet_pton in C and
    kept as is (inet_pton accepts only the canonical form); the rest goes through
    ipaddress, which also canonicalises IPv6.
    """
    try:
        socket.inet_pton(socket.AF_INET, text)
        return text
    except OSError:
        if "%" in text:  # fe80::1%eth0: a scope is the reader's interface, no pod's address
            raise ValueError(f"{text!r} carries a scope") from None
        return str(ipaddress.ip_address(text))


class Unsafe(enum.StrEnum):
    """Why an address is never published (the metric's ``reason`` label)."""

    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    LINK_LOCAL = "link-local"
    MULTICAST = "multicast"
    BROADCAST = "broadcast"
    CLOUD_METADATA = "cloud-metadata"


# The documented cloud metadata and host endpoints outside link-local, in canonical text.
CLOUD_METADATA = frozenset({"168.63.129.16", "100.100.100.200", "fd00:ec2::254"})


# The canonical text of each IPv4 first octet → its verdict: a reason, None (fine),
# or "" (look further: 169.x and 255.x are only partly unsafe).
_FIRST_OCTET: dict[str, Unsafe | str | None] = {str(n): None for n in range(256)}
_FIRST_OCTET["0"] = Unsafe.UNSPECIFIED
_FIRST_OCTET["127"] = Unsafe.LOOPBACK
_FIRST_OCTET["169"] = ""
_FIRST_OCTET["255"] = ""
_FIRST_OCTET["168"] = ""  # 168.63.129.16
_FIRST_OCTET["100"] = ""  # 100.100.100.200
for _n in range(224, 240):
    _FIRST_OCTET[str(_n)] = Unsafe.MULTICAST


def unsafe_address(address: str) -> Unsafe | None:
    """Why no pod or Service can own ``address``, or None when one can.

    ``address`` is canonical text, as :func:`normal_ip` returns it (the
    fast paths read its first octet or group and trust the rest); any other spelling
    goes through :mod:`ipaddress`, which raises ValueError for what is no address."""
    head, dot, rest = address.partition(".")
    if dot:
        verdict = _FIRST_OCTET.get(head, "?")
        if verdict is None or type(verdict) is Unsafe:
            if rest.count(".") == 2:  # a.b.c.d: the common case ends here
                return verdict
        elif verdict == "" and rest.count(".") == 2:
            if head == "169":
                return Unsafe.LINK_LOCAL if rest.startswith("254.") else None
            if head == "255":
                return Unsafe.BROADCAST if rest == "255.255.255" else None
            return Unsafe.CLOUD_METADATA if address in CLOUD_METADATA else None
        return _slow(address)  # not canonical dotted-quad text, or an IPv6 with a dot
    head = address.partition(":")[0]
    if not head or len(head) > 4:
        return _slow(address)  # "::…" (embedded IPv4 forms), or not an address
    try:
        first = int(head, 16)
    except ValueError:
        return _slow(address)
    if first >> 8 == 0xFF:
        return Unsafe.MULTICAST
    if first & 0xFFC0 == 0xFE80:
        return Unsafe.LINK_LOCAL
    if first in (0x2002, 0x64) or first == 0:
        return _slow(address)  # 6to4, NAT64, or a zero first group spelled out
    if first == 0xFD00:  # fd00:ec2::254, however spelt; the rest of fd00::/16 is fine
        second = address.split(":", 2)[1]
        return _slow(address) if second and int(second, 16) == 0xEC2 else None
    return None


def _embedded(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """(the form's name, its IPv4) for the IPv6 forms of the table that carry one."""
    n = int(ip)
    upper = n >> 32
    if upper == 0xFFFF:
        return "IPv4-mapped", ipaddress.IPv4Address(n & 0xFFFFFFFF)
    if upper == 0 and n > 1:
        return "IPv4-compatible", ipaddress.IPv4Address(n)
    if upper == 0xFFFF0000:
        return "IPv4-translated", ipaddress.IPv4Address(n & 0xFFFFFFFF)
    if upper == 0x64FF9B << 64:
        return "NAT64", ipaddress.IPv4Address(n & 0xFFFFFFFF)
    if n >> 112 == 0x2002:
        return "6to4", ipaddress.IPv4Address((n >> 80) & 0xFFFFFFFF)
    return None


def _slow(address: str) -> Unsafe | None:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv4Address):
        return unsafe_address(str(ip))
    if ip.is_unspecified:
        return Unsafe.UNSPECIFIED
    if ip.is_loopback:
        return Unsafe.LOOPBACK
    if ip.is_multicast:
        return Unsafe.MULTICAST
    if ip.is_link_local:
        return Unsafe.LINK_LOCAL
    if str(ip) in CLOUD_METADATA:
        return Unsafe.CLOUD_METADATA
    found = _embedded(ip)
    return unsafe_address(str(found[1])) if found is not None else None


def describe(address: str, reason: Unsafe) -> str:
    """``127.0.0.1 (loopback)``, ``::ffff:127.0.0.1 (loopback: IPv4-mapped 127.0.0.1)``."""
    ip = ipaddress.ip_address(address)
    found = _embedded(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if found is None:
        return f"{address} ({reason})"
    return f"{address} ({reason}: {found[0]} {found[1]})"


__all__ = ["CLOUD_METADATA", "Unsafe", "describe", "unsafe_address"]
