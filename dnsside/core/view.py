"""What the index shows to those who only read it: ``explain`` and the reporter.

Neither may reach into the index's tables. They read the named parts listed here
(the Links and their phase, the flat network, the counts, the configuration
warnings), which the :class:`~dnsside.core.index.Index` provides; anything else it
holds is its own business and free to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from dnsside.core.assembly import GlobalService
from dnsside.core.counts import Counts
from dnsside.core.diagnosis import ConfigWarning
from dnsside.core.links import Links
from dnsside.core.remotes import FlatNetwork
from dnsside.core.store import LocalStore
from dnsside.core.tables import Key
from dnsside.dns.responder import Responder
from dnsside.dns.versions import ZoneVersions
from dnsside.dns.zone import ZoneOptions
from dnsside.model.events import Gateway


class ReportView(Protocol):
    """What the log-and-metrics reporter reads after every batch."""

    @property
    def synced(self) -> bool: ...
    @property
    def serial(self) -> int: ...
    @property
    def global_services(self) -> Mapping[Key, GlobalService]: ...
    @property
    def links(self) -> Links: ...
    @property
    def flat(self) -> FlatNetwork: ...
    @property
    def counts(self) -> Counts: ...
    @property
    def warnings(self) -> Mapping[ConfigWarning, str]: ...


class ExplainView(Protocol):
    """What ``explain`` reads: the responder to ask, and where each member comes from."""

    @property
    def responder(self) -> Responder: ...
    @property
    def zone_options(self) -> ZoneOptions: ...
    @property
    def watched_namespaces(self) -> tuple[str, ...]: ...
    @property
    def synced(self) -> bool: ...
    @property
    def global_services(self) -> Mapping[Key, GlobalService]: ...
    @property
    def local(self) -> LocalStore: ...
    @property
    def links(self) -> Links: ...
    @property
    def flat(self) -> FlatNetwork: ...
    @property
    def gateways(self) -> Mapping[str, tuple[Gateway, str]]: ...
    @property
    def warnings(self) -> Mapping[ConfigWarning, str]: ...
    @property
    def versions(self) -> Mapping[bytes, ZoneVersions]: ...
    @property
    def version_serial(self) -> int | None: ...

    def probe_targets(self) -> dict[str, str]: ...


__all__ = ["ExplainView", "ReportView"]
