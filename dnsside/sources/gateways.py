"""dnsside's own probe of each link's gateway: one more source of events for the index.

Linkerd marks a dead cluster's mirrors not ready 9 to 90 s after its gateway dies,
minutes later with many mirrors, and never when the gateway was already down
when the service mirror started (docs/linkerd-internals.md). So dnsside probes the
gateways itself, the way Linkerd's probe worker does: ``GET`` the link's probe
Service (``http://<ClusterIP>:<mc-probe port><probeSpec.path>``) every period;
after ``failures`` consecutive failures the cluster's gateway-routed members
leave every answer, and one success brings them back.

A target that has *never* answered since dnsside started
is not acted on. Such a gateway may be unreachable from this pod for reasons
that have nothing to do with the cluster behind it (a NetworkPolicy, a probe
Service that Linkerd has not wired yet), and the probe may only ever make
answers shorter when it has seen the gateway work. Linkerd's own readiness
stands for it; the state is reported (``never answered``) so an operator sees it.

What a target taught us is kept per cluster *and URL* for the life of the
process, not per Link or probe Service object: a Link deleted and re-created
unchanged (a GitOps re-sync, a second ``linkerd multicluster link``) or a probe
Service re-created at the same address resumes from what was known, so a dead
gateway stays out instead of becoming "never answered" again. Stopping a probe
sends nothing to the index either: its last word stands. Only a new URL (maybe
really a new gateway) starts afresh.

:class:`GatewayTracker` is that rule as a pure state machine; :class:`GatewayProber`
is the I/O around it (aiohttp, already needed by the Kubernetes client).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

import aiohttp

from dnsside.model.events import Event, Gateway, GatewayState
from dnsside.model.printable import printable
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.probe")

SOURCE_NAME = "gateway-probe"


@dataclass(slots=True)
class TargetHistory:
    """What one probe target (a cluster's gateway at one URL) has shown since start."""

    answered: bool = False  # succeeded at least once since start
    failures: int = 0  # consecutive
    state: Gateway | None = None
    detail: str = ""


class GatewayTracker:
    """Probe results in, state changes out. No clock, no sockets.

    ``current`` is the URL each cluster is probed at now; ``published`` the state the
    index holds for each cluster (what the last change said). Histories are kept for
    ``keep`` targets, the least recently probed dropped first, so churned addresses
    cannot grow it without bound.
    """

    def __init__(self, failures: int, keep: int = 256) -> None:
        self.failures = max(1, failures)
        self.keep = keep
        self.history: dict[tuple[str, str], TargetHistory] = {}
        self.current: dict[str, str] = {}
        self.published: dict[str, Gateway | None] = {}

    def start(self, cluster: str, url: str) -> GatewayState | None:
        """Probe ``cluster`` at ``url`` from now on; the state the index must hold when it
        differs from what it holds (a remembered target's state, or none for a new URL)."""
        self.current[cluster] = url
        target = self._target(cluster, url)
        return self._publish(cluster, target.state, target.detail)

    def stop(self, cluster: str) -> None:
        """No longer probed (unlinked, or its probe Service gone): remember, tell nobody."""
        self.current.pop(cluster, None)

    def record(self, cluster: str, url: str, ok: bool, detail: str = "") -> GatewayState | None:
        """One probe result; the new state when the index must learn it."""
        target = self._target(cluster, url)
        if ok:
            target.answered, target.failures = True, 0
            state: Gateway | None = Gateway.ALIVE
        else:
            target.failures += 1
            if target.failures < self.failures:
                state = target.state  # not yet: one blip is not an outage
            else:
                state = Gateway.FAILING if target.answered else Gateway.UNREACHED
        if state is not target.state:
            target.state, target.detail = state, detail
        if self.current.get(cluster, url) != url:
            return None  # a late result of a URL no longer probed
        self.current[cluster] = url
        return self._publish(cluster, target.state, detail)

    def _target(self, cluster: str, url: str) -> TargetHistory:
        key = (cluster, url)
        target = self.history.pop(key, None) or TargetHistory()
        self.history[key] = target  # most recently used last
        while len(self.history) > self.keep:
            del self.history[next(iter(self.history))]
        return target

    def _publish(self, cluster: str, state: Gateway | None, detail: str) -> GatewayState | None:
        if self.published.get(cluster) is state:
            return None
        self.published[cluster] = state
        return GatewayState(cluster, state, detail)


class GatewayProber:
    """Probe every target ``targets()`` names (cluster → URL), re-reading it every period."""

    name = SOURCE_NAME

    def __init__(
        self,
        targets: Callable[[], Mapping[str, str]],
        *,
        period: float = 1.0,
        timeout: float = 1.0,
        failures: int = 2,
    ) -> None:
        self.targets = targets
        self.period = period
        self.timeout = timeout
        self.tracker = GatewayTracker(failures)
        self.live: dict[str, object] = {}  # cluster → the token of its one live probe loop

    async def events(self) -> AsyncIterator[list[Event]]:
        queue: asyncio.Queue[GatewayState] = asyncio.Queue()
        tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            try:
                while True:
                    self._reconcile(session, tasks, queue)
                    try:
                        first = await asyncio.wait_for(queue.get(), self.period)
                    except TimeoutError:
                        continue
                    batch: list[Event] = [first]
                    while not queue.empty():
                        batch.append(queue.get_nowait())
                    yield batch
            finally:
                for _, task in tasks.values():
                    task.cancel()
                for _, task in tasks.values():
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    def _reconcile(
        self,
        session: aiohttp.ClientSession,
        tasks: dict[str, tuple[str, asyncio.Task[None]]],
        queue: asyncio.Queue[GatewayState],
    ) -> None:
        """Start probing new targets, stop probing gone or moved ones. A stopped probe's
        last state stands in the index; a started one resumes its URL's history."""
        wanted = dict(self.targets())
        for cluster, (url, task) in list(tasks.items()):
            if wanted.get(cluster) != url:
                task.cancel()
                del tasks[cluster]
                self.live.pop(cluster, None)
                self.tracker.stop(cluster)
                _set_state(cluster, None)
                if cluster not in wanted:  # no longer probed at all: its counters go too
                    _forget_probes(cluster)
                log.info("gateway probe of cluster %s stopped (%s)", cluster, url)
        for cluster, url in wanted.items():
            if cluster not in tasks:
                resumed = self.tracker.start(cluster, url)
                known = self.tracker.history[(cluster, url)].state
                log.info("probing the gateway of cluster %s: GET %s every %gs%s", cluster, url,
                         self.period, f" (known {known.value})" if known else "")
                if resumed is not None:
                    queue.put_nowait(resumed)
                if known is not None:
                    _set_state(cluster, known)
                token = self.live[cluster] = object()
                task = asyncio.create_task(
                    self._probe_loop(session, cluster, url, queue, token), name=f"probe-{cluster}")
                tasks[cluster] = (url, task)

    async def _probe_loop(
        self, session: aiohttp.ClientSession, cluster: str, url: str,
        queue: asyncio.Queue[GatewayState], token: object,
    ) -> None:
        """Probe ``url`` every period while ``token`` is the cluster's live loop. The check
        after each probe, not only the cancellation, ends a stopped loop: a cancel that
        lands as a probe times out can be swallowed, and that loop must not live on."""
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            ok, detail = await self._probe(session, url)
            if self.live.get(cluster) is not token:
                return
            metrics.GATEWAY_PROBES.labels(cluster=cluster,
                                          result="success" if ok else "failure").inc()
            change = self.tracker.record(cluster, url, ok, detail)
            if change is not None:
                _log_change(change, url, self.tracker.failures)
                _set_state(cluster, change.state)
                queue.put_nowait(change)
            due = max(due + self.period, loop.time())
            await asyncio.sleep(due - loop.time())

    async def _probe(self, session: aiohttp.ClientSession, url: str) -> tuple[bool, str]:
        """(success, what happened): success is HTTP 200, as for Linkerd's probe worker."""
        try:
            # asyncio.timeout, not aiohttp's: it tells its own expiry from a cancellation.
            async with asyncio.timeout(self.timeout), session.get(
                    url, allow_redirects=False) as resp:
                if resp.status == 200:
                    return True, "200"
                return False, f"HTTP {resp.status}"
        except TimeoutError:
            return False, f"no answer within {self.timeout:g}s"
        except aiohttp.ClientError as exc:  # (may quote what the linked gateway sent)
            return False, printable(str(exc) or type(exc).__name__, 256)
        except OSError as exc:
            return False, exc.strerror or str(exc)


def _set_state(cluster: str, state: Gateway | None) -> None:
    for s in Gateway:
        if state is None:
            with contextlib.suppress(KeyError):
                metrics.GATEWAY_STATE.remove(cluster, _label(s))
        else:
            metrics.GATEWAY_STATE.labels(cluster=cluster, state=_label(s)).set(
                1 if s is state else 0)


def _forget_probes(cluster: str) -> None:
    for result in ("success", "failure"):
        with contextlib.suppress(KeyError):
            metrics.GATEWAY_PROBES.remove(cluster, result)


def _label(state: Gateway) -> str:
    return state.value.replace(" ", "-")


def _log_change(change: GatewayState, url: str, failures: int) -> None:
    if change.state is Gateway.FAILING:
        log.warning("gateway of cluster %s fails dnsside's probe (GET %s: %s, %d times in a "
                    "row): its gateway-routed members leave every answer until a probe succeeds",
                    change.cluster, url, change.detail, failures)
    elif change.state is Gateway.UNREACHED:
        log.warning("gateway of cluster %s has never answered dnsside's probe since start (GET "
                    "%s: %s): not acted on, Linkerd's readiness stands; check that this pod can "
                    "reach the probe Service", change.cluster, url, change.detail)
    elif change.state is Gateway.ALIVE:
        log.info("gateway of cluster %s answers dnsside's probe (GET %s)", change.cluster, url)


__all__ = ["GatewayProber", "GatewayTracker", "TargetHistory"]
