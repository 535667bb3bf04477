"""NOTIFY to the secondaries (``--notify HOST:PORT``): after each new version of the
zones, one NOTIFY per zone to each secondary, over UDP, sent again until it is answered,
at most :data:`TRIES` times.

A newer version replaces the NOTIFYs of an older one still being retried: a secondary
only needs to hear of the latest (it transfers from its version to the current one
whatever it was told). The waits between tries double from one second to a minute:
1, 2, 4, 8, 16, 32, 60, 60, 60 s, ten tries in about four minutes (RFC 1996 §3.6 asks
for a retry limit). Then dnsside stops until the next version: a secondary that does not
answer (down, or one that takes NOTIFY only from another address, as CoreDNS's) costs
ten datagrams a version, not one a minute forever, and still polls the SOA at its
refresh. Each unanswered try is counted.

What is told is a secondary's state, not a zone's: it "does not answer" when the
latest NOTIFY of any zone went unanswered, and "answers again" only once every zone's
has been answered, so two zones' tries a few milliseconds apart never make it flip-flop
in the log. Each change of state is one line, saying why (it does not answer, or its
name cannot be resolved: then the fix is the name in --notify, not the secondary), and
giving up is one line until it answers again; ``dnsside_notify_given_up{target}`` and
``explain`` show the secondaries given up on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dnsside.dns.notify import notify_answer, notify_message
from dnsside.dns.tsig import TsigKey, sign_query, verify_response
from dnsside.dns.wire import NOERROR, to_text
from dnsside.dns.zone import Zone
from dnsside.netvalues import parse_hostport
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.transfer")

FIRST_WAIT = 1.0  # seconds before the first NOTIFY is sent again
LONGEST_WAIT = 60.0
TRIES = 10  # NOTIFYs of one version and zone to one secondary, at most

# Sign a NOTIFY (returns what to send and a check of the answer), for --tsig-key-file.
Signer = Callable[[bytes], tuple[bytes, Callable[[bytes], bool]]]


def notify_signer(key: TsigKey | None) -> Signer | None:
    """With ``--tsig-key-file``, each NOTIFY is signed and only an answer signed with the
    same key counts as one (RFC 8945 §5.3)."""
    if key is None:
        return None
    signing_key = key

    def sign(message: bytes) -> tuple[bytes, Callable[[bytes], bool]]:
        signed, mac = sign_query(message, signing_key, int(time.time()))
        return signed, lambda reply: verify_response(reply, signing_key, mac, int(time.time()))

    return sign


@dataclass(frozen=True)
class Unanswered:
    """Why a NOTIFY got no answer: ``kind`` tells the log when the reason changes (so a
    host that cannot be resolved is said once, not once per try), ``text`` says it."""

    kind: str
    text: str


NO_ANSWER = Unanswered("timeout", "does not answer")


def unreached(host: str, exc: BaseException) -> Unanswered:
    """The NOTIFY could not even be sent: a name that does not resolve is not a secondary
    that "does not answer" (the fix is the name, not the secondary)."""
    if isinstance(exc, socket.gaierror | UnicodeError):
        return Unanswered("unresolved", f"cannot be resolved ({host}: {exc.args[-1]}): check "
                          "the name in --notify")
    return Unanswered("unreached", f"cannot be reached ({exc})")


class _Answers(asyncio.DatagramProtocol):
    """The datagrams one NOTIFY's socket receives."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.queue.put_nowait(data)


class _Told:
    """One secondary's state, as the log tells it (see the module's docstring)."""

    def __init__(self) -> None:
        self.unanswered: set[bytes] = set()  # zones whose latest NOTIFY went unanswered
        self.given_up: dict[bytes, int] = {}  # zones given up on, and the serial
        self.failing: str | None = None  # the failure told (Unanswered.kind), None: answers
        self.why = ""  # its text
        self.stopped_told = False  # giving up was told since it last answered


class Notifier:
    """NOTIFYs to ``targets`` (``HOST:PORT`` each) for ``zones``."""

    def __init__(self, targets: Sequence[str], zones: Sequence[Zone],
                 sign: Signer | None = None, fixed_zones: Sequence[Zone] = ()) -> None:
        self.targets = [(t, parse_hostport(t, "--notify")) for t in targets]
        self.zones = list(zones)
        # The catalog (--catalog-zone): its serial is fixed for the life of the process, so
        # it is told once, with the first version of the zones it lists (then they can be
        # transferred), at its own serial.
        self.untold = list(fixed_zones)
        self.sign = sign
        self._tasks: dict[tuple[str, bytes], asyncio.Task[None]] = {}
        self._told: dict[str, _Told] = {t: _Told() for t, _a in self.targets}
        self.answered: dict[str, int] = {}  # target: the last serial it acknowledged
        for target, _address in self.targets:
            metrics.NOTIFY_GIVEN_UP.labels(target=target).set(0)

    @property
    def failing(self) -> dict[str, str]:
        """The targets whose latest NOTIFY of some zone went unanswered, and why."""
        return {t: told.why for t, told in self._told.items() if told.failing is not None}

    def states(self) -> dict[str, str]:
        """Each target's state in words, for ``explain``."""
        out = {}
        for target, told in self._told.items():
            if told.given_up:
                zones = ", ".join(f"{to_text(z)} serial {s}" for z, s in
                                  sorted(told.given_up.items()))
                out[target] = (f"{told.why}: stopped after {TRIES} NOTIFYs of {zones}, until "
                               "the next version (it still polls the SOA at its refresh)")
            elif told.failing is not None:
                out[target] = f"{told.why}: NOTIFY sent again, at most {TRIES} times"
            elif target in self.answered:
                out[target] = f"answers (acknowledged serial {self.answered[target]})"
            else:
                out[target] = "not told of a version yet"
        return out

    def notify(self, serial: int) -> None:
        """Tell every target of version ``serial`` (replacing older NOTIFYs in flight), and
        the first time, of the catalog at its own serial."""
        told = [(zone, serial) for zone in self.zones] + [(z, z.serial) for z in self.untold]
        self.untold = []
        for target, address in self.targets:
            for zone, zone_serial in told:
                key = (target, zone.wire)
                old = self._tasks.get(key)
                if old is not None:
                    old.cancel()
                self._tasks[key] = asyncio.get_running_loop().create_task(
                    self._notify(target, address, zone, zone_serial),
                    name=f"notify {target} {zone.origin}")

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _notify(self, target: str, address: tuple[str, int], zone: Zone,
                      serial: int) -> None:
        wait = FIRST_WAIT
        for _ in range(TRIES):
            outcome = await self._try(address, zone, serial, wait)
            if isinstance(outcome, int):
                break
            metrics.NOTIFIES.labels(result="timeout").inc()
            self._unanswered(target, zone, serial, outcome)
            wait = min(wait * 2, LONGEST_WAIT)
        else:
            self._given_up(target, zone, serial)
            return
        self._answered(target, zone)
        rcode = outcome
        if rcode == NOERROR:
            metrics.NOTIFIES.labels(result="ok").inc()
            self.answered[target] = serial
            log.debug("notify: %s acknowledged %s serial %d", target, zone.origin, serial)
        else:
            metrics.NOTIFIES.labels(result="error").inc()
            log.warning("notify: %s answered the NOTIFY of %s serial %d with rcode %d: is "
                        "dnsside among its primaries (allow-notify), with the same key?",
                        target, zone.origin, serial, rcode)

    def _unanswered(self, target: str, zone: Zone, serial: int, why: Unanswered) -> None:
        told = self._told[target]
        told.unanswered.add(zone.wire)
        if told.failing != why.kind:
            told.failing, told.why = why.kind, why.text
            log.warning("notify: %s %s; the NOTIFY of %s serial %d is sent again, waits "
                        "doubling to %gs, at most %d tries a version "
                        "(dnsside_notifies_total{result=\"timeout\"})", target, why.text,
                        zone.origin, serial, LONGEST_WAIT, TRIES)

    def _given_up(self, target: str, zone: Zone, serial: int) -> None:
        told = self._told[target]
        told.given_up[zone.wire] = serial
        metrics.NOTIFIES.labels(result="given_up").inc()
        metrics.NOTIFY_GIVEN_UP.labels(target=target).set(1)
        if not told.stopped_told:
            told.stopped_told = True
            log.warning("notify: %s %s: stopped after %d NOTIFYs of %s serial %d; none is "
                        "sent to it until the next version (it still polls the SOA at its "
                        "refresh; dnsside_notify_given_up{target=\"%s\"} is 1 until it "
                        "answers; told once)", target, told.why, TRIES, zone.origin, serial,
                        target)

    def _answered(self, target: str, zone: Zone) -> None:
        told = self._told[target]
        told.unanswered.discard(zone.wire)
        told.given_up.pop(zone.wire, None)
        if not told.given_up:
            metrics.NOTIFY_GIVEN_UP.labels(target=target).set(0)
        if told.failing is not None and not told.unanswered:
            told.failing, told.why, told.stopped_told = None, "", False
            log.info("notify: %s answers again", target)

    async def _try(self, address: tuple[str, int], zone: Zone, serial: int, wait: float
                   ) -> int | Unanswered:
        """One NOTIFY; its answer's RCODE, or why none came within ``wait``."""
        message = notify_message(zone, serial, secrets.randbelow(0x10000))
        check: Callable[[bytes], bool] = lambda reply: True  # noqa: E731
        sent = message
        if self.sign is not None:
            sent, check = self.sign(message)
        loop = asyncio.get_running_loop()
        try:
            transport, answers = await loop.create_datagram_endpoint(
                _Answers, remote_addr=address)
        except (OSError, UnicodeError) as exc:  # (an over-long label fails in the idna codec)
            await asyncio.sleep(wait)
            return unreached(address[0], exc)
        try:
            transport.sendto(sent)
            async with asyncio.timeout(wait):
                while True:
                    reply = await answers.queue.get()
                    rcode = notify_answer(reply, message)
                    if rcode is not None and check(reply):
                        return rcode
        except TimeoutError:
            return NO_ANSWER
        finally:
            transport.close()
