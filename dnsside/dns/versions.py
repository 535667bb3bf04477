"""Versions of a zone for zone transfers: the records a transfer sends, the serial that
names each version, and the differences an IXFR sends (RFC 1995).

The responder's tables change with every event; a secondary needs versions: a set of
records under one serial, and the records removed and added from one version to the
next. :class:`ZoneVersions` keeps, per zone, the records the tables hold now (fed by the
publisher with every answer it replaces), the net change since the last version, and a
bounded history of differences. A version is *cut* by whoever owns the clock; until the
next cut, the current version is the records now less what was added since, plus what
was removed since, so a transfer always gets a version that was whole at its serial.

The serial is the Unix time, in seconds, of the cut (:func:`next_serial`), and a cut
waits for the next whole second when one was already made in this one
(:func:`cut_not_before`): serials go up with the clock, across restarts too, and two
replicas that see a change within the same second give it the same serial. Should the
clock step back, the serial counts on from the last one (RFC 1982 arithmetic, 32 bits)
until the clock catches up.

Every transfer of a version shares one tuple of its records (:meth:`ZoneVersions.records`),
made at the first transfer after a cut: a transfer holds a reference, not a copy, so 500
clients transferring a 60,000-record zone at once cost 500 small objects (issue 33: they
cost half a gigabyte when each copied the list).

The history holds at most ``limit`` differences and, beyond the newest one, no more
records in them than the zone itself holds: past that, a full transfer is cheaper than
the differences. The newest one stays whatever its size, so a secondary one version
behind, the usual case with NOTIFY, always gets differences.
"""

from __future__ import annotations

import struct
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from dnsside.dns.wire import (
    AAAA,
    AT_QUESTION,
    NOERROR,
    NS,
    PTR,
    SOA,
    SRV,
    TXT,
    A,
    Answer,
    to_text,
)
from dnsside.dns.zone import Zone

# A record of the zone as a transfer whose question is the apex sends it: the owner's
# labels below the apex, a pointer to the question (offset 12), TYPE CLASS TTL RDLENGTH
# RDATA. One bytes object a record, not a tuple of two: at 600,000 records the second
# copy of the zone that transfers need is half the size.
Record = bytes

SERIAL_BITS = 32
_HALF = 1 << (SERIAL_BITS - 1)
_MASK = (1 << SERIAL_BITS) - 1


def serial_newer(a: int, b: int) -> bool:
    """``a`` is a later serial than ``b`` (RFC 1982 §3.2: at most 2^31 - 1 ahead)."""
    return a != b and ((a - b) & _MASK) < _HALF


def next_serial(last: int, now: float) -> int:
    """The serial of a version cut at Unix time ``now`` after one numbered ``last``: the
    second, or one past ``last`` when the clock is not ahead of it."""
    second = int(now) & _MASK
    return second if serial_newer(second, last) else (last + 1) & _MASK


def cut_not_before(last: int, now: float) -> float:
    """The earliest Unix time a version after ``last`` may be cut and still be named by
    its second: ``now``, or the start of the second after ``last``. With the clock
    behind ``last``, ``now`` (the serial then counts on, see :func:`next_serial`)."""
    ahead = (last - int(now)) & _MASK
    if ahead >= _HALF:  # the clock is past last's second
        return now
    if ahead > 1:  # the clock stepped back more than a second: do not wait for it
        return now
    return float(int(now) + ahead + 1)


class Untransferable(ValueError):
    """A record in the tables that a transfer cannot carry faithfully (a compression
    pointer where a name must be spelled out, a type whose names are not checked)."""


_HEAD = struct.Struct("!HHIH")  # TYPE, CLASS, TTL, RDLENGTH


def answer_records(name: bytes, answer: Answer) -> Iterator[tuple[bytes, bytes]]:
    """The answer section of ``answer`` (the reply to a question for ``name``) as (owner
    spelled out, TYPE CLASS TTL RDLENGTH RDATA): in the pre-encoded bodies an owner is
    usually a pointer to the question, which a transfer's question is not. Every other
    name must already be spelled out (the encoders promise so); raises
    :class:`Untransferable`."""
    if answer.rcode != NOERROR:
        return
    body, count = answer.body, answer.counts[2] << 8 | answer.counts[3]
    i = 0
    for _ in range(count):
        if body[i : i + 2] == AT_QUESTION:
            owner, i = name, i + 2
        else:
            end = _name_end(body, i, "an owner name")
            owner, i = body[i:end], end
        rtype, _rclass, _ttl, rdlen = _HEAD.unpack_from(body, i)
        rd = i + 10
        _check_rdata(rtype, body, rd, rd + rdlen, owner)
        yield owner, body[i : rd + rdlen]
        i = rd + rdlen


def _check_rdata(rtype: int, body: bytes, start: int, end: int, owner: bytes) -> None:
    """RDATA whose names are all spelled out and exactly fill it."""
    if rtype in (A, AAAA, TXT):
        return
    if rtype == SRV:
        names = [start + 6]
    elif rtype in (NS, PTR):  # PTR: a catalog zone's members
        names = [start]
    elif rtype == SOA:
        names = [start, _name_end(body, start, "a SOA MNAME")]
    else:
        raise Untransferable(f"type {rtype} at {to_text(owner)}: its names are not checked")
    at = start
    for at in names:
        at = _name_end(body, at, f"the RDATA of type {rtype} at {to_text(owner)}")
    if rtype == SOA:
        at += 20
    if at != end:
        raise Untransferable(f"type {rtype} at {to_text(owner)}: RDATA of an unexpected length")


def _name_end(body: bytes, i: int, what: str) -> int:
    """Where the spelled-out name at ``i`` ends; a pointer is :class:`Untransferable`."""
    while True:
        if i >= len(body):
            raise Untransferable(f"{what} runs past the record")
        n = body[i]
        if n == 0:
            return i + 1
        if n > 63:
            raise Untransferable(f"{what} is a compression pointer")
        i += n + 1


@dataclass(frozen=True, slots=True)
class Difference:
    """From version ``old`` to version ``new``: the records removed, then those added."""

    old: int
    new: int
    removed: tuple[Record, ...]
    added: tuple[Record, ...]

    @property
    def size(self) -> int:
        return len(self.removed) + len(self.added)


class ZoneVersions:
    """The records of one zone as its transfers see them (see the module's docstring)."""

    def __init__(self, zone: Zone, limit: int) -> None:
        self.zone = zone
        self.limit = limit  # differences kept (--ixfr-history)
        self.serial: int | None = None  # of the current version; None before the first cut
        # Every record the tables hold now, counted: two answers may carry the same one.
        self.live: Counter[Record] = Counter()
        self.added: set[Record] = set()  # net change since the current version
        self.removed: set[Record] = set()
        self.history: deque[Difference] = deque()
        self.history_records = 0
        self.broken: str | None = None  # why the tables hold a record no transfer can carry
        self._version: tuple[Record, ...] | None = None  # records(), until the next cut
        for key, answer in zone.apex.items():  # NS, glue, the MCS version TXT: fixed
            if struct.unpack_from("!H", key, len(key) - 4)[0] != SOA:
                self.replace(key[:-4], None, answer)

    @property
    def pending(self) -> bool:
        """Records changed since the current version (or there is none yet)."""
        return self.serial is None or bool(self.added or self.removed)

    def replace(self, name: bytes, old: Answer | None, new: Answer | None) -> None:
        """The answer to a question for ``name`` (a name of this zone) went from ``old``
        to ``new`` (None: there was or is none)."""
        try:
            before = self._records(name, old) if old is not None else []
            after = self._records(name, new) if new is not None else []
        except Untransferable as exc:
            self.broken = str(exc)
            return
        live = self.live
        for record in before:
            live[record] -= 1
            if live[record] <= 0:
                del live[record]
                if record in self.added:
                    self.added.discard(record)
                else:
                    self.removed.add(record)
        for record in after:
            live[record] += 1
            if live[record] == 1:
                if record in self.removed:
                    self.removed.discard(record)
                else:
                    self.added.add(record)

    def _records(self, name: bytes, answer: Answer) -> list[Record]:
        apex = self.zone.wire
        out = []
        for owner, rest in answer_records(name, answer):
            if not owner.endswith(apex):
                raise Untransferable(f"{to_text(owner)} answers for {to_text(name)}, outside "
                                     f"zone {self.zone.origin}")
            out.append(owner[: len(owner) - len(apex)] + AT_QUESTION + rest)
        return out

    def cut(self, serial: int) -> Difference | None:
        """Make the records now the version ``serial``; the difference from the previous
        version, kept in the history (None for the first version)."""
        diff = None
        if self.serial is not None:
            diff = Difference(self.serial, serial, tuple(sorted(self.removed)),
                              tuple(sorted(self.added)))
            self.history.append(diff)
            self.history_records += diff.size
            self._trim()
        self.added.clear()
        self.removed.clear()
        self.serial = serial
        self._version = None  # transfers under way keep the old tuple
        return diff

    def _trim(self) -> None:
        """Keep ``limit`` differences, and beyond the newest one no more records than the
        zone holds: a secondary one version behind (the usual case, told by NOTIFY) always
        gets the differences, however large; one further behind gets the whole zone when
        that is smaller."""
        history = self.history
        while history and (len(history) > self.limit or (
                len(history) > 1 and self.history_records > len(self.live))):
            self.history_records -= history.popleft().size

    def records(self) -> Sequence[Record]:
        """The current version's records (not the SOA), in no particular order: one tuple
        every transfer of the version shares. Until the next cut the records now, less
        what was added since, plus what was removed since, are that version whatever the
        tables do, so the tuple is made once a version."""
        if self._version is None:
            # Through a generator even when nothing was added since the cut: made in one C
            # call, the tuple of a 600,000-record zone held the GIL 75-190 ms (every UDP
            # answer waited); a generator lets the UDP thread in at each switch interval.
            added = self.added
            self._version = (*(r for r in self.live if r not in added), *self.removed)
        return self._version

    def differences(self, since: int) -> list[Difference] | None:
        """The differences from version ``since`` to the current one: [] when ``since`` is
        current or newer, None when the history does not reach back to it."""
        if self.serial is None:
            return None
        if since == self.serial or serial_newer(since, self.serial):
            return []
        out: list[Difference] = []
        for diff in reversed(self.history):
            out.append(diff)
            if diff.old == since:
                out.reverse()
                return out
        return None

    @property
    def history_versions(self) -> int:
        return len(self.history)


def spelled_out(record: Record, apex: bytes) -> bytes:
    """``record`` with its owner spelled out in full (for a question that is not the apex
    in lower case, which a pointer to it would misspell)."""
    i = 0
    while record[i] < 0xC0:  # the owner's labels: a record always ends them with a pointer
        i += record[i] + 1
    return record[:i] + apex + record[i + 2 :]
