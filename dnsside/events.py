"""What sources tell the index.

Sources (the API watch, the file) never touch the index directly: they yield
these events, and :class:`dnsside.index.Index` applies them. ``Replace`` is how
a source says "this is the whole truth for these kinds" — the initial list, a
relist after 410 Expired, a file reload — so the index can diff it against what
it holds and swap the result in at once: objects deleted while a watch was away
disappear, and no query ever sees an empty index in between.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dnsside.linkerd import LinkRecord, Record, ServiceRecord


class Kind(enum.Enum):
    SERVICE = "Service"
    SLICE = "EndpointSlice"
    LINK = "Link"

    @staticmethod
    def of(record: Record) -> Kind:
        if isinstance(record, ServiceRecord):
            return Kind.SERVICE
        return Kind.LINK if isinstance(record, LinkRecord) else Kind.SLICE


@dataclass(frozen=True, slots=True)
class Upsert:
    """An object was added or changed."""

    record: Record


@dataclass(frozen=True, slots=True)
class Delete:
    """An object is gone."""

    kind: Kind
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Replace:
    """The complete current set of objects of ``kinds`` (the others are unchanged)."""

    kinds: frozenset[Kind]
    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class Synced:
    """The source has delivered its initial state: the index may start answering."""


@dataclass(frozen=True, slots=True)
class SourceError:
    """Something went wrong at the source; the index keeps serving what it has."""

    message: str


Event = Upsert | Delete | Replace | Synced | SourceError
