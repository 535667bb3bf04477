"""Pre-encoded answers in, out of the responder's tables: one global service at a time.

The index decides *which* global services changed; this puts each one's answers
into the :class:`~dnsside.dns.responder.Responder` in place of its previous ones.
The :class:`Publisher` is the responder's one writer: the answers, the names, the
zones' serial and the moment it turns ready all go through it. Where zones are
transferred, it also hands every answer it replaces to the zone's
:class:`~dnsside.dns.versions.ZoneVersions`, which keeps the records transfers send.

The order matters: the new answers are inserted first and only
then are the names no longer there removed, so a query running between two
statements sees the old or the new answer for a name, never a gap. Unchanged
bytes are not touched at all (a write that changed nothing visible costs no
churn in the tables).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from itertools import chain, repeat
from operator import attrgetter, methodcaller

from dnsside.core.assembly import GlobalService
from dnsside.core.encode import (
    EncodedMembers,
    MemberWire,
    ServiceAnswers,
    encode_steps,
)
from dnsside.core.members import KEEP_FROM, Member
from dnsside.core.steps import Steps, chunks, finish, let_go
from dnsside.core.tables import Key
from dnsside.dns.catalog import CatalogZone, FixedVersions
from dnsside.dns.names import namespace_name
from dnsside.dns.responder import Responder
from dnsside.dns.versions import ZoneVersions
from dnsside.dns.wire import Answer
from dnsside.dns.zone import McsZone, Zone, ZoneOptions


def make_responder(
    zones: Sequence[str], options: ZoneOptions, mcs_zones: Sequence[str] = (),
    catalog: str | None = None, started: int = 0
) -> Responder:
    """The ``--zone`` zones, then the ``--mcs-zone`` ones (KEP-1645 names); with
    ``catalog`` (``--catalog-zone``), the catalog listing them all, its serial ``started``
    (the second the process started: :mod:`dnsside.dns.catalog`)."""
    served = [*(Zone(z, options) for z in zones), *(McsZone(z, options) for z in mcs_zones)]
    fixed = [CatalogZone(catalog, options, [z.origin for z in served], started)] if catalog else []
    return Responder(served, fixed)


class _Published:
    """What one service put into the responder's tables, to take it out again: the keys
    of its answers (the tables hold the answers), its names, its pods' parts by id and how
    many answers in all."""

    __slots__ = ("answers", "count", "names", "parts")

    def __init__(self, answers: tuple[bytes, ...], names: tuple[bytes, ...],
                 parts: dict[int, MemberWire], count: int) -> None:
        self.answers = answers
        self.names = names
        self.parts = parts
        self.count = count


_OWN = methodcaller("own")  # a pod's part: its own name's (question, answer) pairs
_OWNED = attrgetter("owned")  # how many


def _same_answer(a: Answer | None, b: Answer) -> bool:
    return a is b or (a is not None and a.body == b.body and a.counts == b.counts
                      and a.stat == b.stat)


class Publisher:
    """Keeps the responder's tables equal to the encoding of every published service."""

    def __init__(self, responder: Responder, zone_options: ZoneOptions,
                 history: int | None = None) -> None:
        self.responder = responder
        self.zone_options = zone_options
        self.zone_wires = [z.wire for z in responder.zones]
        # history: the differences each zone keeps for IXFR; None: no zone is transferred,
        # and no second copy of the records is kept.
        self.versions: dict[bytes, ZoneVersions] = (
            {} if history is None else {z.wire: ZoneVersions(z, history) for z in responder.zones})
        if history is not None:  # the catalog: one version, cut now, and never again
            self.versions.update({z.wire: FixedVersions(z) for z in responder.fixed_zones})
        self.changed = False  # answers changed since the zones' serial last did
        self.cut_serial: int | None = None  # the last version cut, None before the first
        # What each service put into the responder's tables, to take it out again.
        # Tuples of the keys, not the dicts: the responder already holds the answers.
        self._published: dict[Key, _Published] = {}
        # The big services' members in wire form, kept between encodings.
        self._kept: dict[Key, EncodedMembers] = {}
        self.encoded_members = 0  # members encoded (per zone), not reused: see EncodedMembers
        self._namespace_refs: Counter[bytes] = Counter()

    def set_serial(self, serial: int, ready: bool = False) -> None:
        """Every zone's SOA serial is now ``serial``; ``ready``: the initial sync is done,
        and the responder answers from now on (the apex answers first, then ready)."""
        for z in self.responder.zones:
            z.set_serial(serial)
        if ready:
            self.responder.set_ready()
        else:
            self.responder.refresh_apex()

    def set_ready(self, first_serial: int) -> None:
        """The initial sync is done: where zones are transferred, the answers now are the
        first version, ``first_serial``, cut before the responder answers, so that the
        first SOA a client gets names a version a secondary can transfer (issue 36: a
        transfer in the first second got SERVFAIL). Then the responder answers."""
        if self.versions:
            self.cut(first_serial)
        self.responder.set_ready()

    @property
    def serial(self) -> int:
        """The zones' serial: the last version cut, or the second the index was made."""
        return self.responder.zones[0].serial

    @property
    def pending(self) -> bool:
        """What a new version of the zones would differ in: records, where zones are
        transferred (a change of names alone is no new version of what secondaries
        hold), else any answer. Nothing before the initial sync (the responder not ready):
        its first version is cut then."""
        if not self.responder.ready:
            return False
        if self.versions:
            return any(v.pending for v in self.versions.values())
        return self.changed

    def cut(self, serial: int) -> None:
        """The zones as they are now become the version ``serial``."""
        for versions in self.versions.values():
            versions.cut(serial)
        self.changed = False
        self.cut_serial = serial
        self.set_serial(serial)

    def zone_octets(self) -> int:
        """What the longest served zone adds to a name: every name must fit in 255 octets."""
        return max((len(z.services_wire) for z in self.responder.zones), default=0)

    def publish(self, key: Key, gs: GlobalService | None) -> bool:
        """Put ``gs``'s answers in the responder's tables in place of its previous ones;
        False (and nothing touched) when they are the same bytes. At once: see
        :meth:`publish_steps`."""
        return finish(self.publish_steps(key, gs))

    def publish_steps(self, key: Key, gs: GlobalService | None) -> Steps[bool]:
        """:meth:`publish` in steps (:mod:`dnsside.core.steps`): the encoding and the
        comparison with what is published yield every few thousand members; the tables
        are written in one step, the last but the freeing of what was replaced, so a
        query sees the service's old answers or its new ones, never a mix.

        A big service's pods' answers come as ``parts`` (:class:`EncodedMembers`), the
        same tuple object for a pod that did not change: only the parts that came or went
        are compared and written, so one pod's change costs one pod, not the service."""
        kept = self._kept_for(key, gs)
        before = kept.encoded if kept is not None else 0
        new = ServiceAnswers() if gs is None else (
            yield from encode_steps(gs, self.responder.zones, self.zone_options, kept))
        self.encoded_members += (kept.encoded - before if kept is not None
                                 else len(gs.members) * len(self.responder.zones)
                                 if gs is not None else 0)
        dropped = kept.take_dropped() if kept is not None else []
        old = self._published.get(key)
        if old is None and not new.answers and not new.parts:
            yield from let_go(dropped)
            return False
        kept_parts = old.parts if old is not None else {}
        new_parts: dict[int, MemberWire] = {}
        added: list[MemberWire] = []
        for chunk in chunks(new.parts or ()):
            ids = list(map(id, chunk))
            new_parts.update(zip(ids, chunk, strict=True))
            added += [p for i, p in zip(ids, chunk, strict=True) if kept_parts.get(i) is not p]
            yield
        gone: list[MemberWire] = []
        for old_chunk in chunks(list(kept_parts.items())):
            gone += [p for i, p in old_chunk if new_parts.get(i) is not p]
            yield
        count = len(new.answers) + sum(map(_OWNED, new_parts.values()))
        if old is not None and self._unchanged(old, new, added, count):
            old.parts = new_parts  # the same answers; let go of the parts no longer kept
            yield from let_go([*dropped, gone])
            return False
        fresh: dict[bytes, Answer] = dict(new.answers)
        for added_chunk in chunks(added):
            fresh.update(chain.from_iterable(map(_OWN, added_chunk)))
            yield
        gone_keys = [k for k in (old.answers if old is not None else ()) if k not in fresh]
        for gone_chunk in chunks(gone):
            gone_keys += [k for k, _ in chain.from_iterable(map(_OWN, gone_chunk))
                          if k not in fresh]
            yield
        # From here to the end of the tables, one step: nothing of this service is seen
        # half written, by a query or by a version cut meanwhile.
        self._published.pop(key, None)
        self.changed = True
        if self.versions:
            self._hand_to_versions(fresh, gone_keys)
        # Insert first, then remove what is no longer there: a concurrent reader
        # sees either the old or the new answer for a name, never a gap.
        r = self.responder
        r.answers.update(fresh)
        for name in new.names:
            r.names[name] = r.zone_by_wire[self._zone_suffix(name)]
        deque(map(r.answers.pop, gone_keys, repeat(None)), maxlen=0)
        if old is not None:
            for name in old.names:
                if name not in new.names:
                    r.names.pop(name, None)
        if count:
            self._published[key] = _Published(tuple(new.answers), tuple(new.names),
                                              new_parts, count)
        delta = (1 if count else 0) - (1 if old is not None else 0)
        if delta:
            self._count_namespace(key[0], delta)
        yield
        yield from let_go([*dropped, kept_parts if old is not None else {}, gone, added,
                            gone_keys])
        return True

    def keeps(self, key: Key) -> bool:
        """``key`` is a big service whose members' encoding is kept (what replaces it is
        published in steps, even when it is small or gone)."""
        return key in self._kept

    def _kept_for(self, key: Key, gs: GlobalService | None) -> EncodedMembers | None:
        """What a big service keeps of its members' encoding (made now for a service that
        just grew big); None for a small one, or one gone, whose kept encoding goes."""
        if gs is None or len(gs.members) < KEEP_FROM:
            self._kept.pop(key, None)
            return None
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = EncodedMembers()
        return kept

    def encode_ahead(self, key: Key, members: list[Member]) -> None:
        """Encode ``members`` of the big service ``key`` ahead of its rebuild (see
        :meth:`EncodedMembers.ahead`), kept from now on if nothing was; nothing is
        published."""
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = EncodedMembers()
        before = kept.encoded
        kept.ahead(members, self.responder.zones, self.zone_options, key)
        self.encoded_members += kept.encoded - before

    def _hand_to_versions(self, fresh: dict[bytes, Answer], gone: list[bytes]) -> None:
        """Each answer that changes (or goes), before the tables change."""
        answers = self.responder.answers
        for k, answer in fresh.items():
            before = answers.get(k)
            if not _same_answer(before, answer):
                self.versions[self._zone_suffix(k[:-4])].replace(k[:-4], before, answer)
        for k in gone:
            self.versions[self._zone_suffix(k[:-4])].replace(k[:-4], answers.get(k), None)

    def _unchanged(self, old: _Published, new: ServiceAnswers,
                   added: list[MemberWire], count: int) -> bool:
        """``new`` holds exactly the questions, answer bytes and names published before:
        as many answers, and each one not in a part kept the same as the one published
        (the names of a service are its own: one published under it was its before)."""
        if count != old.count or len(old.names) != len(new.names):
            return False
        answers = self.responder.answers
        if not all(name in new.names for name in old.names):
            return False
        if not all(_same_answer(answers.get(k), a) for k, a in new.answers.items()):
            return False
        return all(_same_answer(answers.get(k), a) for part in added for k, a in part.own())

    def _count_namespace(self, namespace: str, delta: int) -> None:
        """`<ns>.Z` (`<ns>.svc.M`) is an empty non-terminal while any service of the
        namespace is published."""
        for zone in self.responder.zones:
            name = namespace_name(namespace, zone.services_wire)
            self._namespace_refs[name] += delta
            if self._namespace_refs[name] > 0:
                self.responder.names[name] = zone
            else:
                del self._namespace_refs[name]
                self.responder.names.pop(name, None)

    def _zone_suffix(self, name: bytes) -> bytes:
        """The longest served zone that ``name`` (one of our own, well-formed) ends with."""
        return max((z for z in self.zone_wires if name.endswith(z)), key=len)
