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

from collections import Counter
from collections.abc import Sequence

from dnsside.core.assembly import GlobalService
from dnsside.core.encode import ServiceAnswers, encode_service
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
        self._published: dict[Key, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = {}
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
    def pending(self) -> bool:
        """What a new version of the zones would differ in: records, where zones are
        transferred (a change of names alone is no new version of what secondaries
        hold), else any answer."""
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
        False (and nothing touched) when they are the same bytes."""
        r = self.responder
        new = (
            encode_service(gs, self.responder.zones, self.zone_options)
            if gs is not None
            else ServiceAnswers()
        )
        old = self._published.get(key)
        if old is None and not new.answers:
            return False
        if old is not None and self._unchanged(old, new):
            return False
        self._published.pop(key, None)
        self.changed = True
        if self.versions:
            self._hand_to_versions(old, new)
        # Insert first, then remove what is no longer there: a concurrent reader
        # sees either the old or the new answer for a name, never a gap.
        r.answers.update(new.answers)
        for name in new.names:
            r.names[name] = r.zone_by_wire[self._zone_suffix(name)]
        if old is not None:
            old_answers, old_names = old
            for k in old_answers:
                if k not in new.answers:
                    r.answers.pop(k, None)
            for name in old_names:
                if name not in new.names:
                    r.names.pop(name, None)
        if new.answers:
            self._published[key] = (tuple(new.answers), tuple(new.names))
        delta = (1 if new.answers else 0) - (1 if old is not None else 0)
        if delta:
            self._count_namespace(key[0], delta)
        return True

    def _hand_to_versions(self, old: tuple[tuple[bytes, ...], tuple[bytes, ...]] | None,
                          new: ServiceAnswers) -> None:
        """Each answer ``new`` replaces (or drops), before the tables change."""
        answers = self.responder.answers
        for k, answer in new.answers.items():
            before = answers.get(k)
            if not _same_answer(before, answer):
                self.versions[self._zone_suffix(k[:-4])].replace(k[:-4], before, answer)
        if old is not None:
            for k in old[0]:
                if k not in new.answers:
                    self.versions[self._zone_suffix(k[:-4])].replace(k[:-4], answers.get(k),
                                                                     None)

    def _unchanged(self, old: tuple[tuple[bytes, ...], tuple[bytes, ...]],
                   new: ServiceAnswers) -> bool:
        """``new`` holds exactly the questions, answer bytes and names published before."""
        old_answers, old_names = old
        if len(old_answers) != len(new.answers) or len(old_names) != len(new.names):
            return False
        answers = self.responder.answers
        return (all(name in new.names for name in old_names)
                and all(k in new.answers and _same_answer(answers.get(k), new.answers[k])
                        for k in old_answers))

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
