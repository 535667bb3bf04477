"""``--flat-network``: each linked cluster's API, watched with its Link's own credentials.

For every Link the index holds, one task watches the cluster the Link targets
(:class:`~dnsside.sources.linked.LinkedCluster`: its Secret, its client, its reflector,
its state). This module follows the Links: it starts a cluster's watch when a Link
appears, starts it again when the Link's selector, Secret name or Secret content
changes (its first list then replaces what it held), and stops it when the Link goes.
Only a deleted Link changes what is served without a newer complete list.

The clusters' events reach the index as one stream; the first lists of clusters started
together go on as one batch (:class:`FirstLists`), and the index's time spent on each
cluster's events is charged to that cluster's budget (:meth:`FlatNetworkSource.applied`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence

from dnsside.kubeapi.client import KubeApi
from dnsside.model.events import Event, Remote, RemoteState, RemoteStatus, Replace
from dnsside.model.linkerd import LinkRecord
from dnsside.sources.linked import LinkedCluster, LinkedOptions, Target
from dnsside.sources.pacing import DEFAULT_PACING, Pacing

log = logging.getLogger("dnsside.remote")

SOURCE_NAME = "flat-network"
QUEUE_SIZE = 64  # batches of the clusters' events waiting for the index
FIRST_LISTS_WAIT = 5.0  # seconds the first lists of clusters started together wait


class FirstLists:
    """Holds back the first lists of linked clusters started together until all of them
    have listed (or failed), for at most ``wait`` seconds, and hands them on as one batch.

    Why: the same StatefulSet runs in every cluster, so each cluster's list touches the
    same global services, and the index rebuilds each with the members of every cluster
    synced so far. One list after another costs N(N+1)/2 rebuilds of a service for N
    clusters; together, N (bench/FLAT_RESULTS.md). Only the first lists wait: once
    synced, a cluster's events go on at once.
    """

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.pending: set[str] = set()  # started, neither listed nor failed yet
        self.held: list[Event] = []
        self.deadline = 0.0

    def started(self, cluster: str) -> None:
        self.pending.add(cluster)

    def stopped(self, cluster: str) -> None:
        self.pending.discard(cluster)

    def take(self, batch: list[Event], now: float) -> list[Event] | None:
        """What to hand on now (None: hold it)."""
        first = False
        for e in batch:
            if isinstance(e, Remote) and e.cluster in self.pending:
                first = first or isinstance(e.event, Replace)
                self.pending.discard(e.cluster)
            elif (isinstance(e, RemoteStatus) and e.cluster in self.pending
                  and (e.state is not RemoteState.CONNECTING or e.detail)):
                self.pending.discard(e.cluster)  # failing: not worth waiting for
        if not self.held and not first:
            return batch
        if not self.held:
            self.deadline = now + self.wait
        self.held.extend(batch)
        return self.flush(now)

    def flush(self, now: float) -> list[Event] | None:
        if self.held and (not self.pending or now >= self.deadline):
            out, self.held = self.held, []
            return out
        return None

    def timeout(self, now: float) -> float | None:
        """How long the caller may wait for more before it must flush."""
        return max(0.0, self.deadline - now) if self.held else None


class FlatNetworkSource:
    """Watches every linked cluster directly, following the Links the index holds."""

    name = SOURCE_NAME

    def __init__(
        self,
        links: Callable[[], Iterable[LinkRecord]],
        kubeconfig: str | None = None,
        namespaces: Sequence[str] = (),
        pacing: Pacing = DEFAULT_PACING,
        options: LinkedOptions | None = None,
    ) -> None:
        self.links = links
        self.kubeconfig = kubeconfig
        self.pacing = pacing
        self.options = options or LinkedOptions()
        # --flat-network-namespaces narrows what is asked of every linked cluster too (one
        # list and watch per namespace); with --namespace, the namespaces both name.
        served = self.options.limits.namespaces
        wanted = [n for n in namespaces if not served or n in served] if namespaces else sorted(
            served)
        self.namespaces = tuple(dict.fromkeys(wanted))
        self.first_lists = FirstLists(FIRST_LISTS_WAIT)
        # The clusters watched now: each one's watch and the task running it.
        self.running: dict[str, tuple[LinkedCluster, asyncio.Task[None]]] = {}
        self._changed = asyncio.Event()

    def links_changed(self) -> None:
        """The index applied a batch: look at its Links again (cheap when they did not
        change)."""
        self._changed.set()

    def applied(self, batch: Sequence[Event], seconds: float) -> None:
        """The index spent ``seconds`` on ``batch`` (one of this source's): charged to the
        budget of each cluster whose watch events it held, by their number. A list
        (``Replace``) is not charged: relists have their own pacing."""
        counts: dict[str, int] = {}
        for e in batch:
            if isinstance(e, Remote) and not isinstance(e.event, Replace):
                counts[e.cluster] = counts.get(e.cluster, 0) + 1
        total = sum(counts.values())
        for cluster, n in counts.items():
            if cluster in self.running:
                linked, _ = self.running[cluster]
                linked.charge(seconds * n / total)

    async def events(self) -> AsyncIterator[list[Event]]:
        local = await KubeApi.connect(self.kubeconfig, self.pacing.request_timeout)
        queue: asyncio.Queue[list[Event] | None] = asyncio.Queue(maxsize=QUEUE_SIZE)
        reconciler = asyncio.create_task(self._reconcile(local, queue), name="flat-network")
        loop = asyncio.get_running_loop()
        firsts = self.first_lists
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, reconciler}, timeout=firsts.timeout(
                    loop.time()), return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    if reconciler in done:
                        reconciler.result()  # a bug in the reconciler: surface it
                    out = firsts.flush(loop.time())  # waited long enough for the rest
                else:
                    batch = await getter
                    out = firsts.take(batch, loop.time()) if batch is not None else None
                if out:
                    yield out
        finally:
            reconciler.cancel()
            tasks = [task for _, task in self.running.values()]
            self.running.clear()
            for task in tasks:
                task.cancel()
            for task in (reconciler, *tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await local.close()

    async def _reconcile(self, local: KubeApi, queue: asyncio.Queue[list[Event] | None]
                         ) -> None:
        """Start a task per linked cluster, stop it when its Link goes, restart it when its
        Secret or selector changes."""
        running = self.running
        while True:
            await self._changed.wait()
            self._changed.clear()
            wanted = Target.of(self.links())
            for cluster, (linked, task) in list(running.items()):
                if wanted.get(cluster) != linked.target:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                    del running[cluster]
                    self.first_lists.stopped(cluster)
                    log.info("cluster %s: %s", cluster, "Link changed: watching it afresh"
                             if cluster in wanted else "Link gone: its watch stopped")
            for cluster, target in wanted.items():
                if cluster not in running:
                    self.first_lists.started(cluster)
                    linked = LinkedCluster(local, target, queue, namespaces=self.namespaces,
                                           pacing=self.pacing, options=self.options)
                    running[cluster] = (linked, asyncio.create_task(
                        linked.run(), name=f"flat-network-{cluster}"))


__all__ = ["FirstLists", "FlatNetworkSource", "LinkedOptions", "Target"]
