"""What the published global services add up to, by cluster: the gauges' numbers.

The index keeps, per global service, a :data:`Tally` instead of the service itself (its
Member objects would cost as much as the records), and :class:`Counts` adds and
subtracts tallies as services change. When a cluster's counts cross zero an
operator hears of it once: a linked cluster that first contributes members or
stops, mirrors that become orphans or lose a name clash.

Clusters come and go without leaving keys behind: a cluster with no member and
nothing left out is dropped from every counter (and so its metric series go).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

from dnsside.core import diagnosis
from dnsside.core.assembly import GlobalService
from dnsside.core.diagnosis import Exclusion, Notice, Told
from dnsside.core.locality import Spill, spill
from dnsside.model.addresses import Unsafe, unsafe_address

# A global service's contribution to the member, orphan and clash counts, flat:
# (tag, cluster, n, tag, cluster, n, ...) with tag one of the tags below.
Tally = tuple[Any, ...]
_READY, _NOT_READY, _ORPHAN, _CLASH = "ready", "not-ready", "orphan", "clash"
_READY_TAG = {True: _READY, False: _NOT_READY}
_IS_READY, _CLUSTER = attrgetter("ready"), attrgetter("cluster")
_INVALID = "invalid-name"
_UNSAFE = {reason: "unsafe:" + reason for reason in Unsafe}  # an unsafe address, by reason
# A local-first service answering beyond the local cluster, by why (cluster "": the service's).
_SPILL = {reason: "spill:" + reason.value for reason in Spill}
_SPILL_OF = {tag: reason for reason, tag in _SPILL.items()}
_UNKNOWN_LOCALITY = "locality:unknown"  # dnsside.io/locality holds no value dnsside knows


def tally(gs: GlobalService, publish_not_ready: bool = False) -> Tally:
    counts: Counter[tuple[str, str]] = Counter()
    beyond = spill(gs, publish_not_ready)
    if beyond is not None:
        counts[(_SPILL[beyond], "")] = 1
    if gs.locality_annotation is not None and gs.locality_annotation.value is None:
        counts[(_UNKNOWN_LOCALITY, "")] = 1
    members = gs.members  # thousands in a big service: counted without a Python loop
    counts.update(zip(map(_READY_TAG.__getitem__, map(_IS_READY, members)),
                      map(_CLUSTER, members), strict=True))
    for m in gs.excluded:
        if m.exclusion is Exclusion.ORPHANED:
            counts[(_ORPHAN, m.cluster)] += 1
        elif m.exclusion is Exclusion.NAME_CLASH:
            counts[(_CLASH, m.cluster)] += 1
        elif m.exclusion is Exclusion.UNSAFE_ADDRESS:
            for a in m.addresses:
                counts[(_UNSAFE[unsafe_address(a) or Unsafe.UNSPECIFIED], m.cluster)] += 1
        elif m.exclusion is Exclusion.INVALID_NAME:  # a member, or the ports of one object
            counts[(_INVALID, m.cluster)] += len(m.ports) if not m.addresses else 1
    return tuple(x for (tag, cluster), n in sorted(counts.items()) for x in (tag, cluster, n))


def spilled(tallied: Tally | None) -> Spill | None:
    """Why the service of ``tallied`` answers beyond the local cluster (None: it does not)."""
    tags = tallied[::3] if tallied is not None else ()
    return next((_SPILL_OF[tag] for tag in tags if tag in _SPILL_OF), None)


class Counts:
    """Members and what is left out, by cluster, over every published global service."""

    def __init__(self) -> None:
        self._members: Counter[tuple[str, bool]] = Counter()
        self._orphans: Counter[str] = Counter()  # orphaned mirrors (excluded members)
        self._clashes: Counter[str] = Counter()  # members lost to a name clash
        self._unsafe: Counter[tuple[str, str]] = Counter()  # unsafe addresses: cluster, reason
        self._invalid: Counter[str] = Counter()  # members and ports with bad names
        self._spilled: Counter[Spill] = Counter()  # local-first services answering beyond
        self._unknown_locality = 0  # services whose local Service's annotation is unknown
        self._clusters: set[str] = set()  # clusters with members, for "link seen/gone"
        self._orphaned_clusters: set[str] = set()  # told already
        self._clashed_clusters: set[str] = set()

    def member_counts(self) -> Mapping[tuple[str, bool], int]:
        """Published members by (cluster, ready)."""
        return self._members

    def members(self) -> int:
        return sum(self._members.values())

    def clusters(self) -> set[str]:
        """Clusters with published members (as of the last :meth:`news`)."""
        return self._clusters

    def exclusion_counts(self, why: Exclusion) -> Mapping[str, int]:
        """Members left out for ``why``, by cluster (orphans, clashes, invalid names)."""
        if why is Exclusion.INVALID_NAME:
            return self._invalid
        return self._orphans if why is Exclusion.ORPHANED else self._clashes

    def unsafe_counts(self) -> Mapping[tuple[str, str], int]:
        """Addresses left out because no pod or Service can own them, by (cluster, reason)."""
        return self._unsafe

    def spilled_counts(self) -> Mapping[Spill, int]:
        """``local-first`` services that answer beyond the local cluster, by why."""
        return self._spilled

    def unknown_localities(self) -> int:
        """Global services whose local Service has a dnsside.io/locality value dnsside does
        not know (the flag applies to them)."""
        return self._unknown_locality

    def add(self, tallied: Tally | None, sign: int) -> None:
        """Count a service's tally in (``sign`` +1) or out (-1)."""
        if tallied is None:
            return
        for i in range(0, len(tallied), 3):
            tag, cluster, n = tallied[i : i + 3]
            if tag is _READY or tag is _NOT_READY:
                self._members[(cluster, tag is _READY)] += sign * n
            elif tag is _ORPHAN:
                self._orphans[cluster] += sign * n
            elif tag is _CLASH:
                self._clashes[cluster] += sign * n
            elif tag is _INVALID:
                self._invalid[cluster] += sign * n
            elif tag in _SPILL_OF:
                self._spilled[_SPILL_OF[tag]] += sign * n
            elif tag is _UNKNOWN_LOCALITY:
                self._unknown_locality += sign * n
            else:  # "unsafe:<reason>"
                self._unsafe[(cluster, tag.partition(":")[2])] += sign * n

    def news(self, quiet: bool) -> list[Told]:
        """After a rebuild that changed counts: the clusters that crossed zero, told once
        (``quiet``: the initial sync, whose own line says it all, tells no link news);
        then forget the clusters that are gone."""
        told = self._links(quiet)
        for counter, seen, tell in (
            (self._orphans, self._orphaned_clusters, diagnosis.orphaned),
            (self._clashes, self._clashed_clusters, diagnosis.name_clash),
        ):
            now = {c for c, n in counter.items() if n > 0}
            told.extend(tell(c, counter[c]) for c in sorted(now - seen))
            seen.clear()
            seen.update(now)
        self._forget_gone_clusters()
        return told

    def _links(self, quiet: bool) -> list[Told]:
        """When a linked cluster first contributes members, and when it stops."""
        per_cluster: Counter[str] = Counter()
        for (cluster, _ready), n in self._members.items():
            per_cluster[cluster] += n
        clusters = {c for c, n in per_cluster.items() if n > 0}
        told: list[Told] = []
        if not quiet:
            told.extend(Told(Notice.LINK_SEEN, f"link {c} seen: {per_cluster[c]} members")
                        for c in sorted(clusters - self._clusters))
            told.extend(Told(Notice.LINK_GONE, f"link {c} gone: no members left")
                        for c in sorted(self._clusters - clusters))
        self._clusters = clusters
        return told

    def _forget_gone_clusters(self) -> None:
        present = ({c for (c, _), n in self._members.items() if n}
                   | {c for c, n in self._orphans.items() if n}
                   | {c for c, n in self._clashes.items() if n}
                   | {c for (c, _), n in self._unsafe.items() if n}
                   | {c for c, n in self._invalid.items() if n})
        for pairs in (self._members, self._unsafe):
            for key in [k for k in pairs if k[0] not in present]:
                del pairs[key]
        for counter in (self._orphans, self._clashes, self._invalid):
            for c in [c for c in counter if c not in present]:
                del counter[c]


__all__ = ["Counts", "Tally", "spilled", "tally"]
