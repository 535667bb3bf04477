"""A slice's endpoints, packed into one string.

Kept apart from :mod:`dnsside.model.linkerd` (which parses the objects) because the
packing is its own small protocol: endpoints joined by ``\x1e``, fields by
``\x1f``, three flag characters first. A name holding a separator cannot be
packed, and stays a tuple of :class:`Endpoint`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[str, ...]
    ready: bool
    hostname: str | None
    pod_name: str | None  # targetRef.name when targetRef.kind is Pod


class Endpoints(Sequence[Endpoint]):
    """A slice's endpoints packed into one string, decoded when read.

    Only the endpoints of a local headless Service's slices are ever read one by
    one (they become its members); every other slice is asked only whether one of
    its endpoints is ready. Yet a slice holds one endpoint per pod (a root headless
    mirror's slice one per remote pod), and as objects they would be the index's
    biggest cost (bench/memory-figures.md). Packed they take their text and
    nothing else. Equal packings compare and hash equal, so identical ones (a
    per-pod mirror's gateway endpoint) are shared.
    """

    __slots__ = ("_packed", "ready")

    def __init__(self, packed: str, ready: bool) -> None:
        self._packed = packed
        self.ready = ready  # any endpoint is ready

    @staticmethod
    def pack(endpoints: Sequence[Endpoint]) -> Endpoints | tuple[Endpoint, ...]:
        """Packed, unless a name holds a separator (a malformed one): then the tuple."""
        packed = pack_rows([(e.addresses, e.ready, e.hostname, e.pod_name) for e in endpoints])
        return tuple(endpoints) if packed is None else packed

    def pieces(self) -> list[str]:
        """Each endpoint still packed, in order: equal pieces are equal endpoints, so a
        caller can tell which endpoints of a slice changed without decoding the others."""
        return self._packed.split(_ENDPOINT) if self._packed else []

    @staticmethod
    def unpack(piece: str) -> Endpoint:
        """One piece of :meth:`pieces` as the endpoint it is."""
        flags, hostname, pod_name, *addresses = piece.split(_FIELD)
        return Endpoint(tuple(addresses), flags[0] == "r",
                        hostname if flags[1] == "h" else None,
                        pod_name if flags[2] == "p" else None)

    def _decode(self) -> list[Endpoint]:
        return [self.unpack(piece) for piece in self.pieces()]

    def __iter__(self) -> Iterator[Endpoint]:
        return iter(self._decode())

    def __len__(self) -> int:
        return self._packed.count(_ENDPOINT) + 1 if self._packed else 0

    def __getitem__(self, i: Any) -> Any:
        return self._decode()[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Endpoints):
            return self._packed == other._packed
        # The length first: an emptied slice's endpoints are a tuple, and a slice of
        # 12,000 compared with it must not be decoded to be found different.
        return (isinstance(other, Sequence) and len(self) == len(other)
                and tuple(self) == tuple(other))

    def __hash__(self) -> int:
        return hash(self._packed)

    def __repr__(self) -> str:
        return repr(tuple(self))


_ENDPOINT, _FIELD = "\x1e", "\x1f"
# An endpoint as the parser reads it: (addresses, ready, hostname, pod name).
EndpointRow = tuple[tuple[str, ...], bool, str | None, str | None]


def pack_rows(rows: Sequence[EndpointRow]) -> Endpoints | None:
    """Endpoints packed; None when a name holds a separator (addresses, normalised IP
    addresses, cannot)."""
    pieces = []
    any_ready = False
    for addresses, ready, hostname, pod_name in rows:
        if hostname is not None and (_FIELD in hostname or _ENDPOINT in hostname):
            return None
        if pod_name is not None and (_FIELD in pod_name or _ENDPOINT in pod_name):
            return None
        any_ready = any_ready or ready
        pieces.append(_FIELD.join((_FLAGS[ready, hostname is not None, pod_name is not None],
                                   hostname or "", pod_name or "", *addresses)))
    return Endpoints(_ENDPOINT.join(pieces), any_ready)

_FLAGS = {(r, h, p): ("r" if r else "-") + ("h" if h else "-") + ("p" if p else "-")
          for r in (False, True) for h in (False, True) for p in (False, True)}
