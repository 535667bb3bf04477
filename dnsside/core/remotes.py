"""A linked cluster watched directly (``--flat-network``): what the index holds of it.

On a flat network the pods of a linked cluster can be reached by their own
addresses, and dnsside reads them from that cluster's API with the Link's own
credentials, as Linkerd's destination controller does for remote discovery. A
remote Service is served directly when it is headless, matches the Link's
``remoteDiscoverySelector`` (empty selects nothing, as in Linkerd) and is not
itself one of Linkerd's mirrors in that cluster (the parser says so as the source
reads it: :func:`dnsside.model.linkerd.parse_remote_service`); its slices (or v1
Endpoints) then give one member per pod.

The remote objects share names with local ones (the same StatefulSet runs in
both clusters), so each linked cluster has a :class:`RemoteCluster` of its own,
never mixed with the local tables (but applied by the same code, a
:class:`~dnsside.core.store.Store`), and a Service that stops being selected is
simply forgotten (the source turns it into a deletion), while its slices stay: it
may be selected again.

:class:`FlatNetwork` is everything the index knows of the flat network: the
clusters, how the watch of each fares, what an operator hears when that changes,
what ``explain`` and the gauges show. A deleted Link takes its cluster with it, at
once: objects or a status arriving late for a cluster no Link targets are dropped.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from dnsside.core.diagnosis import CAP_FIX, CREDENTIALS_FIX, Notice, Told
from dnsside.core.store import Store
from dnsside.core.tables import Key
from dnsside.model.events import RemoteState, RemoteStatus, Replace
from dnsside.model.linkerd import ServiceRecord, SliceRecord


class RemoteCluster(Store):
    """What one linked cluster's API says: the selected headless Services and every slice.

    A Service belongs to the global service of its own name. The slices of a Service
    that is not selected are kept (they are few next to the local ones, and the Service
    may become selected by a label edit); only a selected Service makes them count.
    """

    def __init__(self, cluster: str) -> None:
        super().__init__()
        self.cluster = cluster
        self.synced = False  # a complete list arrived: its members count

    def key_of(self, svc: ServiceRecord | None) -> Key | None:
        return None if svc is None else (svc.namespace, svc.name)

    def replace(self, event: Replace, dirty: set[Key]) -> None:
        super().replace(event, dirty)
        self.synced = True

    def keys(self) -> Iterator[Key]:
        """The global services this cluster serves directly."""
        return iter(self.services)


class FlatNetwork:
    """The linked clusters watched directly (``--flat-network``) and how each watch fares.

    ``namespaces`` (--flat-network-namespaces, empty: all) is where their objects count;
    the source leaves the others out, this is for ``explain`` to say so.
    """

    def __init__(self, namespaces: tuple[str, ...] = ()) -> None:
        self.namespaces = namespaces
        self.clusters: dict[str, RemoteCluster] = {}
        self.status: dict[str, RemoteStatus] = {}

    def __bool__(self) -> bool:
        return bool(self.clusters or self.status)

    # ------------------------------------------------------------ what the index does

    def cluster(self, name: str, linked: Collection[str]) -> RemoteCluster | None:
        """The store of cluster ``name``'s objects; None when no Link targets it (any
        more): its Link was deleted, and with it everything learnt from it."""
        if name not in linked:
            return None
        remote = self.clusters.get(name)
        if remote is None:
            remote = self.clusters[name] = RemoteCluster(name)
        return remote

    def update(self, event: RemoteStatus, linked: Collection[str]) -> Told | None:
        """The watch of a cluster changed state: what an operator hears of it, if anything."""
        if event.cluster not in linked:
            return None
        before = self.status.get(event.cluster)
        self.status[event.cluster] = event
        # Told once per state; a credentials problem again when it is another one (the
        # fix differs), a cap when another one is hit, an API away not for every failing
        # request while it is away.
        if before is not None and before.state is event.state and (
                event.state is not RemoteState.CREDENTIALS or before.detail == event.detail
                ) and before.cap == event.cap:
            return None
        if before is None and event.state is RemoteState.CONNECTING:
            return None
        remote = self.clusters.get(event.cluster)
        return remote_state(event.cluster, event.state, event.detail, event.secret,
                            len(remote.services) if remote is not None else 0,
                            before.state if before else None, event.cap)

    def forget_unlinked(self, linked: Collection[str], dirty: set[Key]) -> None:
        """A deleted Link takes its cluster's directly watched members with it, at once."""
        for cluster in [c for c in self.clusters if c not in linked]:
            dirty.update(self.clusters.pop(cluster).keys())
        for cluster in [c for c in self.status if c not in linked]:
            del self.status[cluster]

    def keys(self) -> set[Key]:
        return {key for remote in self.clusters.values() for key in remote.services}

    def services_of(self, key: Key) -> list[tuple[ServiceRecord, list[SliceRecord]]]:
        """The synced clusters' own Services of global service ``key``, with their slices."""
        found = []
        for remote in self.clusters.values():
            svc = remote.services.get(key) if remote.synced else None
            if svc is not None:
                found.append((svc, remote.slices_of(*key)))
        return found

    def settled(self, clusters: Collection[str]) -> bool:
        """Every one of ``clusters`` has synced or failed for a reason a retry does not fix
        soon (its credentials, a cap): what ``explain`` waits for."""
        settled = (RemoteState.SYNCED, RemoteState.CREDENTIALS, RemoteState.CAPPED)
        return all((s := self.status.get(c)) is not None and s.state in settled
                   for c in clusters)

    # ------------------------------------------------------------ what others read

    def object_kind(self, cluster: str, namespace: str, name: str) -> str:
        """What a member of ``cluster`` comes from: v1 Endpoints (remotes before Linkerd
        2.14) are named after their Service, slices are not."""
        remote = self.clusters.get(cluster)
        found = remote.slices.get((namespace, name)) if remote is not None else None
        return "Endpoints" if found is not None and found.service_name == found.name \
            else "EndpointSlice"

    def describe(self, cluster: str) -> str:
        """How the direct watch of a linked cluster fares, for ``explain``."""
        status = self.status.get(cluster)
        if status is None:
            return "not watched directly"
        cap = f"{status.cap} cap; " if status.cap else ""
        text = f"{status.state.value} ({cap}Secret {status.secret})"
        text += f": {status.detail}" if status.detail else ""
        if status.weakened:  # --insecure-remote-tls let its Secret do it
            text += "; TLS weakened (--insecure-remote-tls): " + "; ".join(status.weakened)
        if status.throttled:
            text += ("; throttled: its changes come faster than --flat-network-index-share "
                     "allows, so they are coalesced and its answers lag")
        return text

    def scope(self, namespace: str) -> str:
        """Why linked clusters' own objects in ``namespace`` are not served, if they are not."""
        if not self.namespaces or namespace in self.namespaces:
            return ""
        return (f"linked clusters' own objects in namespace {namespace} are ignored: it is not "
                f"one of --flat-network-namespaces ({', '.join(self.namespaces)})")

    def gauges(self) -> dict[str, tuple[int, int, int, int]]:
        """cluster: (synced, credentials valid, TLS weakened, capped), the gauges' values."""
        return {cluster: (1 if status.state is RemoteState.SYNCED else 0,
                          0 if status.state is RemoteState.CREDENTIALS else 1,
                          1 if status.weakened else 0,
                          1 if status.state is RemoteState.CAPPED else 0)
                for cluster, status in self.status.items()}


def remote_state(cluster: str, state: RemoteState, detail: str, secret: str, services: int,
                 before: RemoteState | None, cap: str = "") -> Told:
    """What an operator hears when the direct watch of a linked cluster changes state."""
    if state is RemoteState.SYNCED:
        again = " again" if before in (RemoteState.LOST, RemoteState.CREDENTIALS) else ""
        return Told(Notice.REMOTE_SYNCED, (
            f"cluster {cluster}: flat network: its API is watched directly{again} with Secret "
            f"{secret}: {services} headless services served by their pods' own addresses"))
    if state is RemoteState.CREDENTIALS:
        return Told(Notice.REMOTE_CREDENTIALS, (
            f"cluster {cluster}: flat network: cannot use Secret {secret}: {detail}; "
            + ("its last-known members stand" if services else "its pods are not served "
               "directly (its mirrors still are)") + "; " + CREDENTIALS_FIX.format(
                cluster=cluster)))
    if state is RemoteState.CAPPED:
        return Told(Notice.REMOTE_CAPPED, (
            f"cluster {cluster}: flat network: capped ({cap}): {detail}; "
            + (f"its last complete list stands ({services} services)" if services else
               "its pods are not served directly (its mirrors still are)")
            + "; retried with backoff; " + CAP_FIX.get(cap, "")).rstrip("; "))
    if state is RemoteState.LOST:
        return Told(Notice.REMOTE_LOST, (
            f"cluster {cluster}: flat network: its API is lost ({detail}): the last-known "
            f"members of its {services} services stand until it answers again"))
    return Told(Notice.REMOTE_CONNECTING, (
        f"cluster {cluster}: flat network: connecting again with Secret {secret}"
        + (f" ({detail})" if detail else "")))


__all__ = ["FlatNetwork", "RemoteCluster", "remote_state"]
