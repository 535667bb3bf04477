"""`dnsside check`: do clients get spread over the members the way dnsside answers?

Two things outside dnsside decide it. The cluster DNS: CoreDNS caches an answer for its
TTL and, unless the zone's server block has ``loadbalance``, hands every client of that
cached answer the same first address, so one pod takes every connection whatever order
dnsside sends. The checks read the cluster DNS's ConfigMaps in ``kube-system`` (kubeadm's
and EKS's ``coredns``, the ``coredns-custom`` imports of k3s, AKS and Gardener,
NodeLocal DNSCache's ``node-local-dns`` and kubespray's ``nodelocaldns``), find every
server block that serves one of dnsside's zones, and want ``loadbalance`` in each. A
ConfigMap that is missing or unreadable is skipped: every platform has only some of
them, and kube-dns (GKE) or the OpenShift DNS operator keep theirs elsewhere.

And the ``dnsside.io/locality`` annotations: a value dnsside does not know leaves the
flag in force for that service, which its owner did not mean.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dnsside.kubeapi.client import ApiError
from dnsside.model.linkerd import LOCALITY, ServiceRecord
from dnsside.ops import corefile
from dnsside.ops.checker import Finding, Findings, Severity, Step, check, once

# The cluster DNS's ConfigMaps in kube-system, and the keys holding Corefile text: a key
# name, or a suffix every imported key ends with.
SYSTEM = "kube-system"
COREFILES: tuple[tuple[str, str], ...] = (
    ("coredns", "Corefile"), ("coredns-custom", ".server"), ("node-local-dns", "Corefile"),
    ("nodelocaldns", "Corefile"))
Get = Callable[[str], Awaitable[dict[str, Any] | None]]


@dataclass
class Spread:
    """What the checks read: a GET that answers None for a missing object, dnsside's zones
    (``DNSSIDE_ZONE`` and ``DNSSIDE_MCS_ZONE`` of its ConfigMap) and the Services read."""

    get: Get
    zones: frozenset[str]
    services: Sequence[ServiceRecord] | None  # None: they could not be listed

    @once
    async def corefiles(self) -> list[tuple[str, str]]:
        """(where, Corefile text) of every cluster DNS ConfigMap key that could be read."""
        found: list[tuple[str, str]] = []
        for name, key in COREFILES:
            try:
                cm = await self.get(f"/api/v1/namespaces/{SYSTEM}/configmaps/{name}")
            except (ApiError, ValueError):
                continue
            for k, text in sorted(((cm or {}).get("data") or {}).items()):
                if isinstance(text, str) and (k == key or (key.startswith(".")
                                                             and k.endswith(key))):
                    found.append((f"ConfigMap {SYSTEM}/{name} key {k}", text))
        return found


@check("coredns-loadbalance", "{where}: the block for {zones} shuffles answers (loadbalance)",
       "add `loadbalance round_robin` to that server block (`dnsside install coredns "
       "--flavor F ... --from -` writes it): without it CoreDNS gives every client of a "
       "cached answer the same first address for the TTL, and one member takes every "
       "connection", Severity.WARNING)
async def coredns_loadbalance(spread: Spread) -> Findings:
    for where, text in await spread.corefiles():
        try:
            found = corefile.blocks(text)
        except corefile.CorefileError:
            continue  # not ours to judge: CoreDNS itself refuses it
        for keys, first, last in found:
            served = sorted({corefile.zone_of(k) for k in keys} & spread.zones)
            if served:
                yield Finding(corefile.LOADBALANCE in corefile.directives(text, first, last),
                              where=where, zones=", ".join(served))


@check("locality-annotations", "every " + LOCALITY + " annotation is all or local-first",
       "{services}: dnsside does not know the value, so --locality applies to "
       "{them}; set " + LOCALITY + " to all or local-first, or remove it", Severity.WARNING)
async def locality_annotations(spread: Spread) -> Findings:
    if spread.services is None:
        return
    bad = [s for s in spread.services
           if s.locality is not None and s.locality.value is None]
    shown = ", ".join(f"Service {s.namespace}/{s.name} ({s.locality.written!r})"
                      for s in bad[:3] if s.locality is not None)
    yield Finding(not bad, services=shown + (f" and {len(bad) - 3} more" if len(bad) > 3
                                              else ""), them="it" if len(bad) == 1 else "them")


CHECKS: tuple[Step[Spread], ...] = (coredns_loadbalance, locality_annotations)

__all__ = ["CHECKS", "COREFILES", "Spread"]
