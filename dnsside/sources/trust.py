"""Whose API server a reflector reads: the few points where that changes what it does.

The reflector (:mod:`dnsside.sources.reflector`) lists, watches, resumes and relists
the same way for every API server. What differs is asked of its :class:`Trust`, at a
handful of decision points: how long a list or one watch event may take and how many
bytes a page or a line may hold; whether a listed object or a watch event is kept;
what is said of an object that cannot be used or an event that means nothing; which
failures a list gives up on instead of retrying; how its log lines and metric labels
name the server, and how its events reach the index.

Two kinds of server, so two trusts. The local API server is :class:`Trusted`: nothing
capped, every object kept, a failure retried until it works, events handed on at once.
A linked cluster's (``--flat-network``) is read through its
:class:`~dnsside.sources.limits.Gate`: its caps, its namespaces, its event budget, its
events wrapped as that cluster's. So the reflector's loops hold no branch on whose API
they read, and everything a linked cluster changes is in one class.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from dnsside.model.events import Delete, Event, Kind, Upsert
from dnsside.model.linkerd import Record
from dnsside.model.printable import printable

log = logging.getLogger("dnsside.kube")

Change = Upsert | Delete
# Why a watch event or list item is ignored (Trust.ignored): for a linked cluster, the
# values of dnsside_remote_ignored_objects_total's reason label (with "invalid" and
# "namespace", the Gate's own).
UNKNOWN_TYPE, NO_NAME, NOT_OBJECT = "unknown-type", "no-name", "not-object"
Put = Callable[[Sequence[Event]], Awaitable[None]]


class Listing(Protocol):
    """One list of one resource (every namespace, every page), as it is read."""

    def keep(self, record: Record, where: str) -> bool:
        """Whether a listed object counts (raises CapExceeded past a cap)."""
        ...

    def forget(self, records: Sequence[Record]) -> None:
        """These were listed, but are listed again (a continue token expired)."""
        ...

    def complete(self) -> None:
        """The list is complete: it is what the server holds now."""
        ...


class Trust(Protocol):
    """What a reflector asks at its decision points (see the module's docstring)."""

    @property
    def label(self) -> str:
        """What log lines and metric labels start with: "" or ``"cluster west: "``."""
        ...

    @property
    def retry_level(self) -> int:
        """How a failed request that is retried is logged."""
        ...

    @property
    def time_cap(self) -> float | None:
        """Seconds one list (all its pages) and one watch event may take (None: no cap)."""
        ...

    @property
    def page_bytes(self) -> int | None:
        """Bytes one list page may hold (None: no cap)."""
        ...

    @property
    def line_bytes(self) -> int | None:
        """Bytes one watch line may hold (None: no cap)."""
        ...

    def gives_up(self, exc: Exception) -> bool:
        """Whether a list is given up on this failure (raised) instead of retried."""
        ...

    def overdue(self, what: str) -> Exception:
        """What to raise when ``what`` (a list, a watch event) took longer than time_cap."""
        ...

    def wrap(self, batch: Sequence[Event]) -> list[Event]:
        """The batch as the index is to see it."""
        ...

    def listing(self, kind: Kind) -> Listing:
        """A fresh count for a list of ``kind``."""
        ...

    def admits(self, kind: Kind, change: Change, where: str) -> bool:
        """Whether a watch event counts (raises CapExceeded past a cap)."""
        ...

    def refused(self, where: str, message: str, note: str = "") -> None:
        """An object that cannot be used (malformed): said, but not once per event."""
        ...

    def ignored(self, where: str, reason: str, what: str) -> None:
        """A watch event or list item that means nothing: said once per ``reason``."""
        ...

    async def deliver(self, changes: list[Change], lines: int, put: Put) -> None:
        """Hand on the changes of ``lines`` watch lines (``put`` puts a batch on the
        index's queue); return once the stream may be read on."""
        ...

    def superseded(self, kinds: Iterable[Kind]) -> None:
        """A complete list of ``kinds`` follows: anything held of them is older."""
        ...


class _KeepAll:
    """The local API's lists: every object counts."""

    def keep(self, record: Record, where: str) -> bool:
        return True

    def forget(self, records: Sequence[Record]) -> None:
        pass

    def complete(self) -> None:
        pass


_KEEP_ALL = _KeepAll()


class Trusted:
    """The local API server (SPEC §3d: trusted): nothing capped, every object kept, every
    failure of a list retried, events handed on at once. What it says of an event that
    means nothing is told once per reason (it has no metric of its own)."""

    label = ""
    retry_level = logging.WARNING
    time_cap: float | None = None
    page_bytes: int | None = None
    line_bytes: int | None = None

    def __init__(self) -> None:
        self._told: set[str] = set()  # reasons of ignored events, told once each

    def gives_up(self, exc: Exception) -> bool:
        return False

    def overdue(self, what: str) -> Exception:
        return TimeoutError(what)  # (no time cap: never asked)

    def wrap(self, batch: Sequence[Event]) -> list[Event]:
        return batch if isinstance(batch, list) else list(batch)

    def listing(self, kind: Kind) -> Listing:
        return _KEEP_ALL

    def admits(self, kind: Kind, change: Change, where: str) -> bool:
        return True

    def refused(self, where: str, message: str, note: str = "") -> None:
        # Its mirrored objects' names are a linked cluster's writing: escaped.
        log.warning("skipping %s%s", printable(message), note)

    def ignored(self, where: str, reason: str, what: str) -> None:
        if reason not in self._told:
            self._told.add(reason)
            log.warning("%s: skipping %s (told once)", where, printable(what))

    async def deliver(self, changes: list[Change], lines: int, put: Put) -> None:
        if changes:
            await put(changes)

    def superseded(self, kinds: Iterable[Kind]) -> None:
        pass


__all__ = ["NOT_OBJECT", "NO_NAME", "UNKNOWN_TYPE", "Change", "Listing", "Put", "Trust", "Trusted"]
