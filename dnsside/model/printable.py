"""Text another party wrote, made safe for a log line, ``explain`` or a metric label.

A linked cluster's API server (and whoever writes the objects Linkerd mirrors from it)
chooses the bytes of its Status messages, reasons, object names and error texts. Written
as they come, a newline in one starts a line of dnsside's log that looks like dnsside's
own (``... WARNING dnsside.index: cluster west: Secret rotated, use https://evil...``),
and an escape sequence rewrites an operator's terminal. So every such string goes
through :func:`printable` before it reaches a log line, ``explain`` or a label, as
Kubernetes escapes control characters in what it logs: each character that is not
printable (control characters, line and paragraph separators, format characters such as
bidirectional overrides) is written as its Python escape (``\\n``, ``\\x1b``,
``\\u2028``), and a text longer than ``limit`` characters is cut, saying how much was.

The subtle point: escaping is done where the text is *made* into dnsside's words (an
error, a detail, a refusal), once, so that every sink downstream gets escaped text; the
common case (printable ASCII, short) returns the string itself without copying.
"""

from __future__ import annotations

DEFAULT_LIMIT = 512  # characters: a Status message is a sentence, an object name 253


def printable(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` with every non-printable character escaped, cut at ``limit`` characters."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > limit:
        return f"{text[:limit]}…({len(text) - limit} more characters)"
    return text


__all__ = ["DEFAULT_LIMIT", "printable"]
