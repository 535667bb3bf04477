"""Connection caps: what one client is, and which connection goes when the slots are full.

A global cap alone lets one client take every slot (issue 33: 520 idle connections
from one address left another 2 TCP answers of 193 in 10 s). So each client has its own
cap below the global one, and a full cap never refuses the newcomer: it closes the idle
connection that has been quiet longest, of the newcomer's own client when that client is
at its cap, else of the client holding the most. A client that opens more than its share
only ever closes its own connections; a busy client's fresh connection is never the one
that goes, as long as somebody holds a quieter one. A client that had its whole share
closed for newcomers within a second re-opens them as fast as they are closed: for the
rest of that second its newcomers are closed instead, unread (reading and answering
each is what a flood of them costs everyone else). A connection sending a zone transfer
is not idle (closing it for a newcomer would have the next transfer packed again, each
time): it goes at its idle timeout if its client stops reading.

The subtle point is what "a client" is. An IPv4 address is one. An IPv6 host is
usually given a whole /64 (SLAAC, privacy addresses, Kubernetes' per-node pod ranges
are wider still), so counting addresses would give one IPv6 host 2^64 shares: a
client is its /64. An IPv4-mapped IPv6 peer (a dual-stack listener) is its IPv4.

The caps only hold if the process can open what they allow: container runtimes often
start it with a soft limit of 1,024 descriptors and a far higher hard one, so
:func:`raise_open_files` lifts the soft limit to the hard one at start, and says so.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from dnsside.netvalues import peer_ip
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.server")

IPV6_CLIENT_PREFIX = 64  # one IPv6 host's usual share, counted as one client
_LOGGED_CLIENTS = 256  # clients named in the log at their cap, once each; then counted


@functools.lru_cache(maxsize=4096)  # a client re-opening connections is parsed once
def client_of(host: str) -> str:
    """The client ``host`` counts as: the address for IPv4 (and IPv4-mapped IPv6), the
    /64 for IPv6; an unparsable host (a Unix socket's) is its own client."""
    ip = peer_ip(host)
    if ip is None:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, IPV6_CLIENT_PREFIX), strict=False))
    return str(ip)


# Descriptors beyond the caps' connections: listeners, UDP, API watches, linked clusters,
# NOTIFY, the log; a generous allowance.
SPARE_FILES = 128


def raise_open_files(connections: int) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one, log the figure, and warn when it is
    still below ``connections`` (the caps' sum) plus :data:`SPARE_FILES`. Returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            log.info("open files: the soft limit raised from %d to %s (the hard limit)", soft,
                     "unlimited" if hard == resource.RLIM_INFINITY else hard)
            soft = hard
        except (ValueError, OSError) as exc:  # a hard limit above the kernel's nr_open
            log.warning("open files: the soft limit stays %d, raising it to the hard limit "
                        "%d failed: %s", soft, hard, exc)
    else:
        log.info("open files: %s (soft and hard limit)",
                 "unlimited" if soft == resource.RLIM_INFINITY else soft)
    needed = connections + SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning("open files: the limit %d is below what the connection caps allow (%d, "
                    "with %d spare): lower --tcp-max-connections or --http-max-connections, "
                    "or raise the container's limit", soft, needed, SPARE_FILES)
    return soft


class Closable(Protocol):
    @property
    def busy(self) -> bool:
        """Not idle: sending what it was asked for (a zone transfer), never closed for a
        newcomer (an unread one loses its slot at its idle timeout)."""
        ...

    def abort(self) -> None: ...


def _idlest(held: OrderedDict[Closable, None]) -> Closable | None:
    """The quietest connection of ``held`` that is not busy (busy ones are few: at most
    --transfer-max-per-client), or None."""
    return next((c for c in held if not c.busy), None)


class ConnectionCaps:
    """The open connections of one listener, by client, each client's in the order of
    their last activity (the quietest first).

    ``what`` names the listener in the log and in ``dnsside_dropped_connections_total``'s
    reasons (``<what>_client_cap``, ``<what>_connection_cap``); ``total_flag`` and
    ``client_flag`` are the flags an operator raises."""

    def __init__(self, what: str, total: int, per_client: int, total_flag: str,
                 client_flag: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.total = max(1, total)
        self.per_client = max(1, min(per_client, self.total))
        self.total_flag, self.client_flag = total_flag, client_flag
        self.clients: dict[str, OrderedDict[Closable, None]] = {}
        self.client_by_conn: dict[Closable, str] = {}
        self._client_closed = metrics.DROPPED.labels(reason=f"{what}_client_cap")
        self._total_closed = metrics.DROPPED.labels(reason=f"{what}_connection_cap")
        # read at scrape time: nothing per connection
        metrics.OPEN_CONNECTIONS.labels(listener=what).set_function(
            lambda: len(self.client_by_conn))
        self._logged: set[str] = set()
        self._full_told = False  # the global cap's notice, again once it is half free
        # Per client at its cap: (start of the second, connections closed for it since).
        self._churn: dict[str, tuple[float, int]] = {}
        self._clock = clock

    def __len__(self) -> int:
        return len(self.client_by_conn)

    def admit(self, conn: Closable, host: str) -> str:
        """Count ``conn`` of the client at ``host``, first closing a quiet connection when
        its client or the listener is full. Returns the client."""
        client = client_of(host)
        held = self.clients.get(client)
        if held is not None and len(held) >= self.per_client:
            self._client_closed.inc()
            self._tell_client(client)
            victim = _idlest(held)
            if victim is None or self._churning(client):
                # Every one busy (the newcomer waits for one to end), or the client re-opens
                # connections as fast as they are closed: the newcomer goes, unread, which
                # costs the event loop an accept and a close, not a query and its answer.
                conn.abort()
                return client
            self._close(victim)
        elif len(self.client_by_conn) >= self.total:
            self._total_closed.inc()
            self._tell_full()
            victim = _idlest(max(self.clients.values(), key=len))
            if victim is None:
                victim = next((v for v in map(_idlest, self.clients.values())
                               if v is not None), None)
            if victim is None:
                conn.abort()
                return client
            self._close(victim)
        self.clients.setdefault(client, OrderedDict())[conn] = None
        self.client_by_conn[conn] = client
        return client

    def _churning(self, client: str) -> bool:
        """``client`` had its whole share closed for newcomers within the last second."""
        now = self._clock()
        start, closed = self._churn.get(client, (now, 0))
        if now - start >= 1.0:
            start, closed = now, 0
        if closed >= self.per_client:
            return True
        self._churn[client] = (start, closed + 1)
        return False

    def touch(self, conn: Closable) -> None:
        """``conn`` was active (answered a query, took a transfer's slice): last to go."""
        client = self.client_by_conn.get(conn)
        if client is not None:
            self.clients[client].move_to_end(conn)

    def release(self, conn: Closable) -> None:
        """``conn`` is closed (idempotent)."""
        client = self.client_by_conn.pop(conn, None)
        if client is None:
            return
        held = self.clients[client]
        held.pop(conn, None)
        if not held:
            del self.clients[client]
            self._churn.pop(client, None)
        if self._full_told and len(self.client_by_conn) <= self.total // 2:
            self._full_told = False

    def _close(self, conn: Closable) -> None:
        self.release(conn)
        conn.abort()

    def _tell_client(self, client: str) -> None:
        if client in self._logged or len(self._logged) >= _LOGGED_CLIENTS:
            return
        self._logged.add(client)
        log.warning("%s: client %s holds %d connections (%s): its quietest one is closed for "
                    "each new one (counted in dnsside_dropped_connections_total{reason="
                    "\"%s_client_cap\"}; told once a client)", self.what, client,
                    self.per_client, self.client_flag, self.what)

    def _tell_full(self) -> None:
        if self._full_told:
            return
        self._full_told = True
        log.warning("%s: %d connections open (%s), from %d clients: the quietest connection "
                    "of the client holding the most is closed for each new one (counted in "
                    "dnsside_dropped_connections_total{reason=\"%s_connection_cap\"}; told "
                    "again after the count falls to half)", self.what, self.total,
                    self.total_flag, len(self.clients), self.what)
