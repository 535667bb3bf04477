"""Work done in steps: a generator that yields between two steps and returns its result.

A change to a big global service (12,000 endpoints, every address moved) is a few tens
of milliseconds of pure Python; done at once, it is one stretch of the event loop that
every query waits behind. So the index's rebuild of a big service is written as a
generator (:data:`Steps`): it yields wherever it may be paused, every :data:`STEP`
items of a pass over the members, and returns what the plain function would. The
serving side runs the steps with the event loop free between two; everything else
(tests, ``explain``, a relist) runs them all at once with :func:`finish`.

The subtle point is what may be seen between two steps: nothing. A rebuild computes
its new answers aside and writes the responder's tables in its last step (C-level
dict operations, about a millisecond for 24,000 answers), so a query sees a service
as it was or as it is, never half of it. That holds only if nothing else changes
the index between two steps of one rebuild: the caller applies one batch at a time
(:class:`dnsside.core.index.Index` refuses another meanwhile).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# A pass over the members yields after this many: about a millisecond of Python.
STEP = 2000

Steps = Generator[None, None, T]


def finish(steps: Steps[T]) -> T:
    """Run every step at once; what the steps return."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def let_go(things: Iterable[dict[Any, Any] | list[Any]]) -> Steps[None]:
    """Empty each of ``things``, :data:`STEP` entries a step: what a rebuild of 12,000
    members replaced is as many objects to free, a few milliseconds at once."""
    for thing in things:
        while thing:
            if isinstance(thing, dict):
                for _ in range(min(STEP, len(thing))):
                    thing.popitem()
            else:
                del thing[-STEP:]
            yield


def chunks(items: Sequence[T], size: int = STEP) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most ``size`` (none for no items)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


__all__ = ["STEP", "Steps", "chunks", "finish", "let_go"]
