"""A watch line decoded: its event, and what the resource's parser makes of its object.

Kept apart from the reflector because it is the one piece of a watch that may run in a
worker thread: a linked cluster may send 1 MB lines (a 12,000-endpoint slice) as fast as
it likes, and their JSON and parsing, 40-80 ms each, must not hold the event loop. What
runs here is pure (json, and the model's parsers, which read nothing but their
arguments), so nothing is shared with the loop but the result. A thread alone would not
do: ``json.loads`` holds the GIL for the whole line, so a long one is decoded in short
calls (:mod:`dnsside.sources.jsonpieces`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dnsside.model.linkerd import ObjectError, Record
from dnsside.sources import jsonpieces
from dnsside.sources.gcoff import paused

OFF_LOOP_BYTES = 64 * 1024  # a watch line longer than this is decoded in a worker thread


@dataclass(frozen=True, slots=True)
class ParsedRecord:
    """What the resource's parser made of an event's object (None: not one to keep)."""

    record: Record | None


Parsed = ParsedRecord | ObjectError


Parser = Callable[[Mapping[str, Any], str], Record | None]


def load_long_event(parser: Parser, line: bytes, where: str) -> tuple[Any, Parsed | None]:
    """:func:`load_event` of a long line, run in a worker thread, with the cyclic
    collector off meanwhile: the decoded JSON of a 12,000-endpoint slice is some 36,000
    dicts and lists that live only until it is parsed, and young collections while
    they live would move them to the oldest generation, whose growth is what brings
    the collector's full pass, a stall of every query, sooner (issue 33 item 12)."""
    with paused():
        return load_event(parser, line, where)


def load_event(parser: Parser, line: bytes, where: str, parse: bool = True
               ) -> tuple[Any, Parsed | None]:
    """A watch line's event (or the ValueError of a line that is not JSON) and, with
    ``parse``, what ``parser`` makes of an ADDED or MODIFIED object. Pure: it runs
    in a worker thread for long lines, which are decoded in short calls; the parsers
    read nothing but their arguments."""
    try:
        event = (jsonpieces.loads(line.decode()) if len(line) > OFF_LOOP_BYTES
                 else json.loads(line))
    except ValueError as exc:  # UnicodeDecodeError included
        return exc, None
    except RecursionError:
        return ValueError("nested too deeply"), None
    if not parse or not isinstance(event, Mapping) or event.get("type") not in (
            "ADDED", "MODIFIED"):
        return event, None
    obj = event.get("object")
    if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
        return event, None
    try:
        return event, ParsedRecord(parser(obj, where))
    except ObjectError as exc:
        return event, exc
