"""NOTIFY to a secondary (serving/notify.py), against a UDP socket this test answers from:
the message a secondary gets (read by dnspython), a NOTIFY sent again until it is
answered, an error answer counted, and a newer version replacing one still in flight."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import dns.tsig
import pytest

from dnsside.dns.tsig import make_key
from dnsside.dns.zone import Zone, ZoneOptions
from dnsside.serving import notify
from dnsside.serving.notify import Notifier, notify_signer
from dnsside.telemetry import metrics

pytestmark = pytest.mark.quick

ZONES = [Zone("svc-global.", ZoneOptions(ttl=5)), Zone("clusterset.local.", ZoneOptions(ttl=5))]


def count(result: str) -> float:
    return metrics.REGISTRY.get_sample_value("dnsside_notifies_total", {"result": result}) or 0.0


class Secondary(asyncio.DatagramProtocol):
    """Receives NOTIFYs; ``answer`` decides the reply to each (None: stay silent)."""

    def __init__(self, answer: Callable[[dns.message.Message], dns.message.Message | None],
                 parse: Callable[[bytes], dns.message.Message] = dns.message.from_wire
                 ) -> None:
        self.answer = answer
        self.parse = parse
        self.received: list[dns.message.Message] = []
        self.got = asyncio.Event()
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # a datagram transport: it has sendto

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        msg = self.parse(data)
        self.received.append(msg)
        self.got.set()
        reply = self.answer(msg)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply.to_wire(), addr)

    async def wait(self, n: int) -> None:
        async with asyncio.timeout(10):
            while len(self.received) < n:
                self.got.clear()
                await self.got.wait()


@contextlib.asynccontextmanager
async def secondary(answer: Callable[[dns.message.Message], dns.message.Message | None],
                    parse: Callable[[bytes], dns.message.Message] = dns.message.from_wire
                    ) -> AsyncIterator[tuple[Secondary, str]]:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(
        lambda: Secondary(answer, parse), local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    try:
        yield proto, f"127.0.0.1:{port}"
    finally:
        transport.close()


def acknowledge(msg: dns.message.Message) -> dns.message.Message:
    return dns.message.make_response(msg)


async def wait_until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.01)


async def test_a_notify_per_zone_names_the_new_serial_and_is_acknowledged() -> None:
    ok = count("ok")
    async with secondary(acknowledge) as (sec, target):
        notifier = Notifier([target], ZONES)
        notifier.notify(1795720001)
        await sec.wait(2)
        await wait_until(lambda: notifier.answered.get(target) == 1795720001
                         and count("ok") == ok + 2)
        await notifier.close()
    for msg, zone in zip(sorted(sec.received, key=lambda m: m.question[0].name.to_text()),
                         ("clusterset.local.", "svc-global."), strict=True):
        assert msg.opcode() == dns.opcode.NOTIFY and msg.flags & 0x0400  # AA
        assert msg.question[0].name.to_text() == zone
        assert msg.question[0].rdtype == dns.rdatatype.SOA
        assert msg.answer[0][0].serial == 1795720001


async def test_an_unanswered_notify_is_sent_again_and_logged_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(notify, "FIRST_WAIT", 0.05)
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    timeouts = count("timeout")
    silent = 2

    def answer_the_third(msg: dns.message.Message) -> dns.message.Message | None:
        return acknowledge(msg) if len(sec.received) > silent else None

    async with secondary(answer_the_third) as (sec, target):
        notifier = Notifier([target], ZONES[:1])
        notifier.notify(7)
        await wait_until(lambda: notifier.answered.get(target) == 7)
        await notifier.close()
    assert len(sec.received) == 3 and count("timeout") == timeouts + 2
    assert len({m.id for m in sec.received}) == 3  # each try its own ID
    assert caplog.text.count(f"{target} does not answer; the NOTIFY of svc-global. serial 7 "
                             "is sent again") == 1
    assert f"notify: {target} answers again" in caplog.text


async def test_a_name_that_does_not_resolve_is_said_so_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """It used to be reported as "does not answer", which sends the operator to the
    secondary. The resolver is the OS's: this test makes it fail for one name (no network)."""
    monkeypatch.setattr(notify, "FIRST_WAIT", 0.05)
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    resolve = socket.getaddrinfo

    def no_such_host(host: Any, *args: Any, **kw: Any) -> Any:
        if host == "secondary.example.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    timeouts = count("timeout")
    notifier = Notifier(["secondary.example.invalid:53"], ZONES)  # two zones, one target
    notifier.notify(3)
    await wait_until(lambda: count("timeout") >= timeouts + 6)
    await notifier.close()
    assert caplog.text.count("secondary.example.invalid:53 cannot be resolved "
                             "(secondary.example.invalid: Name or service not known): check "
                             "the name in --notify") == 1, caplog.text
    assert "does not answer" not in caplog.text


async def test_a_name_no_resolver_can_encode_is_retried_not_fatal(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A label over 63 bytes fails in the idna codec (UnicodeError, not OSError), before
    any resolver is asked: it used to end the NOTIFY's task with an unread exception."""
    monkeypatch.setattr(notify, "FIRST_WAIT", 0.05)
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    timeouts = count("timeout")
    target = "a" * 64 + ".example:53"
    notifier = Notifier([target], ZONES[:1])
    notifier.notify(4)
    await wait_until(lambda: count("timeout") >= timeouts + 2)
    await notifier.close()
    assert caplog.text.count(f"notify: {target} cannot be resolved") == 1, caplog.text


async def test_an_error_answer_is_counted_and_not_retried(
        caplog: pytest.LogCaptureFixture) -> None:
    errors = count("error")

    def refuse(msg: dns.message.Message) -> dns.message.Message:
        reply = dns.message.make_response(msg)
        reply.set_rcode(dns.rcode.REFUSED)
        return reply

    async with secondary(refuse) as (sec, target):
        notifier = Notifier([target], ZONES[:1])
        notifier.notify(9)
        await wait_until(lambda: count("error") == errors + 1)
        await notifier.close()
    assert len(sec.received) == 1 and target not in notifier.answered
    assert "with rcode 5: is dnsside among its primaries" in caplog.text


async def test_a_newer_version_replaces_the_notify_still_retried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "FIRST_WAIT", 0.05)

    def answer_only_11(msg: dns.message.Message) -> dns.message.Message | None:
        return acknowledge(msg) if msg.answer[0][0].serial == 11 else None

    async with secondary(answer_only_11) as (sec, target):
        notifier = Notifier([target], ZONES[:1])
        notifier.notify(10)
        await sec.wait(2)  # 10, unanswered, sent again
        notifier.notify(11)
        await wait_until(lambda: notifier.answered.get(target) == 11)
        sent = len(sec.received)
        await notifier.close()
    assert all(m.answer[0][0].serial == 11 for m in sec.received[sent - 1:])
    assert {m.answer[0][0].serial for m in sec.received} == {10, 11}


async def test_with_a_key_notifies_are_signed_and_only_a_signed_answer_counts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "FIRST_WAIT", 0.05)
    key = dns.tsig.Key("xfr-key.", "c2VjcmV0IHNlY3JldCBzZWNyZXQgc2VjcmV0IDMyIGJ5dGVz",
                       "hmac-sha256")
    keyring = {key.name: key}
    verified: list[bool] = []

    def answer(msg: dns.message.Message) -> dns.message.Message:
        verified.append(msg.had_tsig)
        reply = dns.message.make_response(msg)  # signed like the query, by dnspython
        if len(verified) == 1:  # the first answer unsigned: not an answer from a keyholder
            reply.tsig = None
        return reply

    def parse(wire: bytes) -> dns.message.Message:
        return dns.message.from_wire(wire, keyring=keyring)

    async with secondary(answer, parse) as (sec, target):
        signer = notify_signer(make_key("xfr-key.", "hmac-sha256", key.secret))
        notifier = Notifier([target], ZONES[:1], signer)
        notifier.notify(12)
        await wait_until(lambda: notifier.answered.get(target) == 12)
        await notifier.close()
    assert verified[:2] == [True, True]  # dnspython checked each NOTIFY's MAC


def gauge(target: str) -> float | None:
    return metrics.REGISTRY.get_sample_value("dnsside_notify_given_up", {"target": target})


async def test_an_unanswered_notify_stops_after_its_tries_and_says_so_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36: a secondary that never answers got a NOTIFY a minute forever. Now: TRIES
    (10) a version, then none until the next version; giving up is one line until it
    answers again, the gauge says it, and so does the state explain shows."""
    monkeypatch.setattr(notify, "FIRST_WAIT", 0.01)
    monkeypatch.setattr(notify, "LONGEST_WAIT", 0.04)
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    given_up = count("given_up")
    answering = False

    def answer(msg: dns.message.Message) -> dns.message.Message | None:
        return acknowledge(msg) if answering else None

    async with secondary(answer) as (sec, target):
        notifier = Notifier([target], ZONES[:1])
        assert gauge(target) == 0
        notifier.notify(20)
        await wait_until(lambda: count("given_up") == given_up + 1)
        assert len(sec.received) == notify.TRIES == 10
        assert gauge(target) == 1
        assert "stopped after 10 NOTIFYs of svc-global. serial 20" in notifier.states()[target]
        notifier.notify(21)  # the next version: tried again, given up again, told no more
        await wait_until(lambda: count("given_up") == given_up + 2)
        assert len(sec.received) == 20
        answering = True
        notifier.notify(22)
        await wait_until(lambda: notifier.answered.get(target) == 22)
        await notifier.close()
    assert gauge(target) == 0 and notifier.states()[target].startswith("answers")
    assert caplog.text.count(f"notify: {target} does not answer; the NOTIFY") == 1
    assert caplog.text.count(f"notify: {target} does not answer: stopped after 10 NOTIFYs of "
                             "svc-global. serial 20; none is sent to it until the next "
                             "version") == 1
    assert "stopped after 10 NOTIFYs of svc-global. serial 21" not in caplog.text
    assert caplog.text.count(f"notify: {target} answers again") == 1


async def test_a_secondary_is_told_of_once_not_once_per_zone(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Two zones: the first try of each goes unanswered, then the secondary answers every
    NOTIFY of one zone and none of the other. It used to log "does not answer" and "answers
    again" milliseconds apart, as each zone's task told its own outcome; the secondary's
    state is now one: it does not answer while any zone's latest NOTIFY goes unanswered."""
    monkeypatch.setattr(notify, "FIRST_WAIT", 0.02)
    monkeypatch.setattr(notify, "LONGEST_WAIT", 0.04)
    caplog.set_level(logging.INFO, logger="dnsside.transfer")
    seen: set[str] = set()
    given_up = count("given_up")

    def answer(msg: dns.message.Message) -> dns.message.Message | None:
        zone = msg.question[0].name.to_text()
        first = zone not in seen
        seen.add(zone)
        return None if first or zone == "clusterset.local." else acknowledge(msg)

    async with secondary(answer) as (_sec, target):
        notifier = Notifier([target], ZONES)
        notifier.notify(30)
        await wait_until(lambda: count("given_up") == given_up + 1)
        await notifier.close()
    assert notifier.answered.get(target) == 30  # svc-global. was acknowledged
    assert caplog.text.count(f"notify: {target} does not answer") == 2  # the state, then stop
    assert f"notify: {target} answers again" not in caplog.text
    assert "stopped after 10 NOTIFYs of clusterset.local. serial 30" in caplog.text
