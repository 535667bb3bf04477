"""JSON decoded a piece at a time, so that a thread decoding a long line lets the event
loop run meanwhile.

The subtle point is the GIL. A 1 MB watch line (a 12,000-endpoint slice) takes
``json.loads`` 20-50 ms, and it takes them in one call into C that never lets go of the
interpreter: moving it to a worker thread moved nothing, the event loop waited just the
same (issue 33 item 12). :func:`loads` gives the same value: it walks the objects
itself and decodes every array element with one short call (an endpoint, a port, a few
microseconds), and between two calls the interpreter hands the loop its turn every
switch interval.

Rules: the result equals ``json.loads`` of the same text, a duplicate key keeping its
last value; what ``json.loads`` refuses raises :class:`ValueError` here too (with the
position); the walk goes :data:`MAX_WALKED` objects deep at most, below which a value is
decoded whole, so no hostile nesting can make it recurse deeper than that.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_WALKED = 8  # objects walked into, one inside the other; deeper ones are decoded whole

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def loads(text: str) -> Any:
    """``json.loads(text)``, in short calls (see the module's rules)."""
    try:
        value, end = _value(text, _skip(text, 0), 0)
    except IndexError:
        raise json.JSONDecodeError("Expecting value", text, len(text)) from None
    end = _skip(text, end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _skip(text: str, at: int) -> int:
    """Where the spaces from ``at`` on end."""
    space = _SPACE.match(text, at)
    return space.end() if space is not None else at


def _value(text: str, at: int, depth: int) -> tuple[Any, int]:
    """The value starting at ``at`` (no space before it) and where it ends."""
    first = text[at]
    if first == "{" and depth < MAX_WALKED:
        return _object(text, at + 1, depth + 1)
    if first == "[":
        return _array(text, at + 1)
    return _DECODER.raw_decode(text, at)


def _object(text: str, at: int, depth: int) -> tuple[dict[str, Any], int]:
    """The object whose ``{`` ends at ``at``: its keys here, its values walked."""
    found: dict[str, Any] = {}
    at = _skip(text, at)
    if text[at] == "}":
        return found, at + 1
    while True:
        if text[at] != '"':
            raise json.JSONDecodeError(
                "Expecting property name enclosed in double quotes", text, at)
        key, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text[at] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, at)
        at = _skip(text, at + 1)
        found[key], at = _value(text, at, depth)
        end, at = _go_on(text, at, "}")
        if end:
            return found, at


def _array(text: str, at: int) -> tuple[list[Any], int]:
    """The array whose ``[`` ends at ``at``: each element decoded whole, one call each."""
    found: list[Any] = []
    at = _skip(text, at)
    if text[at] == "]":
        return found, at + 1
    while True:
        item, at = _DECODER.raw_decode(text, at)
        found.append(item)
        end, at = _go_on(text, at, "]")
        if end:
            return found, at


def _go_on(text: str, at: int, close: str) -> tuple[bool, int]:
    """After an item of an object or array: (True, past ``close``) at its end, else
    (False, where the next item starts, past the comma)."""
    at = _skip(text, at)
    if text[at] == close:
        return True, at + 1
    if text[at] != ",":
        raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
    return False, _skip(text, at + 1)
