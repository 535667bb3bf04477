"""A catalog zone (``--catalog-zone``, RFC 9432) drives Knot and BIND: each is configured
with the catalog alone (and the key), and serves ``svc-global`` and the ``--mcs-zone``
zone by itself, answering as dnsside does; when dnsside restarts without the MCS zone, the
catalog's NOTIFY brings the smaller catalog, and each drops that zone while it keeps
``svc-global`` (same member ID: never reset). The secondaries poll once an hour here, so
only dnsside's NOTIFYs can bring the change."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.catalogs import BindCatalogSecondary, KnotCatalogSecondary
from testkit.resolvers import free_port
from testkit.secondaries import Secondary, Tsig, serial
from testkit.serve import NGINX, Dnsside, answers, demo_server, wait_for

CATALOG = "catalog.invalid"
MCS = "clusterset.local"
MCS_NAME = "nginx-svc.default.svc.clusterset.local"
KEY: Tsig = ("xfr-key", "hmac-sha256", "cTaeNLkiyNPuYPuAmMvWRxrqIubyQ0EQavBnSShpBDU=")
KINDS: list[type[KnotCatalogSecondary] | type[BindCatalogSecondary]] = [
    KnotCatalogSecondary, BindCatalogSecondary]


def key_file(tmp: Path) -> Path:
    """The key as `tsig-keygen` writes it."""
    name, algorithm, secret = KEY
    path = tmp / "xfr.key"
    path.write_text(f'key "{name}" {{\n\talgorithm {algorithm};\n\tsecret "{secret}";\n}};\n')
    return path


def same_answers(sec: Secondary, srv: Dnsside, name: str) -> bool:
    return answers(sec.query(name, "A")) == answers(srv.query(name, "A", tcp=True))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_a_secondary_with_the_catalog_alone_takes_the_zones_and_drops_one(
        tmp_path: Path, kind: type[KnotCatalogSecondary] | type[BindCatalogSecondary]) -> None:
    listen = f"127.0.0.1:{free_port()}"  # kept across dnsside's restart
    sec_port = free_port()
    key = key_file(tmp_path)

    def serve(*extra: str) -> Dnsside:
        return demo_server("--catalog-zone", CATALOG, "--allow-transfer", "127.0.0.1",
                           "--tsig-key-file", str(key), "--notify", f"127.0.0.1:{sec_port}",
                           *extra, listen=listen)

    (tmp_path / kind.kind).mkdir()
    first = serve("--mcs-zone", MCS)
    sec = kind(tmp_path / kind.kind, first, CATALOG, ["svc-global", MCS], refresh=3600,
               tsig=KEY, notify=True, port=sec_port)
    second: Dnsside | None = None
    try:
        started = time.monotonic()
        sec.start()  # until the catalog and both members are served at dnsside's serials
        took_up = time.monotonic() - started
        for name in (NGINX, MCS_NAME):
            assert answers(sec.query(name, "A")), name
            assert same_answers(sec, first, name), name
        old_catalog = serial(first.port, CATALOG)
        assert old_catalog is not None and sec.took_catalog(old_catalog)
        first.stop()
        restarted = time.monotonic()
        second = serve()  # the same address, without --mcs-zone
        new_catalog = serial(second.port, CATALOG)
        assert new_catalog is not None and new_catalog > old_catalog  # another process
        assert serial(second.port, MCS) is None  # dnsside serves it no more
        wait_for(lambda: sec.serial(MCS) is None, 30, f"{sec.kind} to drop {MCS}")
        took_down = time.monotonic() - restarted
        assert sec.took_catalog(new_catalog)
        new = serial(second.port, "svc-global")
        wait_for(lambda: sec.serial("svc-global") == new, 15, f"{sec.kind} to keep svc-global")
        assert same_answers(sec, second, NGINX)
        second.wait_log(f"of {CATALOG}. to 127.0.0.1: serial {new_catalog}, whole zone")
        print(f"\n{sec.kind}: both members served {took_up:.2f}s after its start; "
              f"{MCS} dropped {took_down:.2f}s after dnsside was started again without it")
        # The member that stays keeps its ID, so it is never dropped and added again (an ID
        # that changed would be a reset, RFC 9432: its data purged and transferred anew).
        log = sec.log_text()
        dropped = ("[{}.] zone purged" if kind is KnotCatalogSecondary
                   else "catz: deleting zone '{}' from catalog")
        assert dropped.format(MCS) in log, log[-3000:]
        assert dropped.format("svc-global") not in log, log[-3000:]
    finally:
        sec.stop()
        first.stop()
        if second is not None:
            second.stop()
