"""Wiring: a source feeds the index, the index feeds the responder, transports serve it.

Read top to bottom, :meth:`App.run` is the whole life of the process: bind the
sockets (so queries get SERVFAIL, not silence, before the first sync), apply
source events until told to stop, then stop in the order SIGTERM demands —
report not ready, keep answering for the lame-duck period (``--lameduck``, as
CoreDNS's ``health { lameduck }``: kube-proxy and CoreDNS need a few seconds to
stop sending here), then stop accepting, let TCP connections flush, exit.

``dnsside explain`` builds the same index from the same source (:func:`explain_index`),
lists once instead of following, and wires the flat network through the same
:class:`LinkedClusters` as ``serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dnsside.config import Config, flag
from dnsside.core.build import make_index, transfers_allowed
from dnsside.core.index import Index
from dnsside.dns.catalog import CatalogZone
from dnsside.dns.tsig import TsigKey
from dnsside.kubeapi.errors import KubeConfigError
from dnsside.model.probes import probe_targets
from dnsside.netvalues import networks, parse_hostport
from dnsside.serving.caps import raise_open_files
from dnsside.serving.heap import HeapTrimmer
from dnsside.serving.http import HttpServer
from dnsside.serving.notify import Notifier, notify_signer
from dnsside.serving.pacing import share_while_serving
from dnsside.serving.reporting import IndexReporter
from dnsside.serving.server import TcpConnections, UdpServer
from dnsside.serving.transfer import Transfers
from dnsside.serving.versioning import Versioning
from dnsside.sources import Source
from dnsside.sources.pacing import Pacing
from dnsside.telemetry import metrics

if TYPE_CHECKING:
    from dnsside.sources.remote import FlatNetworkSource, LinkedOptions

log = logging.getLogger("dnsside")
# Said when the API server cannot even be looked for: what a newcomer without a cluster runs.
NO_CLUSTER_HINT = ("without a cluster, `--source FILE` serves a YAML/JSON file of Services "
                   "and EndpointSlices (e.g. examples/demo-east.yaml), and ./scripts/demo.sh "
                   "runs a demo")


def pacing(config: Config) -> Pacing:
    """How the API servers are retried, the local one and every linked cluster's (each
    source is given this one value): --kube-backoff-cap bounds every wait."""
    return Pacing(backoff_base=min(0.5, config.kube_backoff_cap),
                  backoff_cap=config.kube_backoff_cap)


class LinkedClusters:
    """--flat-network: each linked cluster the index's Links name (once it has synced),
    watched with its Link's credentials; ``serve`` follows them, ``explain`` lists each
    once (:meth:`settle`)."""

    def __init__(self, config: Config, index: Index) -> None:
        from dnsside.sources.remote import FlatNetworkSource

        self.index = index
        self.source: FlatNetworkSource = FlatNetworkSource(
            lambda: index.links.values() if index.synced else (),
            config.kubeconfig, config.namespaces, pacing(config), linked_options(config))

    def links_changed(self) -> None:
        """The index may hold other Links now: start, restart or stop clusters' watches."""
        self.source.links_changed()

    async def settle(self, timeout: float = 15.0) -> None:
        """List every linked cluster once, until each has synced or failed on its
        credentials or a cap (or ``timeout``: then what is known is shown, and
        ``explain`` says which cluster was still connecting)."""
        clusters = self.index.links.targets()
        self.links_changed()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                async for batch in self.source.events():
                    self.index.apply(batch)
                    if self.index.flat.settled(clusters):
                        break


async def explain_index(config: Config) -> Index:
    """The index ``dnsside explain`` reads: the source's initial state and, under
    --flat-network, each linked cluster's."""
    index = make_index(config, IndexReporter())
    source = make_source(config)
    async for batch in source.events():
        index.apply(batch)
        if index.synced:
            break
    if config.flat_network:
        await LinkedClusters(config, index).settle()
    return index


def linked_options(config: Config) -> LinkedOptions:
    """What one linked cluster may cost, where it may publish and how far its Secret is
    trusted (--flat-network-*, --insecure-remote-tls)."""
    from dnsside.kubeapi.caps import Limits
    from dnsside.sources.remote import LinkedOptions

    return LinkedOptions(
        Limits(max_endpoints=config.flat_network_max_endpoints,
               max_objects=config.flat_network_max_objects,
               max_object_bytes=config.flat_network_max_object_bytes,
               timeout=config.flat_network_timeout,
               namespaces=frozenset(config.flat_network_namespaces)),
        index_share=config.flat_network_index_share,
        insecure_tls=config.insecure_remote_tls)


def make_source(config: Config) -> Source:
    namespaces = frozenset(config.namespaces)
    if config.source == "kube":
        from dnsside.sources.kube import KubeSource

        kube: Source = KubeSource(config.kubeconfig, sorted(namespaces), pacing(config),
                                  links_namespace=config.links_namespace)
        return kube
    from dnsside.sources.file import FileSource

    source = FileSource(config.source, namespaces, poll_interval=config.reload_interval)
    source.check()
    return source



async def _in_steps(steps: Iterator[object], to_the_end: bool = False) -> float:
    """Take ``steps`` one at a time, the event loop free between two (a big service's
    change: :mod:`dnsside.core.steps`); the seconds they took, waits between them aside.
    ``to_the_end``: cancelled meanwhile, the rest is taken at once before the
    cancellation goes on, so the index is never left with half a batch applied."""
    spent = 0.0
    while True:
        started = time.perf_counter()
        more = next(steps, _DONE) is not _DONE
        spent += time.perf_counter() - started
        if not more:
            return spent
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            if to_the_end:
                for _ in steps:
                    pass
            raise


_DONE = object()

class App:
    def __init__(self, config: Config, source: Source, tsig: TsigKey | None = None) -> None:
        self.config = config
        self.source = source
        self.index = make_index(config, IndexReporter())
        self.responder = self.index.responder
        self.responder.tsig = tsig  # signed queries (a secondary's SOA check) answered signed
        metrics.watch_responder(self.responder)
        for transport in ("udp", "tcp"):  # export the series before the first sample
            metrics.ANSWER_SECONDS.labels(transport=transport)
        self.stopping = False
        self.tcp = TcpConnections(
            self.responder, config.tcp_idle_timeout, config.tcp_max_connections, config.query_log,
            Transfers(self.responder, networks(config.allow_transfer, "--allow-transfer"),
                      self.index.publisher.versions, tsig, config.transfer_max,
                      config.transfer_max_per_client),
            config.tcp_max_connections_per_client,
        )
        self.notifier = (Notifier(config.notify, self.responder.zones, notify_signer(tsig),
                                  self.responder.fixed_zones) if config.notify else None)
        self.versioning = Versioning(self.index.publisher, self.notifier)
        self.heap = HeapTrimmer(config.heap_trim_period)
        if config.notify and not transfers_allowed(config):
            log.warning("--notify %s: NOTIFYs are sent, but no transfer is allowed, so the "
                        "secondaries' IXFR/AXFR will be REFUSED: add --allow-transfer with "
                        "their addresses and/or --tsig-key-file", ", ".join(config.notify))
        if config.catalog_zone and not transfers_allowed(config):
            log.warning("--catalog-zone %s: the catalog is served, but no transfer is allowed, "
                        "so no secondary can read it: add --allow-transfer with their "
                        "addresses and/or --tsig-key-file", config.catalog_zone)
        self._closers: list[asyncio.AbstractServer] = []
        self._udp: list[UdpServer] = []
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        self._applying = asyncio.Lock()  # one batch's apply steps at a time (_consume)
        self._lameduck = False
        self.flat: LinkedClusters | None = None  # --flat-network: fed the index's Links

    def is_ready(self) -> bool:
        return self.not_ready_because() is None

    def not_ready_because(self) -> str | None:
        """Why /readyz says 503, in words an operator can act on; None when ready."""
        if self.stopping:
            return "stopping (SIGTERM): answering for the lame-duck period, then exiting"
        if not self.index.synced:
            return (f"initial sync not done: the source ({self.config.source}) has not "
                    "delivered its first complete list yet; the log says why")
        return None

    async def start(self) -> None:
        """Bind the DNS and HTTP sockets; an address that cannot be bound is one line
        naming the flag (:func:`bind_error`)."""
        try:
            await self._start_dns()
        except OSError as exc:
            raise bind_error(exc, "--listen", self.config.listen) from None
        log.info("name server of %s: the apex itself, at %s", ", ".join(self.config.zones),
                 ", ".join(self.config.ns_addresses))
        for catalog in self.responder.fixed_zones:
            if isinstance(catalog, CatalogZone):
                log.info("catalog zone %s: serial %d (this process's start), members %s",
                         catalog.origin, catalog.serial, ", ".join(
                             f"{zone} ({mid})" for zone, mid in catalog.members.items()))
        try:
            await self._start_http()
        except OSError as exc:
            raise bind_error(exc, "--http-listen", self.config.http_listen) from None
        # After both binds, so that an address in use stays the one line a user reads; no
        # more than the few connections accepted while binding can have come before it.
        raise_open_files(self.config.tcp_max_connections + self.config.http_max_connections)

    async def _start_dns(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = parse_hostport(self.config.listen, "--listen")
        for bind_host in _families(host):
            try:
                tcp = await loop.create_server(self.tcp.protocol, bind_host, port,
                                               reuse_address=True, backlog=_BACKLOG)
            except OSError as exc:
                if bind_host != "::" or not self._closers:
                    raise
                log.warning("dns: no IPv6 on this host (%s): IPv4 only", exc)
                continue
            port = tcp.sockets[0].getsockname()[1]  # with port 0, the rest take TCP's port
            self._closers.append(tcp)
            self._udp.append(await self._udp_server(bind_host, port))
            log.info("dns listening on udp+tcp %s", _fmt(bind_host, port))

    async def _start_http(self) -> None:
        from dnsside.core.explain import Explainer

        loop = asyncio.get_running_loop()
        secondaries = self.notifier.states if self.notifier is not None else None
        http = HttpServer(self.not_ready_because, Explainer(self.index, secondaries).explain,
                          networks(self.config.explain_from, "--explain-from"),
                          self.config.http_max_connections,
                          self.config.http_max_connections_per_client)
        hhost, hport = parse_hostport(self.config.http_listen, "--http-listen")
        started = False
        for bind_host in _families(hhost):
            try:
                hsrv = await loop.create_server(http.protocol, bind_host, hport,
                                                reuse_address=True, backlog=_BACKLOG)
            except OSError as exc:
                if bind_host != "::" or not started:
                    raise
                log.warning("http: no IPv6 on this host (%s): IPv4 only", exc)
                continue
            started = True
            hport = hsrv.sockets[0].getsockname()[1]
            self._closers.append(hsrv)
            log.info("http listening on %s", _fmt(bind_host, hport))

    async def _udp_server(self, host: str, port: int) -> UdpServer:
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        af, kind, proto, _, addr = (await loop.getaddrinfo(host, port, family=family,
                                                           type=socket.SOCK_DGRAM))[0]
        sock = socket.socket(af, kind, proto)
        try:
            if af == socket.AF_INET6:  # the IPv4 side has a socket of its own
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
        except OSError:
            sock.close()
            raise
        udp = UdpServer(sock, self.responder, self.config.query_log, self.config.udp_io)
        udp.start()
        log.info("udp io: %s", "batch (recvmmsg/sendmmsg)" if udp.io == "batch"
                 else "plain (recvfrom/sendto)")
        return udp

    async def consume(self) -> None:
        """Apply the source's events and, once synced, the gateway prober's. Both run on
        this event loop, so the index never sees two batches at once."""
        tasks = [asyncio.create_task(self._consume(self.source), name=self.source.name)]
        if self.config.probing:
            from dnsside.sources.gateways import GatewayProber

            prober = GatewayProber(
                self._probe_targets, period=self.config.gateway_probe_period,
                timeout=self.config.gateway_probe_timeout,
                failures=self.config.gateway_probe_failures,
            )
            tasks.append(asyncio.create_task(self._consume(prober), name=prober.name))
        else:
            log.info("gateway probe off: Linkerd's readiness of the mirrors is used as is")
        if self.config.flat_network:
            self.flat = LinkedClusters(self.config, self.index)
            tasks.append(asyncio.create_task(self._consume(self.flat.source),
                                             name=self.flat.source.name))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # a source that failed stops the process
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _probe_targets(self) -> dict[str, str]:
        """Where the prober probes now: the index's probe Services and Links, read through
        its view, by Linkerd's rule (:func:`dnsside.model.probes.probe_targets`)."""
        local, links = self.index.local, self.index.links
        return probe_targets(local.probe_services(), links.values(), links.linked())

    async def _consume(self, source: Source) -> None:
        name = source.name
        flat = self.flat.source if self.flat is not None and source is self.flat.source else None
        # The source gauges are written here only, for every source alike: 0 until the
        # index holds its first full state, the time of its last batch applied.
        if source is self.source:
            metrics.SOURCE_SYNCED.labels(source=name).set(0)
        async for batch in source.events():
            # A big service's slice is screened and encoded ahead in steps (Index.prepare),
            # then applied in steps (Index.apply_steps), others running between two; the
            # sources' batches are applied one at a time, each to its end.
            spent = await _in_steps(self.index.prepare(batch))
            async with self._applying:
                spent += await _in_steps(self.index.apply_steps(batch), to_the_end=True)
            if flat is not None:  # what a linked cluster's events cost is its budget's
                flat.applied(batch, spent)
            self.versioning.changed()
            self.heap.changed()
            if source is self.source:
                metrics.SOURCE_LAST_EVENT.labels(source=name).set(time.time())
                metrics.SOURCE_SYNCED.labels(source=name).set(1 if self.index.synced else 0)
                if self.flat is not None:
                    self.flat.links_changed()

    def request_stop(self, lameduck: bool = False) -> None:
        """Stop: at once, or (SIGTERM) after the lame-duck period; a second request during
        the lame-duck period cuts it short."""
        if self._stop.is_set():
            self._hurry.set()
        self._lameduck = lameduck
        self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        # SIGTERM is what the kubelet sends: lame duck first. SIGINT (a terminal) stops at once.
        for sig, lameduck in ((signal.SIGTERM, True), (signal.SIGINT, False)):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop, lameduck)
        share_while_serving()  # the GIL handed back to the loop within 1 ms
        await self.start()
        consumer = asyncio.create_task(self.consume(), name="source")
        stopper = asyncio.create_task(self._stop.wait(), name="stop")
        done, _ = await asyncio.wait({consumer, stopper}, return_when=asyncio.FIRST_COMPLETED)
        code = 0
        if consumer in done and consumer.exception() is not None:
            exc = consumer.exception()
            hint = f"; {NO_CLUSTER_HINT}" if isinstance(exc, KubeConfigError) else ""
            log.error("source %s failed: %s%s", self.source.name, exc, hint)
            code = 1
        await self.shutdown(consumer)
        stopper.cancel()
        return code

    async def shutdown(self, consumer: asyncio.Task[None]) -> None:
        self.stopping = True  # /readyz answers 503 from now on
        if self._lameduck and self.config.lameduck > 0 and not self._hurry.is_set():
            # Endpoints and kube-proxy (standalone) or CoreDNS's own lame duck (sidecar)
            # take a few seconds to stop sending here: keep answering, over UDP and TCP,
            # with the index still following the source, until then.
            log.info("lame duck: not ready, still answering for %gs", self.config.lameduck)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurry.wait(), self.config.lameduck)
                log.info("lame duck cut short by a second signal")
        log.info("stopping: not ready, closing listeners")
        metrics.SOURCE_SYNCED.labels(source=self.source.name).set(0)
        consumer.cancel()
        for udp in self._udp:
            udp.close()
        for srv in self._closers:
            srv.close()
        await self.tcp.close_all(grace=3.0)
        self.versioning.close()
        self.heap.stop()
        if self.notifier is not None:
            await self.notifier.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await consumer
        log.info("stopped")


def bind_error(exc: OSError, flag_name: str, value: str) -> OSError:
    """``exc`` from binding ``flag_name``'s address as one line that names the flag, the
    address, the likely cause and the way out (the default DNS port, 5353, is also
    mDNS's: an avahi or systemd-resolved responder often holds it)."""
    _, port = parse_hostport(value, flag_name)
    way_out = f"choose another with {flag_name} or {flag(flag_name).env}"
    if exc.errno == errno.EADDRINUSE:
        mdns = "; an mDNS responder (avahi, systemd-resolved) uses 5353" if port == 5353 else ""
        why = f"address in use: another process listens there{mdns}; {way_out}"
    elif exc.errno == errno.EACCES:
        why = (f"permission denied: a port below 1024 needs root or CAP_NET_BIND_SERVICE; "
               f"{way_out}")
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = f"this host has no such address; {way_out}"
    else:
        why = f"cannot bind: {exc.strerror or exc}; {way_out}"
    if flag_name == "--listen":
        why += " (scripts/demo.sh honours DNSSIDE_LISTEN too)"
    error = OSError(f"{flag_name} {value}: {why}")  # (with the errno, str() would lead with it)
    error.errno = exc.errno
    return error


# Connections waiting to be accepted (the kernel caps it at net.core.somaxconn, 4096 since
# Linux 5.4): a client that re-opens every connection closed for its cap keeps its share of
# this queue full, and a SYN that meets a full queue waits a second for its retry.
_BACKLOG = 4096


def _families(host: str) -> tuple[str, ...]:
    """The addresses to bind for ``host``: ``::`` means both families, as a Linux socket
    bound to ``::`` would (IPv6-only and dual-stack clusters); IPv4 comes first, and IPv6
    may turn out to be missing from the host (then IPv4 only, with a warning)."""
    return ("0.0.0.0", "::") if host == "::" else (host,)


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
