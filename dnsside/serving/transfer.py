"""Zone transfers over TCP: who may have one, the snapshot, the count and the log line.

The TCP connection handler passes every message that looks like AXFR or IXFR here
(:func:`dnsside.dns.transfer.looks_like_transfer`), before the responder; what is not
a transfer of one of our zones goes on to the responder, whose rules answer it like
any other query (REFUSED for an AXFR of a name below an apex).

The snapshot and the messages are built in one synchronous call on the event loop,
the only thread that changes the responder's tables, so a transfer holds one version
of the zone whatever the index does next; the messages then leave through the
transport's buffer (a transfer of the zone costs its size in memory while it drains).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from dnsside.config import IPNetwork, allowed_peer
from dnsside.dns import transfer
from dnsside.dns.responder import Responder
from dnsside.dns.wire import NOERROR, SERVFAIL
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.transfer")

_LOGGED_PEERS = 256  # refused peers named in the log, one line each; then only counted


class Transfers:
    """AXFR and IXFR for the clients in ``allow`` (``--allow-transfer``; empty: nobody)."""

    def __init__(self, responder: Responder, allow: Sequence[IPNetwork] = ()) -> None:
        self.responder = responder
        self.allow = tuple(allow)
        self._refused_logged: set[str] = set()

    def answer(self, message: bytes, peer: str) -> list[bytes] | None:
        """The replies to ``message`` from ``peer`` when it asks for a transfer of one of
        our zones (one REFUSED or SERVFAIL reply when it gets none), else None."""
        req = transfer.request(message, self.responder.zone_by_wire)
        if req is None:
            return None
        responder = self.responder
        if not allowed_peer(peer, self.allow):
            metrics.TRANSFERS.labels(type=req.kind, result="refused").inc()
            if peer not in self._refused_logged and len(self._refused_logged) < _LOGGED_PEERS:
                self._refused_logged.add(peer)
                log.warning("transfer: %s of %s refused to %s, not in --allow-transfer "
                            "(counted in dnsside_transfers_total; logged once a client)",
                            req.kind.upper(), req.zone.origin, peer)
            reply = responder.respond(message, udp=False)  # REFUSED, as for any client
            return [reply] if reply is not None else []
        if not responder.ready:
            metrics.TRANSFERS.labels(type=req.kind, result="error").inc()
            log.warning("transfer: %s of %s to %s: SERVFAIL, the first sync is not done",
                        req.kind.upper(), req.zone.origin, peer)
            reply = responder.respond(message, udp=False)  # SERVFAIL, not ready
            return [reply] if reply is not None else []
        started = time.perf_counter()
        try:
            snap = transfer.snapshot(req.zone, responder.answers, responder.zone_by_wire)
        except transfer.Untransferable as exc:
            metrics.TRANSFERS.labels(type=req.kind, result="error").inc()
            responder.tcp_counts[(req.qtype, SERVFAIL)] += 1
            log.error("transfer: %s of %s to %s: SERVFAIL, a record cannot be transferred "
                      "faithfully: %s", req.kind.upper(), req.zone.origin, peer, exc)
            return [transfer.failed(req)]
        replies = transfer.messages(req, snap)
        size = sum(len(m) for m in replies)
        metrics.TRANSFERS.labels(type=req.kind, result="ok").inc()
        metrics.TRANSFER_BYTES.inc(size)
        responder.tcp_counts[(req.qtype, NOERROR)] += 1
        log.info("transfer: %s of %s to %s: serial %d, %d records, %d bytes in %d messages, "
                 "%.3f s", req.kind.upper(), req.zone.origin, peer, snap.serial,
                 len(snap.records) + 2, size, len(replies), time.perf_counter() - started)
        return replies

