"""The UDP servers' counters, read from the servers at scrape time.

A UDP server counts in plain attributes from its own thread and never calls into
prometheus-client (that would cost a lock per datagram); this collector sums them over
every running server when /metrics is read. It knows the servers only by those
attributes, so telemetry does not import the serving side.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from dnsside.telemetry import metrics


class UdpCounts(Protocol):
    """What a UDP server publishes (:class:`dnsside.serving.server.UdpServer`)."""

    @property
    def receive_calls(self) -> int:
        """System calls that returned datagrams."""

    @property
    def received(self) -> int:
        """Datagrams they returned."""

    @property
    def io(self) -> str:
        """The system calls it really uses: one of the collector's modes."""


class UdpCollector(Collector):
    """`dnsside_udp_receive_calls_total` and `dnsside_udp_received_datagrams_total`,
    summed over the running UDP servers (one per address family with `--listen :PORT`):
    their ratio is the mean batch, which says how far behind the arrivals the UDP
    threads run (1 at a trickle or one by one, up to mmsg.BATCH when saturated); and
    `dnsside_udp_io`, the servers by ``modes``, each mode exported even at 0."""

    def __init__(self, modes: Sequence[str]) -> None:
        self.modes = tuple(modes)
        self.servers: set[UdpCounts] = set()
        self.lock = threading.Lock()
        self.registered = False

    def add(self, server: UdpCounts) -> None:
        """Count ``server`` from now on; the first one registers the collector."""
        with self.lock:
            self.servers.add(server)
            first, self.registered = not self.registered, True
        if first:  # outside the lock: register() calls collect() to learn the names
            metrics.REGISTRY.register(self)

    def discard(self, server: UdpCounts) -> None:
        with self.lock:
            self.servers.discard(server)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        with self.lock:
            servers = list(self.servers)
        calls = CounterMetricFamily(
            "dnsside_udp_receive_calls", "System calls (recvmmsg or recvfrom) that returned UDP "
            "datagrams.")
        calls.add_metric([], sum(s.receive_calls for s in servers))
        yield calls
        datagrams = CounterMetricFamily(
            "dnsside_udp_received_datagrams", "UDP datagrams received.")
        datagrams.add_metric([], sum(s.received for s in servers))
        yield datagrams
        # The I/O each server really uses: --udp-io batch falls back to plain (with one
        # warning in the log) where recvmmsg/sendmmsg cannot be used.
        modes = GaugeMetricFamily(
            "dnsside_udp_io", "Running UDP servers by the system calls they use: batch "
            "(recvmmsg/sendmmsg) or plain (recvfrom/sendto).", labels=["mode"])
        for mode in self.modes:
            modes.add_metric([mode], sum(1 for s in servers if s.io == mode))
        yield modes
