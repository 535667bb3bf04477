"""The index's tables: dicts shaped for hundreds of thousands of small entries.

Memory matters here more than speed: at 100k members the index keeps
three tables of about 92k entries each, and the names under one key (the mirrors
of a global service, the slices of a Service) are usually a handful, so both
are stored in the cheapest shape that still answers in constant time.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, Generic, Protocol, TypeVar

Key = tuple[str, str]  # (namespace, name)
V = TypeVar("V")
_MISSING: Any = object()


class Table(MutableMapping[Key, V]):
    """A dict keyed by (namespace, name), held as one dict per namespace.

    A flat dict would hold a (namespace, name) tuple per entry, for each of three
    tables as large as the cluster (bench/memory-figures.md). Here an entry is
    keyed by the name string its record already holds.
    """

    __slots__ = ("_by_namespace", "_len")

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, V]] = {}
        self._len = 0

    def __getitem__(self, key: Key) -> V:
        return self._by_namespace[key[0]][key[1]]

    def get(self, key: Key, default: Any = None) -> Any:
        names = self._by_namespace.get(key[0])
        return default if names is None else names.get(key[1], default)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        names = self._by_namespace.get(key[0])
        return names is not None and key[1] in names

    def __setitem__(self, key: Key, value: V) -> None:
        namespace, name = key
        names = self._by_namespace.get(namespace)
        if names is None:
            names = self._by_namespace[namespace] = {}
        if name not in names:
            self._len += 1
        names[name] = value

    def __delitem__(self, key: Key) -> None:
        namespace, name = key
        names = self._by_namespace[namespace]
        del names[name]
        self._len -= 1
        if not names:
            del self._by_namespace[namespace]

    def pop(self, key: Key, default: Any = _MISSING) -> Any:
        names = self._by_namespace.get(key[0])
        if names is None or key[1] not in names:
            if default is _MISSING:
                raise KeyError(key)
            return default
        value = names[key[1]]
        self.__delitem__(key)
        return value

    def __iter__(self) -> Iterator[Key]:
        for namespace, names in self._by_namespace.items():
            for name in names:
                yield (namespace, name)

    def __len__(self) -> int:
        return self._len

    def records(self) -> Iterator[V]:
        """The values, without building a key for each."""
        for names in self._by_namespace.values():
            yield from names.values()


# The names under one key (mirrors of a global service, slices of a Service): usually
# a few, so a tuple (a set costs four times as much); a set past this many, so that
# adding the 1000th mirror of one service is not a copy of the other 999.
_SMALL = 32
Names = tuple[str, ...] | set[str]


def names_with(names: Names | None, name: str) -> Names:
    if names is None:
        return (name,)
    if isinstance(names, set):
        names.add(name)
        return names
    if name in names:
        return names
    return {*names, name} if len(names) >= _SMALL else (*names, name)


def names_without(names: Names, name: str) -> Names | None:
    if isinstance(names, set):
        names.discard(name)
        return names or None
    return tuple(n for n in names if n != name) or None


def add_name(groups: MutableMapping[Key, Names], key: Key, name: str) -> None:
    """``name`` among the names under ``key``."""
    groups[key] = names_with(groups.get(key), name)


def remove_name(groups: MutableMapping[Key, Names], key: Key, name: str) -> None:
    """``name`` no longer under ``key`` (the key goes with its last name)."""
    names = groups.get(key)
    if names is None:
        return
    rest = names_without(names, name)
    if rest is None:
        del groups[key]
    else:
        groups[key] = rest


class _Sliced(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def service_name(self) -> str: ...


S = TypeVar("S", bound=_Sliced)


class Slices(Generic[S]):
    """EndpointSlices by key, and the names of each Service's slices: what the index keeps
    for the local cluster and for every linked cluster watched directly."""

    __slots__ = ("by_service", "records")

    def __init__(self) -> None:
        self.records: Table[S] = Table()
        self.by_service: Table[Names] = Table()

    def put(self, record: S) -> S | None:
        """Hold ``record`` in place of the slice of its key; the one it replaced."""
        old = self.pop((record.namespace, record.name))
        self.records[(record.namespace, record.name)] = record
        add_name(self.by_service, (record.namespace, record.service_name), record.name)
        return old

    def pop(self, key: Key) -> S | None:
        old: S | None = self.records.pop(key, None)
        if old is not None:
            remove_name(self.by_service, (old.namespace, old.service_name), old.name)
        return old

    def of(self, namespace: str, service: str) -> list[S]:
        """The slices of Service ``namespace/service``, by name."""
        names = self.by_service.get((namespace, service), ())
        return [self.records[(namespace, n)] for n in sorted(names)]
