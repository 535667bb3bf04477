"""Zone transfers over TCP: who may have one, the count and the log line.

The TCP connection hands every message here (:meth:`Transfers.answer`) and gets one
type back, a :class:`Transfer`, whatever the message asked. This module makes one call
into the protocol side, :class:`dnsside.dns.transfer.ZoneTransfers`, which reads the
request once, answers what is not a transfer of one of our zones through the responder
(NOTAUTH for an AXFR of a name below an apex, as BIND), verifies the TSIG, asks
:meth:`Transfers._admit` (the policy: this module's), takes the records and counts the
replies (the responder owns the query counters). This module counts the transfers
(``dnsside_transfers_total``) and writes their log lines.

Who may: nobody by default. ``--allow-transfer`` names networks; ``--tsig-key-file``
asks every transfer for a valid TSIG with its key (alone, it lets any address with the
key in; with ``--allow-transfer``, both must hold).

The records are taken in one synchronous call on the event loop, the only thread that
changes the zones' versions, so a transfer holds one version whatever the index does
next: a reference to the version's own records, not a copy. Its messages are packed one
at a time, as the socket takes them (:mod:`dnsside.serving.server`), so a client that
does not read costs one message.

How many at once: at most ``--transfer-max`` transfers under way in all (BIND's
``transfers-out`` default, 10) and ``--transfer-max-per-client`` per client (an IPv4
address, an IPv6 /64). A transfer beyond either is REFUSED, as BIND does, counted
(``result="busy"``) and logged once a client: a secondary asks again at its SOA retry
or at the next NOTIFY, and another primary may serve it meanwhile; queueing it instead
would let unread transfers hold connections and memory in a line nobody bounds. A
transfer that fits in the socket at once (an IXFR after a NOTIFY, a small zone) is over
before the next event, so the cap binds only transfers that wait for their client.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence

from dnsside.dns import transfer
from dnsside.dns.responder import Responder
from dnsside.dns.tsig import TsigKey
from dnsside.dns.versions import ZoneVersions, serial_newer
from dnsside.dns.wire import IXFR, to_text
from dnsside.netvalues import IPNetwork, allowed_peer
from dnsside.serving.caps import client_of
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.transfer")


class Transfer:
    """What one TCP message gets, whatever it asked (one type for the connection): its
    replies, made as the connection asks for them. ``streamed``: a zone's messages, to be
    sent as the client reads (:mod:`dnsside.serving.server`); else one reply or none.
    A transfer holds its slot (of ``--transfer-max`` and ``--transfer-max-per-client``)
    until the last message has been taken or it is closed (the client went: the log line
    says it was cut short)."""

    __slots__ = ("_messages", "_release", "streamed")

    def __init__(self, messages: Iterator[bytes], release: Callable[[], None] | None = None,
                 streamed: bool = False) -> None:
        self._messages = messages
        self._release = release
        self.streamed = streamed

    def __iter__(self) -> Transfer:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._messages)
        except StopIteration:
            self._end()
            raise

    def only(self) -> bytes | None:
        """Not streamed: the one reply (None: none), the slot given back at once."""
        reply = next(self._messages, None)
        self._end()
        return reply

    def close(self) -> None:
        if isinstance(self._messages, Generator):
            self._messages.close()
        self._end()

    def _end(self) -> None:
        if self._release is not None:
            release, self._release = self._release, None
            release()


_LOGGED_PEERS = 256  # refusals named in the log, one line a client and reason; then counted


class Transfers:
    """AXFR and IXFR of the zones in ``versions`` for the clients in ``allow``
    (``--allow-transfer``; empty and no key: nobody)."""

    def __init__(self, responder: Responder, allow: Sequence[IPNetwork] = (),
                 versions: Mapping[bytes, ZoneVersions] | None = None,
                 tsig: TsigKey | None = None, max_total: int = 10,
                 max_per_client: int = 2) -> None:
        self.responder = responder
        self.allow = tuple(allow)
        self.versions: Mapping[bytes, ZoneVersions] = versions or {}
        self.tsig = tsig
        self.max_total, self.max_per_client = max_total, max_per_client
        self.under_way: Counter[str] = Counter()  # transfers being sent, by client
        self.protocol = transfer.ZoneTransfers(responder, self.versions, tsig)
        self._refused_logged: set[tuple[str, str]] = set()  # (client, why) already logged

    @property
    def enabled(self) -> bool:
        return bool(self.allow) or self.tsig is not None

    def answer(self, message: bytes, peer: str, client: str | None = None) -> Transfer:
        """The replies to one TCP message from ``peer`` (counted as ``client`` against the
        caps: by default its address, or its /64), whatever it asks: one call into the
        protocol side (:class:`dnsside.dns.transfer.ZoneTransfers`), which asks
        :meth:`_admit` when it is a transfer of one of our zones.

        A transfer's records are taken now, one version whole; its messages are made and
        signed as the connection asks for them, so that a large zone does not hold the
        event loop while it is packed (see :mod:`serving.server`)."""
        client = client_of(peer) if client is None else client
        taken = False

        def admit(req: transfer.TransferRequest) -> transfer.Refusal | None:
            nonlocal taken
            refusal = self._admit(req, peer, client)
            if refusal is None:
                taken = True
                self.under_way[client] += 1
            return refusal

        started = time.perf_counter()
        outcome = self.protocol.answer(message, admit)
        req = outcome.request
        if req is None:  # not a transfer: the responder's reply
            return Transfer(outcome.replies)
        metrics.TRANSFERS.labels(type=req.kind, result=outcome.result).inc()
        release = (lambda: self._done(client)) if taken else None
        if not outcome.sends_zone:
            self._told(req, peer, outcome)
            return Transfer(outcome.replies, release)
        serial = outcome.serial or 0
        what = self._what(req, serial, outcome.result, outcome.records, peer)
        since = f" from {req.client_serial}" if req.client_serial is not None else ""
        head = (f"transfer: {req.kind.upper()}{since} of {req.zone.origin} to {peer}: serial "
                f"{serial}, {what}, {outcome.records} records")
        return Transfer(_sent(head, started, outcome.replies, lambda: self._cut_logged(client)),
                        release, streamed=True)

    def _admit(self, req: transfer.TransferRequest, peer: str, client: str
               ) -> transfer.Refusal | None:
        """Who may have a transfer: the networks, the key, the caps (None: this one may)."""
        if not self.enabled:
            return transfer.Refusal("refused", "no --allow-transfer or --tsig-key-file")
        if self.allow and not allowed_peer(peer, self.allow):
            return transfer.Refusal("refused", "not in --allow-transfer")
        if self.tsig is not None and not req.signed:
            return transfer.Refusal("badtsig", "no TSIG, and --tsig-key-file asks every "
                                    "transfer for one")
        if self.under_way[client] >= self.max_per_client:
            return transfer.Refusal("busy", f"it has {self.under_way[client]} transfers under "
                                    "way (--transfer-max-per-client)")
        if self.under_way.total() >= self.max_total:
            return transfer.Refusal("busy", f"{self.max_total} transfers are under way "
                                    "(--transfer-max)")
        return None

    def _told(self, req: transfer.TransferRequest, peer: str, outcome: transfer.Outcome) -> None:
        """The log of a transfer that is not sent: once a client and reason, but a failure
        on our side (SERVFAIL) every time."""
        what = f"{req.kind.upper()} of {req.zone.origin}"
        if outcome.verdict is not None:
            verdict = outcome.verdict
            self._log_once((peer, verdict.status), "transfer: %s refused to %s: its TSIG is %s "
                           "(key %s; --tsig-key-file has %s; counted in dnsside_transfers_total"
                           "{result=\"badtsig\"}; logged once a client and reason)", what, peer,
                           _TSIG_ERRORS.get(verdict.status, verdict.status),
                           to_text(verdict.key_name) if verdict.key_name else "?",
                           self.tsig.name if self.tsig is not None else "none")
        elif outcome.result == "error":
            if self.responder.ready:  # before the first sync every query gets SERVFAIL
                log.error("transfer: %s to %s: SERVFAIL, %s", what, peer, outcome.why)
        elif outcome.result == "formerr":
            self._log_once((peer, "formerr"), "transfer: %s from %s: FORMERR, %s (logged once "
                           "a client)", what, peer, outcome.why)
        else:
            self._log_once((peer, outcome.why), "transfer: %s refused to %s, %s (counted in "
                           "dnsside_transfers_total; logged once a client and reason)", what,
                           peer, outcome.why)

    def _cut_logged(self, client: str) -> bool:
        """Whether a transfer to ``client`` cut short is logged: the first one a client (a
        client that asks and hangs up at once would write a line a connection)."""
        if (client, "cut") in self._refused_logged or len(self._refused_logged) >= _LOGGED_PEERS:
            return False
        self._refused_logged.add((client, "cut"))
        return True

    def _done(self, client: str) -> None:
        self.under_way[client] -= 1
        if self.under_way[client] <= 0:
            del self.under_way[client]

    def _what(self, req: transfer.TransferRequest, serial: int, result: str, records: int, peer: str
              ) -> str:
        """What a transfer sends, in its log line; a client whose serial is ahead of ours
        (it will not take our zone until ours passes it) is warned about once."""
        if result == "full":
            return "whole zone, the history does not reach its serial"
        if req.qtype != IXFR:
            return "zone"
        if records > 1:
            return "differences"
        since = req.client_serial or 0
        if not serial_newer(since, serial):
            return "the SOA alone, the client is current"
        self._log_once((peer, "ahead"), "transfer: %s holds %s at serial %d, ahead of ours "
                       "(%d): it keeps its version until ours passes it (a clock set back, "
                       "or another primary numbering versions)", peer, req.zone.origin, since,
                       serial)
        return "the SOA alone, the client's serial is AHEAD of ours"

    def _log_once(self, key: tuple[str, str], text: str, *args: object) -> None:
        if key not in self._refused_logged and len(self._refused_logged) < _LOGGED_PEERS:
            self._refused_logged.add(key)
            log.warning(text, *args)


_TSIG_ERRORS = {"badkey": "signed with a key we do not have (BADKEY)",
                "badsig": "signed with another secret (BADSIG)",
                "badtime": "signed too far from our clock (BADTIME; is NTP running?)",
                "badtrunc": "a truncated MAC (BADTRUNC)",
                "formerr": "malformed (FORMERR)"}


def _sent(head: str, started: float, replies: Iterator[bytes], cut_logged: Callable[[], bool]
          ) -> Generator[bytes, None, None]:
    """``replies`` as they are sent, counted; one line when the last has gone, or when the
    client went first (the first time a client does: ``cut_logged``, then at debug level)."""
    size = count = 0
    done = False
    try:
        for reply in replies:
            size += len(reply)
            count += 1
            metrics.TRANSFER_BYTES.inc(len(reply))
            yield reply
        done = True
    finally:
        took = time.perf_counter() - started
        if done:
            log.info("%s, %d bytes in %d messages, %.3f s", head, size, count, took)
        else:
            log.log(logging.WARNING if cut_logged() else logging.DEBUG,
                    "%s: cut short after %d bytes in %d messages, %.3f s (the client closed "
                    "the connection, or it was closed for a new one; told once a client)",
                    head, size, count, took)
