"""Sources turn the outside world (a file, the API server) into index events.

A source is an object with ``async def events(self) -> AsyncIterator[list[Event]]``:
each yielded list is applied to the index as one batch.

Every source keeps one rule: no fault makes the answers wider or emptier than what was
learnt. The first answers wait for one complete list of everything (a ``Replace`` and
``Synced``); a later full list reaches the index as one ``Replace``, diffed and swapped in
at once; an error is reported (``SourceError``, a state event), never turned into
deletions. What was learnt stands until a newer complete list replaces it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from dnsside.model.events import Event


class Source(Protocol):
    name: str

    def events(self) -> AsyncIterator[list[Event]]: ...
