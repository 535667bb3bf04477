"""What repeats across thousands of parsed objects, kept once: shared values, and checks
remembered instead of done again.

At 100k members the same few values recur everywhere (a few dozen port lists, one
gateway endpoint per link and readiness, a few hundred namespace, service and cluster
names), so the parser shares them rather than copying them, which halves the memory
records take, and remembers which labels it has already checked.

Every cache here must stay small however the cluster churns:
objects re-created under ever-new names (pod IPs, service names) must not keep tens of
thousands of entries alive long after the objects went (bench/MEMORY_CHURN.md). So each
cache is emptied when it reaches :data:`SHARED_MAX`, and the shared values are pruned
as they go: emptied only when full, the cache kept every value it ever saw until then (a
slice's lone endpoint changing address added an entry per change that no record used
any more). Every :data:`_PRUNE_EVERY` new values, the ones no record holds any more go:
what the cache keeps is what live records share.
"""

from __future__ import annotations

import sys
from typing import Any, TypeVar

from dnsside.dns.names import is_dns_label

SHARED_MAX = 4096  # entries in any one cache
_PRUNE_EVERY = 128

_shared: dict[object, object] = {}
_added = 0
T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


def share(value: T) -> T:
    """The one copy of ``value`` (hashable, immutable) the records hold."""
    global _added
    found = _shared.get(value)
    if found is not None:
        return found  # type: ignore[return-value]
    _added += 1
    if _added >= _PRUNE_EVERY:
        _added = 0
        _prune()
    if len(_shared) >= SHARED_MAX:
        _shared.clear()
    _shared[value] = value
    return value


def _prune() -> None:
    """Drop the shared values nothing but the cache holds: its key and value (one object),
    the list below and getrefcount's argument are four references."""
    for value in [v for v in _shared.values() if sys.getrefcount(v) <= 4]:
        del _shared[value]


class Memo(dict[K, V]):
    """A dict of results emptied when it reaches :data:`SHARED_MAX` entries (``get`` is
    the dict's own, in C: it is asked once per object parsed)."""

    __slots__ = ()

    def __init__(self, name: str) -> None:
        super().__init__()
        _memos[name] = self

    def put(self, key: K, value: V) -> V:
        if len(self) >= SHARED_MAX:
            self.clear()
        self[key] = value
        return value


# Labels already found to be DNS labels: namespaces, clusters and services repeat
# thousands of times (the services of a cluster fit). Hostnames, one per pod, are not
# worth it: the caller checks them every time.
_good_labels: set[str] = set()


def is_label(value: str) -> bool:
    """:func:`dnsside.dns.names.is_dns_label`, remembered for the values that pass."""
    if value in _good_labels:
        return True
    if not is_dns_label(value):
        return False
    if len(_good_labels) >= SHARED_MAX:
        _good_labels.clear()
    _good_labels.add(value)
    return True


_memos: dict[str, Memo[Any, Any]] = {}


def sizes() -> dict[str, int]:
    """How many entries each cache holds, by name (a test reads them)."""
    return {"shared": len(_shared), "labels": len(_good_labels),
            **{name: len(memo) for name, memo in _memos.items()}}
