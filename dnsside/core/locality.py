"""Locality: which of a global service's members its own name answers.

Under ``local-first`` (``--locality``, or the local Service's ``dnsside.io/locality``)
the service's own name, ``<svc>.<ns>.Z`` A/AAAA and the SRV names below it and, under an
``--mcs-zone``, ``<svc>.<ns>.svc.M`` and its SRV, answers only the local cluster's
members while one of them is ready, and every cluster's once none is (or the local
Service is gone). Per-cluster and per-pod names name one cluster or one pod: they are
never filtered.

The subtle point: there is no timer and no second path. The choice is made from the
members when the service is encoded, and a local member going unready (or ready again)
is an EndpointSlice event that makes the index re-encode the service like any other
change: the move is as fast as every other change of the answers, and it reaches a
secondary the same way, in the next zone version.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from dnsside.core.assembly import GlobalService
from dnsside.core.diagnosis import Notice, Told
from dnsside.core.members import Member
from dnsside.model.locality import Locality, LocalityAnnotation


class Spill(enum.Enum):
    """Why a ``local-first`` service answers beyond the local cluster (the metric's label)."""

    NO_READY_MEMBER = "no-ready-local-member"  # the local Service exists, none of it ready
    NO_LOCAL_SERVICE = "no-local-service"  # the service runs only in linked clusters

    @property
    def why(self) -> str:
        return _SPILL_TEXT[self]


_SPILL_TEXT = {
    Spill.NO_READY_MEMBER: "no local member ready: every cluster answers",
    Spill.NO_LOCAL_SERVICE: "no local Service: every cluster answers",
}


def answering(gs: GlobalService, members: Sequence[Member]) -> Sequence[Member]:
    """Of the members a zone publishes for ``gs`` (``members``), those its own name
    answers: under ``local-first`` the local ones while one of them is ready."""
    if gs.locality is not Locality.LOCAL_FIRST:
        return members
    local = [m for m in members if m.via.local]
    if any(m.ready for m in local):
        return local
    return members


def spill(gs: GlobalService, publish_not_ready: bool = False) -> Spill | None:
    """Why ``gs`` answers beyond the local cluster under ``local-first``; None when it does
    not (it answers locally, or nothing beyond, or its locality is ``all``)."""
    if gs.locality is not Locality.LOCAL_FIRST:
        return None
    if any(m.via.local and m.ready and m.addresses for m in gs.members):
        return None
    if not any(not m.via.local and m.addresses and (m.ready or publish_not_ready)
               for m in gs.members):
        return None
    return Spill.NO_READY_MEMBER if gs.has_local else Spill.NO_LOCAL_SERVICE


@dataclass(frozen=True, slots=True)
class LocalityReport:
    """What ``explain`` says of a service's locality."""

    mode: str  # all | local-first
    source: str  # where it comes from, in words
    answering: list[str]  # the clusters its own name answers now
    why: str  # why those


def describe(gs: GlobalService, published: Sequence[Member]) -> LocalityReport:
    """The locality in force for ``gs``, where it came from and which clusters its own
    name answers now (``published``: the members the zone publishes), and why."""
    annotation = gs.locality_annotation
    if gs.locality_from == "annotation":
        source = f"annotation dnsside.io/locality on Service {gs.namespace}/{gs.name}"
    elif gs.locality_from == "--no-local":
        source = "--no-local leaves this cluster's members out: nothing local to prefer"
    else:
        source = f"flag --locality {gs.locality.value}"
    if annotation is not None and annotation.value is None:
        source += (f" (the Service's annotation dnsside.io/locality={annotation.written!r} "
                   "is neither all nor local-first)")
    clusters = sorted({m.cluster for m in answering(gs, published)})
    ready_local = [m for m in published if m.via.local and m.ready]
    if gs.locality is not Locality.LOCAL_FIRST:
        why = "every cluster's members answer"
    elif ready_local:
        n = len(ready_local)
        why = (f"{n} local member{'s' if n != 1 else ''} ready in {ready_local[0].cluster}: "
               "only the local cluster answers")
    elif not published:
        why = "no member ready in any cluster: nothing answers"
    else:
        why = (Spill.NO_READY_MEMBER if gs.has_local else Spill.NO_LOCAL_SERVICE).why
    return LocalityReport(gs.locality.value, source, clusters, why)


def moved(key: tuple[str, str], gs: GlobalService | None, before: Spill | None,
          now: Spill | None) -> Told | None:
    """What an operator hears when a ``local-first`` service starts or stops answering
    beyond the local cluster (None when neither happened, or the service is gone: that has
    its own notice)."""
    if before == now or gs is None:
        return None
    name = "global service {}/{}".format(*key)
    if now is Spill.NO_READY_MEMBER:
        return Told(Notice.LOCALITY_SPILLED, f"{name}: no local member ready: every cluster "
                    "answers its name until one is (locality local-first)")
    if now is Spill.NO_LOCAL_SERVICE:
        return Told(Notice.LOCALITY_NO_LOCAL, f"{name}: no local Service: every cluster "
                    "answers its name (locality local-first)")
    if gs.locality is not Locality.LOCAL_FIRST:
        why = f"its locality is {gs.locality.value} now ({gs.locality_from})"
    elif any(m.via.local and m.ready for m in gs.members):
        why = "a local member is ready again: only the local cluster answers its name"
    else:
        why = "no other cluster has a ready member either"
    return Told(Notice.LOCALITY_LOCAL, f"{name}: no longer answers beyond the local cluster: "
                + why)


def unknown_annotation(key: tuple[str, str], annotation: LocalityAnnotation,
                       flag: str) -> Told:
    """The warning for a ``dnsside.io/locality`` value dnsside does not know, once per
    Service and value."""
    return Told(Notice.LOCALITY_UNKNOWN, (
        "Service {}/{}: annotation dnsside.io/locality={!r} is neither all nor local-first: "
        "--locality {} applies to it".format(*key, annotation.written, flag)))


__all__ = ["LocalityReport", "Spill", "answering", "describe", "moved", "spill",
           "unknown_annotation"]
