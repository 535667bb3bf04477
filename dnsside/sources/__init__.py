"""Sources turn the outside world (a file, the API server) into index events.

A source is an object with ``async def events(self) -> AsyncIterator[list[Event]]``:
each yielded list is applied to the index as one batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from dnsside.model.events import Event


class Source(Protocol):
    name: str

    def events(self) -> AsyncIterator[list[Event]]: ...
