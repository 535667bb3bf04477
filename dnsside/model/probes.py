"""Where dnsside probes the linked clusters' gateways: one URL per cluster, as Linkerd's
probe worker builds it from the gateway probe Service the service mirror leaves and the
Link's ``probeSpec``.

The prober (:mod:`dnsside.sources.gateways`) asks for them every period and ``explain``
says whether a cluster is probed; both read the index's probe Services and Links
through its view and call :func:`probe_targets`, so neither the index nor the prober
holds the rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Set

from dnsside.model.linkerd import (
    DEFAULT_PROBE_PATH,
    PROBE_PORT_NAME,
    LinkRecord,
    Role,
    ServiceRecord,
)


def probe_url(svc: ServiceRecord, link: LinkRecord | None) -> str | None:
    """``http://<ClusterIP>:<mc-probe port><path>`` of a gateway probe Service, as Linkerd's
    probe worker builds it; None when the Service has no ClusterIP or no probe port."""
    if svc.role is not Role.GATEWAY_PROBE or not svc.cluster_ips:
        return None
    port = next((p.port for p in svc.ports if p.name == PROBE_PORT_NAME), None)
    if port is None:
        port = svc.ports[0].port if len(svc.ports) == 1 else None
    if port is None:
        return None
    ip = svc.cluster_ips[0]
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}{link.probe_path if link is not None else DEFAULT_PROBE_PATH}"


def probe_targets(services: Iterable[ServiceRecord], links: Iterable[LinkRecord],
                  linked: Set[str] | None) -> dict[str, str]:
    """cluster → probe URL, for every linked cluster (``linked``; None: Links cannot be read,
    so every cluster) with a gateway probe Service among ``services`` (in order: the first
    one of a cluster is its probe); the path is its Link's (``links``: the ones that count)."""
    by_cluster = {link.target_cluster: link for link in sorted(links, key=lambda lk: lk.name)}
    targets: dict[str, str] = {}
    for svc in services:
        if svc.cluster in targets or (linked is not None and svc.cluster not in linked):
            continue
        url = probe_url(svc, by_cluster.get(svc.cluster))
        if url is not None:
            targets[svc.cluster] = url
    return targets


__all__ = ["probe_targets", "probe_url"]
