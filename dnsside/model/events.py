"""What sources tell the index.

Sources (the API watch, the file) never touch the index directly: they yield
these events, and :class:`dnsside.core.index.Index` applies them. ``Replace`` is how
a source says "this is the whole truth for these kinds" — the initial list, a
relist after 410 Expired, a file reload — so the index can diff it against what
it holds and swap the result in at once: objects deleted while a watch was away
disappear, and no query ever sees an empty index in between.

Links get more events. A ``Replace`` whose kinds include ``LINK`` means the
source can read Links and this is all of them: from then on mirrors of a cluster
no Link targets are orphans. ``LinksUnavailable`` means it cannot (no CRD, 403,
a dump taken without Links). Before any Link list, nothing is filtered then,
because an unreadable Link list must never empty the answers; after one, the
last complete list stands, because a fault must never bring an unlinked cluster
back. ``LinkWatch`` says whether the Link watch is following changes or is down
(the list stands either way; it is what the operator is told). ``GatewayState``
comes from the gateway prober, which is one more source. ``Remote`` and
``RemoteStatus`` come from the flat-network source: the objects of a linked
cluster watched directly, kept apart from the local ones, and how that watch fares.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dnsside.model.linkerd import LinkRecord, Record, ServiceRecord


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
class LinksUnavailable:
    """Links cannot be read; the reason says why (for the log, the metric and explain)."""

    reason: str


@dataclass(frozen=True, slots=True)
class LinkWatch:
    """The Link watch is down (``reason`` says why: an error, a relist, the API away) or
    follows changes again (``reason`` empty). Changes no Link: only a Replace does."""

    reason: str = ""

    @property
    def up(self) -> bool:
        return not self.reason


class Gateway(enum.Enum):
    """What dnsside's own probe knows of a link's gateway."""

    ALIVE = "alive"  # the last probe succeeded
    FAILING = "failing"  # failed --gateway-probe-failures times in a row after a success
    UNREACHED = "never answered"  # no success since start: not acted on, like Linkerd


@dataclass(frozen=True, slots=True)
class GatewayState:
    """The probe of ``cluster``'s gateway changed state (``None``: no longer probed)."""

    cluster: str
    state: Gateway | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Remote:
    """``event`` (an Upsert, Delete or Replace of Services and EndpointSlices) happened in
    linked ``cluster``, watched directly with its Link's credentials (``--flat-network``).
    Its records live apart from the local ones: the same namespace and name exist in
    both clusters."""

    cluster: str
    event: Upsert | Delete | Replace


class RemoteState(enum.Enum):
    """How dnsside follows a linked cluster's API under ``--flat-network``."""

    CONNECTING = "connecting"  # no complete list yet: the cluster adds no member
    SYNCED = "synced"  # listed and watched: its members follow it
    LOST = "lost"  # the API went away after a sync: the last-known members stand
    CREDENTIALS = "credentials"  # the Secret, its kubeconfig or the remote's verdict on it
    CAPPED = "capped"  # it sent more than a cap allows: its last complete list stands


@dataclass(frozen=True, slots=True)
class RemoteStatus:
    """The watch of linked ``cluster`` changed state; ``detail`` says why (it is logged
    when it changes, so it holds no retry delay), ``secret`` names the credentials."""

    cluster: str
    state: RemoteState
    detail: str = ""
    secret: str = ""  # namespace/name
    # How its Secret weakens TLS, as --insecure-remote-tls allows (insecure-skip-tls-verify,
    # http://, proxy-url), one phrase each; () when it does not.
    weakened: tuple[str, ...] = ()
    cap: str = ""  # CAPPED: which cap (dnsside.sources.limits.CAPS)
    # Its watch events are held and coalesced: they come faster than its share of the
    # index's time allows (dnsside.sources.budget). Not a state: it is told by the source.
    throttled: bool = False


@dataclass(frozen=True, slots=True)
class Synced:
    """The source has delivered its initial state: the index may start answering."""


@dataclass(frozen=True, slots=True)
class SourceError:
    """Something went wrong at the source; the index keeps serving what it has."""

    message: str


Event = (Upsert | Delete | Replace | LinksUnavailable | LinkWatch | GatewayState | Synced
         | SourceError | Remote | RemoteStatus)
