"""Knot and BIND as catalog consumers (RFC 9432) of a dnsside's ``--catalog-zone``: each
started from a config that names the catalog zone alone (and the key), and serves the
member zones the catalog lists, added and removed as the catalog says.

The configurations are the ones docs/zone-transfer.md gives ("A catalog of the zones"),
with the tests' paths and ports; the rest (start on a free port, stop, restart on the same
files, ask) is :class:`testkit.secondaries.Secondary`'s. ``zones`` is what the test waits
for at start: the members it expects (the configs name only the catalog). The catalog
itself is not asked: Knot refuses queries for a catalog it interprets, so each says in its
log which version of the catalog it took (:meth:`took_catalog`).
"""

from __future__ import annotations

from pathlib import Path

from testkit.secondaries import BindSecondary, KnotSecondary, Tsig, check
from testkit.serve import Dnsside


class KnotCatalogSecondary(KnotSecondary):
    """knotd with one zone, the catalog (`catalog-role: interpret`): each member is made
    from the `catalog-template` template, which names the primary, the NOTIFY acl and the
    timers (a member gets nothing else)."""

    kind = "knot-catalog"

    def __init__(self, tmp: Path, primary: Dnsside, catalog: str, members: list[str],
                 refresh: int = 5, tsig: Tsig | None = None, notify: bool = False,
                 port: int = 0) -> None:
        super().__init__(tmp, primary, members, refresh=refresh, tsig=tsig, notify=notify,
                         port=port)
        self.catalog = catalog.rstrip(".")

    def took_catalog(self, serial: int) -> bool:
        """Whether it took version ``serial`` of the catalog (Knot's "refresh ... zone
        updated ... serial A -> B" line of the catalog zone)."""
        return any(f"[{self.catalog}.] refresh" in line and f"-> {serial}" in line
                   for line in self.log_text().splitlines())

    def configure(self) -> list[str]:
        home = self.tmp / "knot"
        home.mkdir(exist_ok=True)
        conf = home / "knot.conf"
        zone_acl = self.access()[3]
        conf.write_text(f"""{self.head(home)}  - id: dnsside-member
    storage: "{home}"
    file: "%s.zone"
    master: primary{zone_acl}{self.timers()}
zone:
  - domain: {self.catalog}
    master: primary{zone_acl}
    catalog-role: interpret
    catalog-template: dnsside-member
""")
        check(["knotc", "-c", str(conf), "conf-check"])
        return ["knotd", "-c", str(conf)]


class BindCatalogSecondary(BindSecondary):
    """named with one zone, the catalog, and `catalog-zones` naming it: each member is
    made with the catalog's `default-primaries` (and the key), its file in
    `zone-directory`. BIND takes a NOTIFY from its primaries' addresses, members' too."""

    kind = "bind-catalog"

    def __init__(self, tmp: Path, primary: Dnsside, catalog: str, members: list[str],
                 refresh: int = 5, tsig: Tsig | None = None, notify: bool = False,
                 port: int = 0) -> None:
        super().__init__(tmp, primary, members, refresh=refresh, tsig=tsig, notify=notify,
                         port=port)
        self.catalog = catalog.rstrip(".")

    def took_catalog(self, serial: int) -> bool:
        """Whether it took version ``serial`` of the catalog (BIND's "catz: updating catalog
        zone ... with serial N" line)."""
        return (f"catz: updating catalog zone '{self.catalog}' with serial {serial}"
                in self.log_text())

    def configure(self) -> list[str]:
        conf = self.tmp / "named.conf"
        keys, primary_key = self.access()
        primaries = f"{{ 127.0.0.1 port {self.primary.port}{primary_key}; }}"
        members = self.tmp / "members"
        members.mkdir(exist_ok=True)
        conf.write_text(f"""
{keys}
options {{
{self.options()}    catalog-zones {{
        zone "{self.catalog}"
            default-primaries {primaries}
            zone-directory "{members}"
            in-memory no;
    }};
}};
controls {{ }};
zone "{self.catalog}" {{
    type secondary;
    primaries {primaries};
    file "{self.tmp}/{self.catalog}.db";
}};
""")
        check(["named-checkconf", str(conf)])
        return ["named", "-4", "-g", "-c", str(conf)]
