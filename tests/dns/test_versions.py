"""The zones' versions (dns/versions.py): the serial rule, the current version while
changes are pending, and the bounded history of differences."""

from __future__ import annotations

import struct

import pytest

from dnsside.dns.versions import (
    ZoneVersions,
    cut_not_before,
    next_serial,
    serial_newer,
    spelled_out,
)
from dnsside.dns.wire import A, Answer, resource_record, to_wire
from dnsside.dns.zone import Zone, ZoneOptions

pytestmark = pytest.mark.quick

T = 1_795_720_000.25  # a Unix time in 2026


def test_serial_arithmetic_wraps_as_rfc_1982_says() -> None:
    assert serial_newer(2, 1) and not serial_newer(1, 2) and not serial_newer(5, 5)
    assert serial_newer(0, 0xFFFFFFFF) and serial_newer(5, 0xFFFFFFF0)
    assert not serial_newer(0xFFFFFFF0, 5)
    assert serial_newer((1 << 31) - 1, 0) and not serial_newer(0, (1 << 31) - 1)


def test_the_serial_is_the_second_of_the_cut_and_never_goes_back() -> None:
    assert next_serial(int(T) - 10, T) == int(T)
    # A second cut within the same second waits for the next one: never two serials a second.
    assert cut_not_before(int(T), T) == int(T) + 1
    assert cut_not_before(int(T) - 1, T) == T
    assert next_serial(int(T), int(T) + 1.0) == int(T) + 1
    # A restart: the index starts at its own second, so its first version is a later one.
    start = int(T)
    assert cut_not_before(start, T + 0.5) == start + 1 and next_serial(start, start + 1) > start
    # The clock stepped back: count on from the last serial, at once.
    assert next_serial(int(T) + 100, T) == int(T) + 101
    assert cut_not_before(int(T) + 100, T) == T


def a(name: str, ip: str) -> tuple[bytes, Answer]:
    wire = to_wire(name)
    rdata = bytes(int(x) for x in ip.split("."))
    return wire, Answer(0, A, (resource_record(wire, A, 5, rdata),))


def owners(versions: ZoneVersions) -> set[tuple[bytes, bytes]]:
    """(owner, IPv4 address) of every A record below the apex."""
    apex = versions.zone.wire
    out = set()
    for record in versions.records():
        i = 0
        while record[i] < 0xC0:  # the labels below the apex, then the pointer to it
            i += record[i] + 1
        owner, rest = record[:i] + apex, record[i + 2 :]
        assert spelled_out(record, apex) == owner + rest
        if struct.unpack_from("!H", rest)[0] == A and owner != apex:
            out.add((owner, rest[-4:]))
    return out


def test_the_current_version_stays_whole_while_changes_are_pending() -> None:
    zone = Zone("svc-global.", ZoneOptions(ttl=5))
    v = ZoneVersions(zone, limit=8)
    apex = set(v.records())  # NS and the name server's address: there from the start
    assert v.serial is None and v.pending
    name, one = a("x.default.svc-global.", "10.0.0.1")
    v.replace(name, None, one)
    v.cut(100)
    assert not v.pending and owners(v) == {(name, bytes([10, 0, 0, 1]))}
    _, two = a("x.default.svc-global.", "10.0.0.2")
    v.replace(name, one, two)
    assert v.pending
    assert owners(v) == {(name, bytes([10, 0, 0, 1]))}  # version 100 until the next cut
    v.cut(101)
    assert owners(v) == {(name, bytes([10, 0, 0, 2]))} and apex <= set(v.records())
    assert v.differences(101) == [] and v.differences(200) == []  # current, or newer
    (step,) = v.differences(100) or []
    assert (step.old, step.new, len(step.removed), len(step.added)) == (100, 101, 1, 1)
    assert v.differences(99) is None  # older than the history: the whole zone


def test_a_change_undone_before_the_cut_is_no_difference() -> None:
    v = ZoneVersions(Zone("svc-global.", ZoneOptions(ttl=5)), limit=8)
    name, one = a("x.default.svc-global.", "10.0.0.1")
    v.replace(name, None, one)
    v.cut(100)
    v.replace(name, one, None)
    v.replace(name, None, one)
    assert not v.pending


def test_the_history_keeps_at_most_limit_versions_and_no_more_records_than_the_zone() -> None:
    v = ZoneVersions(Zone("svc-global.", ZoneOptions(ttl=5)), limit=3)
    names = [a(f"m{i}.default.svc-global.", f"10.0.0.{i}") for i in range(20)]
    for name, answer in names:
        v.replace(name, None, answer)
    v.cut(100)
    serial = 100
    for i in range(5):  # one member changes address each version: two records a step
        name, old = names[i]
        _, new = a(f"m{i}.default.svc-global.", f"10.0.1.{i}")
        v.replace(name, old, new)
        serial += 1
        v.cut(serial)
    assert v.history_versions == 3 and v.history_records == 6
    assert v.differences(serial - 3) is not None and v.differences(serial - 4) is None
    # One version that changes more records than the zone holds leaves only itself: a
    # secondary one version behind still gets differences, one further behind the zone.
    for i in range(5, 20):
        v.replace(names[i][0], names[i][1], None)
    v.cut(serial + 1)
    assert v.history_versions == 1 and v.history_records == 15
    assert v.differences(serial) is not None and v.differences(serial - 1) is None
