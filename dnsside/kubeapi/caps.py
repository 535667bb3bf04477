"""The caps on what a linked cluster's API server may send (``--flat-network``).

The client applies the byte caps while it reads (one watch line, one list page, an
error body); ``dnsside.sources.limits`` counts endpoints and objects against the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

# The caps, as dnsside_remote_cap_hits_total{cap} and RemoteStatus.cap name them.
ENDPOINTS, OBJECTS, BYTES, TIME = "endpoints", "objects", "bytes", "time"
CAPS = (ENDPOINTS, OBJECTS, BYTES, TIME)
# A list page may be this many times one object's cap: a page of Pacing.page_size (500)
# objects that is larger is asked again with half as many (Reflector.page), so this only
# bounds what one page costs to read and decode (JSON decodes to up to ~20 times its size
# in Python objects, for a hostile page of empty objects; about 5 for real ones).
PAGE_FACTOR = 2
ERROR_BODY_BYTES = 64 * 1024  # a Status body is a few hundred bytes


class CapExceeded(ValueError):
    """A linked cluster's API sent more than a cap allows (``cap`` says which)."""

    def __init__(self, cap: str, message: str) -> None:
        super().__init__(message)
        self.cap = cap


@dataclass(frozen=True, slots=True)
class Limits:
    """The caps of one linked cluster (the flags' values)."""

    max_endpoints: int = 100_000  # endpoints kept, in every slice of the cluster
    max_objects: int = 50_000  # Services and EndpointSlices (or Endpoints) kept
    max_object_bytes: int = 2 * 1024 * 1024  # one watch line (one object and its envelope)
    timeout: float = 120.0  # one list (all its pages), one watch event (first byte to last)
    namespaces: frozenset[str] = frozenset()  # the namespaces served; empty: all

    @property
    def page_bytes(self) -> int:
        """The most one list page's body may hold."""
        return PAGE_FACTOR * self.max_object_bytes
