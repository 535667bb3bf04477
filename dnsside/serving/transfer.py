"""Zone transfers over TCP: who may have one, which records, the count and the log line.

The TCP connection handler passes every message that looks like AXFR or IXFR here
(:func:`dnsside.dns.transfer.looks_like_transfer`), before the responder; what is not
a transfer of one of our zones goes on to the responder, whose rules answer it like
any other query (REFUSED for an AXFR of a name below an apex).

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
from dnsside.dns.tsig import ReplySigner, TsigKey, Verdict, error_reply, overhead, verify_request
from dnsside.dns.versions import ZoneVersions, serial_newer
from dnsside.dns.wire import IXFR, NOERROR, SERVFAIL, TCP_LIMIT, to_text
from dnsside.netvalues import IPNetwork, allowed_peer
from dnsside.serving.caps import client_of
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.transfer")


class Transfer:
    """A transfer's messages, made as the connection asks for them. It holds its slot
    (of ``--transfer-max`` and ``--transfer-max-per-client``) until the last message has
    been taken or it is closed (the client went: the log line says it was cut short)."""

    def __init__(self, messages: Generator[bytes, None, None], release: Callable[[], None]
                 ) -> None:
        self._messages = messages
        self._release: Callable[[], None] | None = release

    def __iter__(self) -> Transfer:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._messages)
        except StopIteration:
            self._end()
            raise

    def close(self) -> None:
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
        self._refused_logged: set[tuple[str, str]] = set()  # (client, why) already logged

    @property
    def enabled(self) -> bool:
        return bool(self.allow) or self.tsig is not None

    def answer(self, message: bytes, peer: str, client: str | None = None
               ) -> Transfer | list[bytes] | None:
        """The replies to ``message`` from ``peer`` (counted as ``client`` against the
        caps: by default its address, or its /64) when it asks for a transfer of one of
        our zones (one REFUSED, NOTAUTH or SERVFAIL reply when it gets none), else None.

        A transfer's records are taken now, one version whole; its messages are an
        iterator, packed and signed as the connection asks for them, so that a large zone
        does not hold the event loop while it is packed (see :mod:`serving.server`)."""
        req = transfer.request(message, self.responder.zone_by_wire)
        if req is None:
            return None
        if not self.enabled:
            return self._refused(req, message, peer, "no --allow-transfer or --tsig-key-file")
        if self.allow and not allowed_peer(peer, self.allow):
            return self._refused(req, message, peer, "not in --allow-transfer")
        sign: Callable[[bytes], bytes] = _unsigned
        if self.tsig is not None:
            verdict = verify_request(message, self.tsig, int(time.time()))
            if verdict.status == "unsigned":
                return self._refused(req, message, peer, "no TSIG, and --tsig-key-file asks "
                                     "every transfer for one", "badtsig")
            if verdict.status != "ok":
                return self._bad_tsig(req, message, peer, verdict)
            req = transfer.request(verdict.message, self.responder.zone_by_wire) or req
            sign = ReplySigner(self.tsig, verdict.mac, verdict.now).sign
        if not self.responder.ready:  # SERVFAIL with the EDE, as every query of the zone
            metrics.TRANSFERS.labels(type=req.kind, result="error").inc()
            reply = self.responder.respond(message, udp=False)
            return [reply] if reply is not None else []
        versions = self.versions.get(req.zone.wire)
        if versions is None or versions.serial is None:
            return self._failed(req, peer, "no version of the zone yet (one is cut within a "
                                "second of the first sync)", sign)
        if versions.broken is not None:
            return self._failed(req, peer, "a record cannot be transferred faithfully: "
                                + versions.broken, sign)
        client = client_of(peer) if client is None else client
        if self.under_way[client] >= self.max_per_client:
            return self._refused(req, message, peer, f"it has {self.under_way[client]} "
                                 "transfers under way (--transfer-max-per-client)", "busy")
        if self.under_way.total() >= self.max_total:
            return self._refused(req, message, peer, f"{self.max_total} transfers are under "
                                 "way (--transfer-max)", "busy")
        started = time.perf_counter()
        result = "ok"
        records = transfer.ixfr_records(req, versions) if req.qtype == IXFR else None
        if records is None:
            records = transfer.axfr_records(req, versions)
            if req.qtype == IXFR:
                result = "full"
        metrics.TRANSFERS.labels(type=req.kind, result=result).inc()
        self.responder.tcp_counts[(req.qtype, NOERROR)] += 1
        what = self._what(req, versions.serial, result, len(records), peer)
        since = f" from {req.client_serial}" if req.client_serial is not None else ""
        head = (f"transfer: {req.kind.upper()}{since} of {req.zone.origin} to {peer}: serial "
                f"{versions.serial}, {what}, {len(records)} records")
        limit = TCP_LIMIT - (overhead(self.tsig) if self.tsig is not None else 0)
        self.under_way[client] += 1
        return Transfer(_sent(head, started, (sign(m) for m in transfer.iter_messages(
            req, records, limit)), lambda: self._cut_logged(client)),
            lambda: self._done(client))

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

    def _what(self, req: transfer.Request, serial: int, result: str, records: int, peer: str
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

    def _refused(self, req: transfer.Request, message: bytes, peer: str, why: str,
                 result: str = "refused") -> list[bytes]:
        metrics.TRANSFERS.labels(type=req.kind, result=result).inc()
        self._log_once((peer, why), "transfer: %s of %s refused to %s, %s (counted in "
                       "dnsside_transfers_total; logged once a client and reason)",
                       req.kind.upper(), req.zone.origin, peer, why)
        # The responder's REFUSED, as any client gets it (with OPT, signed for a signed query).
        reply = self.responder.respond(message, udp=False)
        return [reply] if reply is not None else []

    def _bad_tsig(self, req: transfer.Request, message: bytes, peer: str, verdict: Verdict
                  ) -> list[bytes]:
        """A TSIG that does not verify: the error RFC 8945 §5.2 says (NOTAUTH with BADKEY,
        BADSIG, BADTIME or BADTRUNC; FORMERR for a malformed one), counted and logged."""
        metrics.TRANSFERS.labels(type=req.kind, result="badtsig").inc()
        self._log_once((peer, verdict.status), "transfer: %s of %s refused to %s: its TSIG "
                       "is %s (key %s; --tsig-key-file has %s; counted in dnsside_transfers_total "
                       "{result=\"badtsig\"}; logged once a client and reason)", req.kind.upper(),
                       req.zone.origin, peer, _TSIG_ERRORS.get(verdict.status, verdict.status),
                       to_text(verdict.key_name) if verdict.key_name else "?",
                       self.tsig.name if self.tsig is not None else "none")
        return [error_reply(message, verdict)]

    def _log_once(self, key: tuple[str, str], text: str, *args: object) -> None:
        if key not in self._refused_logged and len(self._refused_logged) < _LOGGED_PEERS:
            self._refused_logged.add(key)
            log.warning(text, *args)

    def _failed(self, req: transfer.Request, peer: str, why: str,
                sign: Callable[[bytes], bytes] | None = None) -> list[bytes]:
        metrics.TRANSFERS.labels(type=req.kind, result="error").inc()
        self.responder.tcp_counts[(req.qtype, SERVFAIL)] += 1
        log.error("transfer: %s of %s to %s: SERVFAIL, %s", req.kind.upper(), req.zone.origin,
                  peer, why)
        return [(sign or _unsigned)(transfer.failed(req))]


_TSIG_ERRORS = {"badkey": "signed with a key we do not have (BADKEY)",
                "badsig": "signed with another secret (BADSIG)",
                "badtime": "signed too far from our clock (BADTIME; is NTP running?)",
                "badtrunc": "a truncated MAC (BADTRUNC)",
                "formerr": "malformed (FORMERR)"}


def _unsigned(reply: bytes) -> bytes:
    return reply


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
