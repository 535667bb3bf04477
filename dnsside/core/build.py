"""The one way to build an index: from a :class:`~dnsside.config.Config` (``serve``,
``explain``, testkit, bench) or from the few :class:`IndexOptions` a test sets.

The index and its responder are made together, here and nowhere else, because they
must agree: the responder's zones are encoded with the same :class:`ZoneOptions` the
index assembles with, so the zone options are given once (in the options) and both
read them. ``tests/test_layers.py`` holds every other module to calling this.

The clock is the caller's: the index numbers the zones' versions by the wall clock it
is given and times its batches by the timer it is given; the defaults are the
system's, and a test or a bench may pass its own.
"""

from __future__ import annotations

import time

from dnsside.config import Config
from dnsside.core.index import Clock, Index, IndexOptions, Observer
from dnsside.core.publishing import make_responder
from dnsside.dns.zone import ZoneOptions
from dnsside.model.locality import Locality


def transfers_allowed(config: Config) -> bool:
    """Somebody may transfer the zones: the records are then kept as versions too."""
    return bool(config.allow_transfer or config.tsig_key_file)


def index_options(config: Config) -> IndexOptions:
    """What an index of ``config`` holds: every flag the index and its zones read."""
    return IndexOptions(
        cluster_name=config.cluster_name,
        zones=tuple(config.zones),
        mcs_zones=tuple(config.mcs_zones),
        catalog_zone=config.catalog_zone,
        include_local=not config.no_local,
        include_federated=not config.no_federated,
        flat_namespaces=tuple(config.flat_network_namespaces) if config.flat_network else (),
        links_namespace=config.links_namespace,
        namespaces=tuple(config.namespaces),
        transfer_history=config.ixfr_history if transfers_allowed(config) else None,
        locality=Locality(config.locality),
        zone=ZoneOptions(
            ttl=config.ttl,
            publish_not_ready=config.publish_not_ready,
            srv_priority=config.srv_priority,
            round_robin=config.round_robin == "on",
            ns_addresses=config.ns_addresses,
        ),
    )


def make_index(options: IndexOptions | Config | None = None, observer: Observer | None = None,
               *, clock: Clock = time.time, timer: Clock = time.perf_counter,
               started: int | None = None) -> Index:
    """An empty index and its responder: of ``options`` (a :class:`Config` is read through
    :func:`index_options`; None: every default), reported to ``observer``. ``started``
    numbers the catalog zone's only version (``--catalog-zone``: the second the process
    started, the ``clock``'s by default)."""
    if options is None:
        options = IndexOptions()
    elif isinstance(options, Config):
        options = index_options(options)
    responder = make_responder(options.zones, options.zone, options.mcs_zones,
                               options.catalog_zone,
                               int(clock()) if started is None else started)
    return Index(responder, options, observer, clock=clock, timer=timer)


__all__ = ["index_options", "make_index", "transfers_allowed"]
