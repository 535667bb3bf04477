"""Serve a dump of Services, EndpointSlices and Links from a file, reloading it when it changes.

The file is what ``kubectl get services,endpointslices,links.multicluster.linkerd.io -A
-o yaml`` (or ``-o json``) prints: a ``List``, or several YAML documents, each an
object or a list. A dump without any Link was taken without them: then no mirror
is called an orphan.

"Keep the previous state" needs care for a file that is only partly broken. A file that
cannot be read or parsed at all changes nothing. A file that parses but holds some bad
objects still updates everything else; each bad object keeps the record it had before
(when its kind, namespace and name can be read), so a typo in one Service never makes it
vanish.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from dnsside.model.events import (
    Event,
    Kind,
    LinksUnavailable,
    Replace,
    SourceError,
    Synced,
)
from dnsside.model.linkerd import (
    LinkRecord,
    ObjectError,
    Record,
    ServiceRecord,
    parse_object,
)
from dnsside.sources.gcoff import paused
from dnsside.telemetry import metrics

log = logging.getLogger("dnsside.file")

_KINDS = frozenset({Kind.SERVICE, Kind.SLICE})
_WITH_LINKS = _KINDS | {Kind.LINK}
NO_LINKS = ("the file has no Link objects (dump it with `kubectl get services,endpointslices,"
            "links.multicluster.linkerd.io -A -o yaml` to have them)")


class FileSourceError(Exception):
    """The file cannot be used at all: the message says which file and why."""


def read_objects(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, object) for every item in the file, lazily. Raises FileSourceError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileSourceError(f"{path}: no such file") from None
    except OSError as exc:
        raise FileSourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FileSourceError(f"{path}: not UTF-8 text: {exc}") from None
    try:
        if text.lstrip().startswith(("{", "[")):
            yield from _json_items(text, str(path))
        else:
            docs = list(yaml.load_all(text, Loader=_YAML_LOADER))
            yield from _items(docs, str(path))
    except json.JSONDecodeError as exc:
        raise FileSourceError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise FileSourceError(f"{at}: invalid YAML: {problem}") from None


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it
_WS = re.compile(r"[ \t\n\r]*")


def _json_items(text: str, where: str) -> Iterator[tuple[str, Any]]:
    """The items of a JSON ``List`` one at a time; any other JSON document whole.

    A large dump decoded at once is every object alive together as dicts, and the
    heap never gives that memory back; decoding item by item (the C decoder on each)
    keeps one object alive at a time while it becomes a slim record.
    """
    decoder = json.JSONDecoder()

    def skip(j: int, *, after: str = "") -> int:
        j = _WS.match(text, j).end()  # type: ignore[union-attr]
        if after:
            if not text.startswith(after, j):
                raise json.JSONDecodeError(f"Expecting {after!r}", text, j)
            j = _WS.match(text, j + 1).end()  # type: ignore[union-attr]
        return j

    def separator(j: int, close: str) -> int:
        """After a value: a comma and more to come, or ``close``. Where the next value starts."""
        j = skip(j)
        if text.startswith(",", j):
            j = skip(j + 1)
            if text.startswith(close, j):
                raise json.JSONDecodeError("Trailing comma", text, j)
        elif not text.startswith(close, j):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, j)
        return j

    i = skip(0)
    if not text.startswith("{", i):
        yield from _items([json.loads(text)], where)
        return
    top: dict[str, Any] = {}
    streamed = False
    j = skip(i + 1)
    while not text.startswith("}", j):
        key, j = decoder.raw_decode(text, j)
        if not isinstance(key, str):
            raise json.JSONDecodeError("Expecting property name", text, j)
        j = skip(j, after=":")
        if key == "items" and text.startswith("[", j):
            streamed, n = True, 0
            j = skip(j + 1)
            while not text.startswith("]", j):
                item, j = decoder.raw_decode(text, j)
                yield f"{where} items[{n}]", item
                n += 1
                j = separator(j, "]")
            j += 1
        else:
            top[key], j = decoder.raw_decode(text, j)
        j = separator(j, "}")
    if skip(j + 1) != len(text):
        raise json.JSONDecodeError("Extra data", text, skip(j + 1))
    if not streamed:
        yield from _items([top], where)


def _items(docs: list[Any], where: str) -> Iterator[tuple[str, Any]]:
    for d, doc in enumerate(docs):
        at = f"{where} document {d + 1}" if len(docs) > 1 else where
        if doc is None:
            continue
        if isinstance(doc, list):
            yield from ((f"{at} item {i + 1}", o) for i, o in enumerate(doc))
        elif isinstance(doc, Mapping) and isinstance(doc.get("items"), list):
            yield from ((f"{at} items[{i}]", o) for i, o in enumerate(doc["items"]))
        else:
            yield at, doc


def _identity(obj: Any) -> tuple[Kind, str, str] | None:
    if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
        return None
    kinds = {"Service": Kind.SERVICE, "EndpointSlice": Kind.SLICE, "Link": Kind.LINK}
    kind = kinds.get(obj.get("kind", ""))
    ns, name = obj["metadata"].get("namespace"), obj["metadata"].get("name")
    if kind is None or not isinstance(ns, str) or not isinstance(name, str):
        return None
    return kind, ns, name


def load_records(
    path: Path,
    namespaces: frozenset[str] = frozenset(),
    previous: Mapping[tuple[Kind, str, str], Record] | None = None,
) -> tuple[list[Record], list[str]]:
    """Records from the file, and a warning per object skipped. Raises FileSourceError."""
    records: list[Record] = []
    warnings: list[str] = []
    unknown: dict[str, int] = {}
    for where, obj in read_objects(path):
        try:
            record = parse_object(obj, where)
        except ObjectError as exc:
            ident = _identity(obj)
            kept = previous.get(ident) if previous is not None and ident else None
            warnings.append(f"{exc}; {'kept its previous version' if kept else 'skipped'}")
            if kept is not None and _wanted(kept, namespaces):
                records.append(kept)
            continue
        if record is None:
            kind = obj.get("kind") if isinstance(obj, Mapping) else None
            unknown[str(kind)] = unknown.get(str(kind), 0) + 1
            continue
        if _wanted(record, namespaces):
            records.append(record)
    for kind, n in unknown.items():
        warnings.append(f"{path}: ignored {n} object(s) of kind {kind} (only Service, "
                        "EndpointSlice and Link are read)")
    return records, warnings


def _wanted(record: Record, namespaces: frozenset[str]) -> bool:
    """Links count wherever they live (usually linkerd-multicluster), like on the API."""
    return not namespaces or record.namespace in namespaces or isinstance(record, LinkRecord)


class FileSource:
    name = "file"

    def __init__(
        self, path: str | os.PathLike[str], namespaces: frozenset[str] = frozenset(),
        poll_interval: float = 1.0,
    ) -> None:
        self.path = Path(path)
        self.namespaces = namespaces
        self.poll_interval = poll_interval
        self._records: dict[tuple[Kind, str, str], Record] = {}

    def check(self) -> None:
        """Fail fast, before binding sockets, when the file is missing or unreadable.
        (A file that does not parse fails the first load, which is just as fatal.)"""
        if not self.path.is_file():
            raise FileSourceError(f"{self.path}: no such file")
        try:
            self.path.open("rb").close()
        except OSError as exc:
            raise FileSourceError(f"{self.path}: cannot read: {exc.strerror or exc}") from None

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _load(self) -> list[Event]:
        with paused():  # records that live on: the index collects, then freezes them
            records, warnings = load_records(self.path, self.namespaces, self._records)
            self._records = {(Kind.of(r), r.namespace, r.name): r for r in records}
        for w in warnings:
            log.warning("%s", w)
        if not any(isinstance(r, ServiceRecord) for r in records):
            log.warning("%s: no Service in it could be used: the zones stay empty until it "
                        "holds one (`kubectl get services,endpointslices,"
                        "links.multicluster.linkerd.io -A -o yaml` writes such a file)", self.path)
        # One Link in the dump means the dump has them all; none means it was taken
        # without them, and then nothing can be called an orphan.
        if any(isinstance(r, LinkRecord) for r in records):
            return [Replace(_WITH_LINKS, tuple(records))]
        return [Replace(_KINDS, tuple(records)), LinksUnavailable(NO_LINKS)]

    async def events(self) -> AsyncIterator[list[Event]]:
        stamp = self._stamp()
        batch = self._load()  # errors here propagate: a file unusable at start is fatal
        log.info("loaded %s: %d objects", self.path, len(self._records))
        yield [*batch, Synced()]
        while True:
            await asyncio.sleep(self.poll_interval)
            now = self._stamp()
            if now == stamp:
                continue
            stamp = now
            try:
                batch = self._load()
            except FileSourceError as exc:
                metrics.RELOAD_ERRORS.inc()
                log.error("reload failed, still serving the previous state: %s", exc)
                yield [SourceError(str(exc))]
                continue
            log.info("reloaded %s: %d objects", self.path, len(self._records))
            yield batch
