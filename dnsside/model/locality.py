"""Locality's vocabulary: which clusters a global service's own name answers.

``--locality`` sets it for every service, the ``dnsside.io/locality`` annotation of the
local Service for one (read by :mod:`dnsside.model.linkerd`, the only module that knows
the objects; what it means for the answers is :mod:`dnsside.core.locality`). An
annotation value dnsside does not know is kept as written, cut short, so the warning can
name it; the flag then applies.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Locality(enum.StrEnum):
    """Which clusters a global service's own name answers."""

    ALL = "all"  # every cluster's ready members
    LOCAL_FIRST = "local-first"  # the local cluster's while it has a ready one, else all


@dataclass(frozen=True, slots=True)
class LocalityAnnotation:
    """A local Service's ``dnsside.io/locality``: the value when it is one dnsside knows
    (``value`` None otherwise), and as written, for the warning that names it."""

    value: Locality | None
    written: str


# The good values, shared by every Service that carries one.
_KNOWN = {v.value: LocalityAnnotation(v, v.value) for v in Locality}
_WRITTEN_MAX = 64  # of an unknown value, what a warning repeats


def parse_locality(written: str) -> LocalityAnnotation:
    """``dnsside.io/locality`` as written: ``all`` or ``local-first`` (case and surrounding
    blanks aside), else an unknown value kept, cut short, for the warning."""
    known = _KNOWN.get(written.strip().lower())
    if known is not None:
        return known
    shown = written if len(written) <= _WRITTEN_MAX else written[:_WRITTEN_MAX] + "..."
    return LocalityAnnotation(None, shown)


__all__ = ["Locality", "LocalityAnnotation", "parse_locality"]
