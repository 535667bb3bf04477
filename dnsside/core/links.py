"""The Links the index holds, and how far it can trust them: a pure state machine.

Links decide which clusters are linked, and so which mirrors are orphans. The
list is only ever changed by knowledge, never by its absence: before any list
nothing is filtered (an unreadable list must never empty the answers), and once
one was listed it stands through every fault (a fault must never bring an
unlinked cluster back) until a newer complete list or a watch event replaces it.
So the phase says what the operator hears, the log line, the gauges and
``explain``, and never the records themselves.

Everything that moves the phase is here, in one table, :data:`TRANSITIONS`, in the
manner of h11's ``_state.py``: a complete list (``LISTED``), a source that cannot
read Links (``UNAVAILABLE``), the watch going down or following again. A
transition that changes the phase, or a new list, stamps the time the list was last
known complete; the subtle case is a watch that goes down, which stamps too: the
list was complete up to that moment.

Which Links count is the other half, and it is a rule on the records, not a phase
(:func:`choose`): only the Links of the links namespace count, as for Linkerd's own
controllers (a Link elsewhere was written by someone who may write Links there, not by
whoever installed Linkerd), and one Link per cluster: of two that target the same
cluster, the one created first (``creationTimestamp``, then name: what the API server
stores, so the same after a restart) keeps it, and the other is refused, never switched
to while the first stands. Every refused Link is told once (:data:`REFUSAL_TEXT`), and
again only when why changes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator

from dnsside.core.diagnosis import Notice, Told
from dnsside.core.tables import Key
from dnsside.model.linkerd import LinkRecord


class LinkPhase(enum.Enum):
    UNKNOWN = "not known yet"  # the source has not said: nothing is filtered
    UNREADABLE = "unreadable"  # never listed: nothing is filtered
    FOLLOWING = "following"  # listed, and the watch follows changes
    WATCH_DOWN = "watch down"  # listed, the watch is down: the last list stands


class LinkInput(enum.Enum):
    LISTED = "a complete list"
    UNAVAILABLE = "Links cannot be read"
    WATCH_DOWN = "the watch is down"
    WATCH_UP = "a watch event, or the watch follows again"


# (phase, input) -> (next phase, what an operator is told of it, if anything)
TRANSITIONS: dict[tuple[LinkPhase, LinkInput], tuple[LinkPhase, Notice | None]] = {
    (LinkPhase.UNKNOWN, LinkInput.LISTED): (LinkPhase.FOLLOWING, None),
    (LinkPhase.UNKNOWN, LinkInput.UNAVAILABLE): (LinkPhase.UNREADABLE, Notice.LINKS_UNREADABLE),
    (LinkPhase.UNKNOWN, LinkInput.WATCH_DOWN): (LinkPhase.UNKNOWN, None),
    (LinkPhase.UNKNOWN, LinkInput.WATCH_UP): (LinkPhase.UNKNOWN, None),
    (LinkPhase.UNREADABLE, LinkInput.LISTED): (LinkPhase.FOLLOWING, Notice.LINKS_READABLE),
    # Told again only when the reason is another one.
    (LinkPhase.UNREADABLE, LinkInput.UNAVAILABLE): (LinkPhase.UNREADABLE,
                                                    Notice.LINKS_UNREADABLE),
    (LinkPhase.UNREADABLE, LinkInput.WATCH_DOWN): (LinkPhase.UNREADABLE, None),
    (LinkPhase.UNREADABLE, LinkInput.WATCH_UP): (LinkPhase.UNREADABLE, None),
    (LinkPhase.FOLLOWING, LinkInput.LISTED): (LinkPhase.FOLLOWING, None),
    # Once listed, Links that cannot be read are a watch that is down: the list stands.
    (LinkPhase.FOLLOWING, LinkInput.UNAVAILABLE): (LinkPhase.WATCH_DOWN, Notice.LINK_WATCH_DOWN),
    (LinkPhase.FOLLOWING, LinkInput.WATCH_DOWN): (LinkPhase.WATCH_DOWN, Notice.LINK_WATCH_DOWN),
    (LinkPhase.FOLLOWING, LinkInput.WATCH_UP): (LinkPhase.FOLLOWING, None),
    (LinkPhase.WATCH_DOWN, LinkInput.LISTED): (LinkPhase.FOLLOWING, Notice.LINKS_RELISTED),
    # While down, the latest reason is kept and nothing is told again.
    (LinkPhase.WATCH_DOWN, LinkInput.UNAVAILABLE): (LinkPhase.WATCH_DOWN, None),
    (LinkPhase.WATCH_DOWN, LinkInput.WATCH_DOWN): (LinkPhase.WATCH_DOWN, None),
    (LinkPhase.WATCH_DOWN, LinkInput.WATCH_UP): (LinkPhase.FOLLOWING, Notice.LINK_WATCH_UP),
}

_LISTED = (LinkPhase.FOLLOWING, LinkPhase.WATCH_DOWN)


class LinkRefusal(enum.Enum):
    """Why a Link the source delivered does not count (the metric's ``reason``)."""

    OUTSIDE_NAMESPACE = "outside-namespace"
    DUPLICATE = "duplicate"


# What the log, `explain` and `check` say of a refused Link ({keeper}: the Link that keeps
# its cluster; {namespace}: --links-namespace).
REFUSAL_TEXT: dict[LinkRefusal, str] = {
    LinkRefusal.OUTSIDE_NAMESPACE: (
        "Link {link} (cluster {cluster}) is ignored: only Links in {namespace} "
        "(--links-namespace) count, as for Linkerd's own controllers"),
    LinkRefusal.DUPLICATE: (
        "Link {link} is refused: cluster {cluster} is linked by Link {keeper}, created "
        "first; delete one of them (dnsside never switches to the newer)"),
}


def _age(link: LinkRecord) -> tuple[bool, str, str]:
    """The order in which Links claim a cluster: created first (one without a
    creationTimestamp last), then by name."""
    return (not link.created, link.created, link.name)


def choose(links: Iterable[LinkRecord], namespace: str
           ) -> tuple[dict[str, LinkRecord], dict[Key, tuple[LinkRefusal, str]]]:
    """The Link that counts for each target cluster, and every other Link with why it does
    not (its :data:`REFUSAL_TEXT`). Pure: `dnsside check` applies the same rule."""
    chosen: dict[str, LinkRecord] = {}
    refused: dict[Key, tuple[LinkRefusal, str]] = {}
    for link in sorted(links, key=_age):
        keeper = chosen.get(link.target_cluster)
        why = (LinkRefusal.OUTSIDE_NAMESPACE if link.namespace != namespace else
               LinkRefusal.DUPLICATE if keeper is not None else None)
        if why is None:
            chosen[link.target_cluster] = link
            continue
        refused[(link.namespace, link.name)] = (why, REFUSAL_TEXT[why].format(
            link=f"{link.namespace}/{link.name}", cluster=link.target_cluster,
            namespace=namespace,
            keeper=f"{keeper.namespace}/{keeper.name}" if keeper is not None else ""))
    return chosen, refused


class Links:
    """The Link records, their phase and why (``reason``: why they cannot be read, or why
    the watch is down), and when the list was last known complete."""

    def __init__(self, namespace: str, clock: Callable[[], float]) -> None:
        self.namespace = namespace  # --links-namespace: only its Links count
        self._clock = clock  # the caller's: when the list was last known complete
        self.records: dict[Key, LinkRecord] = {}  # every Link delivered, counted or not
        self.chosen: dict[str, LinkRecord] = {}  # target cluster -> the Link that counts
        self.refused: dict[Key, tuple[LinkRefusal, str]] = {}  # the others, and why
        self._told_refused: dict[Key, str] = {}
        self.phase = LinkPhase.UNKNOWN
        self.reason = ""
        self.complete_at = 0.0

    # ------------------------------------------------------------ what others read

    @property
    def readable(self) -> bool | None:
        """None until the source says, then whether Links were ever listed."""
        if self.phase is LinkPhase.UNKNOWN:
            return None
        return self.phase in _LISTED

    @property
    def watch_down(self) -> str:
        """Why the Link watch is down ("" while it follows, or before any list)."""
        return self.reason if self.phase is LinkPhase.WATCH_DOWN else ""

    def values(self) -> Iterator[LinkRecord]:
        """The Links that count: one per target cluster, in the links namespace."""
        return iter(self.chosen.values())

    def __len__(self) -> int:
        return len(self.chosen)

    def targets(self) -> set[str]:
        """Every cluster a Link that counts now targets, whatever the phase."""
        return set(self.chosen)

    def refused_counts(self) -> dict[LinkRefusal, int]:
        """How many Links are refused, by reason (every reason, 0 included)."""
        counts = dict.fromkeys(LinkRefusal, 0)
        for why, _ in self.refused.values():
            counts[why] += 1
        return counts

    def linked(self) -> frozenset[str] | None:
        """Target clusters of the Links, or None when Links cannot be read (no filtering)."""
        if not self.readable:
            return None
        return frozenset(self.targets())

    def describe(self, now: float | None = None) -> str:
        """The Link state in one phrase, for the sync log line and `explain`."""
        if self.readable:
            listed = f"{len(self)} read ({', '.join(sorted(self.targets()))})"
            if self.refused:
                listed += "; " + "; ".join(text for _, text in sorted(self.refused.values()))
            if not self.watch_down:
                return listed
            age = max(0.0, (self._clock() if now is None else now) - self.complete_at)
            return (f"{listed}; the Link watch is down ({self.watch_down}): the list last "
                    f"known complete {age:.0f} s ago stands")
        if self.readable is False:
            return f"cannot be read ({self.reason}): orphaned mirrors are not filtered"
        return "not known yet"

    # ------------------------------------------------------------ records

    def put(self, record: LinkRecord) -> list[Told]:
        self.records[(record.namespace, record.name)] = record
        return self._choose()

    def pop(self, key: Key) -> list[Told]:
        self.records.pop(key, None)
        return self._choose()

    def replace(self, records: Iterable[object]) -> list[Told]:
        """The complete list: drop what is gone, upsert what differs (in place, so the
        order of the Links that stay is kept)."""
        new = {(r.namespace, r.name): r for r in records if isinstance(r, LinkRecord)}
        for key in [k for k in self.records if k not in new]:
            del self.records[key]
        for key, record in new.items():
            if self.records.get(key) != record:
                self.records[key] = record
        return self._choose()

    def _choose(self) -> list[Told]:
        """Which Links count now; each refusal that is new, or new in why, told once."""
        self.chosen, self.refused = choose(self.records.values(), self.namespace)
        told = [Told(Notice.LINK_REFUSED, text) for key, (_, text) in sorted(
            self.refused.items()) if self._told_refused.get(key) != text]
        self._told_refused = {key: text for key, (_, text) in self.refused.items()}
        return told

    # ------------------------------------------------------------ transitions

    def listed(self) -> Told | None:
        """A complete Link list arrived (after :meth:`replace`)."""
        return self._move(LinkInput.LISTED, "")

    def unavailable(self, reason: str) -> Told | None:
        return self._move(LinkInput.UNAVAILABLE, reason)

    def watch(self, reason: str) -> Told | None:
        """The Link watch went down (``reason``) or follows again (""). A Link watch event
        is the latter."""
        return self._move(LinkInput.WATCH_DOWN if reason else LinkInput.WATCH_UP, reason)

    def _move(self, given: LinkInput, reason: str) -> Told | None:
        before, before_reason = self.phase, self.reason
        after, notice = TRANSITIONS[(before, given)]
        if after is LinkPhase.FOLLOWING:
            self.reason = ""
        elif given is LinkInput.UNAVAILABLE or (given is LinkInput.WATCH_DOWN
                                                and before in _LISTED):
            self.reason = reason  # the newest: a watch means nothing before a list
        self.phase = after
        now = self._clock()
        told = None
        if notice is not None and not (after is before and reason == before_reason):
            told = self._told(notice, now)
        if after in _LISTED and (given is LinkInput.LISTED or after is not before):
            self.complete_at = now
        return told

    def _told(self, notice: Notice, now: float) -> Told:
        if notice is Notice.LINKS_UNREADABLE:
            return Told(notice, (
                f"Links cannot be read: {self.reason}; serving every mirror, orphaned or not, "
                "until they can"))
        if notice is Notice.LINK_WATCH_DOWN:
            return Told(notice, (
                f"Link watch down ({self.reason}): the last complete list of {len(self)} Links "
                f"({', '.join(sorted(self.targets())) or 'none'}) stands until a newer list or "
                "watch event replaces it"))
        if notice is Notice.LINKS_READABLE:
            return Told(notice, "Links can be read again: mirrors of unlinked clusters are left "
                                "out")
        if notice is Notice.LINKS_RELISTED:
            return Told(notice, f"Links listed again ({len(self)}): the Link watch follows "
                                "changes again")
        return Told(notice, "Link watch follows changes again after "
                            f"{now - self.complete_at:.0f} s down")


__all__ = ["REFUSAL_TEXT", "TRANSITIONS", "LinkInput", "LinkPhase", "LinkRefusal", "Links",
           "choose"]
