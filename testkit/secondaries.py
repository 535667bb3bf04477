"""Authoritative secondaries of dnsside, each started from a config the test writes:
NSD, BIND and Knot on 127.0.0.1, pulling the zones by zone transfer from a dnsside on
127.0.0.1 (the address `--allow-transfer 127.0.0.1` lets in).

Each secondary transfers at start, then polls the SOA every ``refresh`` seconds (its
min/max refresh; the SOA says 7,200) and transfers again when the serial moved. With
``notify`` it also takes NOTIFY from 127.0.0.1, where dnsside sends it from (an
ephemeral port: every server matches the address only). With ``tsig`` (key name,
algorithm, base64 secret, as in a `tsig-keygen` file) it signs its SOA queries and
transfers with that key and takes a NOTIFY only when signed by it. A secondary is ready
when it answers the SOA of every zone with the serial dnsside serves.

The configs here are the ones docs/zone-transfer.md gives, with test paths and ports.
A secondary keeps its files in its ``tmp``: :meth:`Secondary.stop` then
:meth:`Secondary.start` (or :meth:`Secondary.restart` with a new primary) brings it back
on the same storage and the same port, serving the serial it held until it polls.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Literal

import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.query
import dns.rcode
import dns.rdatatype
import dns.tsigkeyring

from testkit.resolvers import PeerProcess, named_places, port_is_free
from testkit.serve import Dnsside, wait_for

Tsig = tuple[str, str, str]
"""(key name, algorithm such as "hmac-sha256", base64 secret)."""
Until = Literal["current", "held", "listening"]


def serial(port: int, zone: str) -> int | None:
    """The SOA serial 127.0.0.1:``port`` gives for ``zone`` authoritatively, or None."""
    q = dns.message.make_query(zone, "SOA")
    q.flags &= ~dns.flags.RD
    try:
        msg = dns.query.udp(q, "127.0.0.1", port=port, timeout=1.0)
    except (dns.exception.Timeout, OSError):
        return None
    if msg.rcode() != dns.rcode.NOERROR or not msg.flags & dns.flags.AA:
        return None
    soa = [rd for rrset in msg.answer if rrset.rdtype == dns.rdatatype.SOA for rd in rrset]
    return int(soa[0].serial) if soa else None


class Secondary(PeerProcess):
    kind = "secondary"
    asks_ixfr = False
    """Whether, holding a version, it asks IXFR (then AXFR if refused) rather than AXFR."""

    def __init__(self, tmp: Path, primary: Dnsside, zones: list[str], refresh: int = 5,
                 tsig: Tsig | None = None, notify: bool = False, port: int = 0) -> None:
        super().__init__(tmp.resolve())
        self.refresh = refresh  # seconds between SOA polls
        self.primary = primary
        self.zones = [z.rstrip(".") for z in zones]
        self.tsig = tsig
        self.notify = notify
        # A port given (dnsside's --notify must name it before the secondary starts), or
        # the one of the first start: a restart keeps it.
        self.port = port

    def configure(self) -> list[str]:
        raise NotImplementedError

    def zone_file(self, zone: str) -> Path:
        """Where it keeps ``zone`` across a restart."""
        raise NotImplementedError

    def start(self, timeout: float = 60.0, until: Until = "current") -> None:
        """Start, and wait ``until`` every zone is served at dnsside's current serial
        ("current"), or served at all ("held": a restart on storage that holds the zones,
        at the serial it held), or only until the server answers ("listening": it has not
        transferred, e.g. its primary refuses it)."""

        def ready() -> bool:
            self.exited()
            if until == "listening":
                return self.answers()
            held = [self.serial(z) for z in self.zones]
            if until == "held":
                return None not in held
            return all(s is not None and s == serial(self.primary.port, z)
                       for s, z in zip(held, self.zones, strict=True))

        what = f"{self.kind} to be {until} on {', '.join(self.zones)}"
        if not self.port:
            self.start_on_a_free_port(self.configure, ready, timeout, what)
            return
        for attempt in range(3):
            self.launch(self.configure())
            try:
                wait_for(ready, timeout, what)
                return
            except AssertionError:
                self.stop()
                # A port chosen ahead (for --notify) can be some client's for a moment: its
                # ephemeral source port. Wait until it is free again, then start once more.
                if "in use" not in self.log_text() or attempt == 2:
                    break
                wait_for(lambda: port_is_free(self.port), 30, f"port {self.port} to be free")
        raise AssertionError(f"{self.kind} did not start on port {self.port}:\n"
                             f"{self.log_text()}")

    def restart(self, primary: Dnsside | None = None, until: Until = "current") -> None:
        """Stop, then start on the same files and port; from ``primary`` if given (a
        restarted dnsside on another port)."""
        self.stop()
        if primary is not None:
            self.primary = primary
        self.start(until=until)

    def serial(self, zone: str) -> int | None:
        """The serial this secondary serves for ``zone`` (None: not served)."""
        return serial(self.port, zone.rstrip("."))

    def answers(self) -> bool:
        """Whether it answers a query at all (any rcode)."""
        try:
            dns.query.udp(dns.message.make_query(self.zones[0], "SOA"), "127.0.0.1",
                          port=self.port, timeout=0.5)
        except (dns.exception.Timeout, OSError):
            return False
        return True

    def send_notify(self, zone: str, source: str = "127.0.0.1", tsig: Tsig | None = None
               ) -> dns.message.Message:
        """Send the NOTIFY for ``zone`` a primary sends (from ``source``, an ephemeral
        port, signed with ``tsig`` if given); the reply (signed replies are checked)."""
        msg = dns.message.make_query(zone, "SOA")
        msg.flags = dns.flags.AA  # before the opcode: assigning flags clears it
        msg.set_opcode(dns.opcode.NOTIFY)
        if tsig:
            name, algorithm, secret = tsig
            msg.use_tsig(dns.tsigkeyring.from_text({name: (algorithm, secret)}),
                         keyname=name)
        return dns.query.udp(msg, "127.0.0.1", port=self.port, source=source, timeout=5.0)

    def query(self, name: str, rdtype: str) -> dns.message.Message:
        """Ask over TCP. A server that just took a new version of the zone may drop the
        connection under the query (NSD hands its socket to a new server process and the
        old one exits): that question is asked again, on a new connection, up to 5 times."""
        q = dns.message.make_query(name, rdtype, use_edns=0, payload=1232)
        q.flags &= ~dns.flags.RD
        for attempt in range(5):
            try:
                return dns.query.tcp(q, "127.0.0.1", port=self.port, timeout=5.0)
            except (ConnectionResetError, EOFError):
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")


def check(argv: list[str]) -> None:
    """Run a config checker; fail with what it said."""
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: {done.stdout}{done.stderr}")


class NsdSecondary(Secondary):
    """NSD in the foreground (`-d`), one server process, no chroot, no remote control.

    Holding a version, it asks IXFR (plain `request-xfr:`; `allow-axfr-fallback: yes`
    takes an AXFR, or an IXFR answered in the AXFR form, as well); NOTIFY needs
    `allow-notify:`, NSD takes none by default."""

    kind = "nsd"
    asks_ixfr = True

    def zone_file(self, zone: str) -> Path:
        return self.tmp / f"{zone.rstrip('.')}.zone"

    def configure(self) -> list[str]:
        conf = self.tmp / "nsd.conf"
        conf.write_text(nsd_conf(self.tmp, self.port, self.primary.port, self.zones,
                                 refresh=self.refresh, tsig=self.tsig, notify=self.notify,
                                 write_every=10))
        check(["nsd-checkconf", str(conf)])
        return ["nsd", "-d", "-c", str(conf)]


def nsd_conf(tmp: Path, port: int, primary_port: int, zones: list[str], *,
             refresh: int | None = None, tsig: Tsig | None = None, notify: bool = False,
             write_every: int | None = None) -> str:
    """An nsd.conf for a secondary of the dnsside on 127.0.0.1:``primary_port``, its files
    in ``tmp``, listening on 127.0.0.1:``port``: ``refresh`` caps its SOA polls and
    retries (None: the SOA's); ``write_every`` seconds it writes transferred zones out
    (None: NSD's default, an hour, with no database)."""
    key = "NOKEY"
    keys = ""
    if tsig:
        key, algorithm, secret = tsig
        keys = f"""key:
    name: "{key}"
    algorithm: {algorithm}
    secret: "{secret}"
"""
    notify_line = f"\n    allow-notify: 127.0.0.1 {key}" if notify else ""
    timers = "".join(f"\n    {t}: {refresh}" for t in ("min-refresh-time", "max-refresh-time",
                                                        "min-retry-time", "max-retry-time")
                     ) if refresh is not None else ""
    zone_blocks = "".join(f"""
zone:
    name: "{z.rstrip('.')}."
    zonefile: "{z.rstrip('.')}.zone"
    request-xfr: 127.0.0.1@{primary_port} {key}
    allow-axfr-fallback: yes{notify_line}
    provide-xfr: 127.0.0.0/8 NOKEY{timers}
""" for z in zones)
    # NSD keeps a zone in memory and writes it out only this often: a restart before then
    # starts without it (after database:, which sets its default)
    writes = f"\n    zonefiles-write: {write_every}" if write_every is not None else ""
    return f"""\
server:
    server-count: 1
    ip-address: 127.0.0.1
    port: {port}
    do-ip6: no
    username: ""
    chroot: ""
    zonesdir: "{tmp}"
    xfrdir: "{tmp}"
    pidfile: "{tmp}/nsd.pid"
    xfrdfile: "{tmp}/xfrd.state"
    zonelistfile: "{tmp}/zone.list"
    database: ""{writes}
    verbosity: 2
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
remote-control:
    control-enable: no
{keys}{zone_blocks}"""


class BindSecondary(Secondary):
    """named in the foreground (`-g`), authoritative only.

    Holding a version, it asks IXFR (`request-ixfr yes`, the default, said anyway) and
    takes an AXFR-form answer. It takes NOTIFY from its primaries' addresses (whatever
    the port) by default, and with ``tsig`` still takes an unsigned one from there: BIND
    checks no key on a primary's NOTIFY, which only makes it poll, and the poll is
    signed. ``notify`` adds `allow-notify`: 127.0.0.1, or with ``tsig`` the key (a
    NOTIFY signed with it is then taken from any address)."""

    kind = "bind"
    asks_ixfr = True

    def zone_file(self, zone: str) -> Path:
        return self.tmp / f"{zone.rstrip('.')}.db"

    def access(self) -> tuple[str, str]:
        """The configuration's pieces for ``tsig``: the `key` statement and a primary's
        `key` clause ("" without)."""
        if not self.tsig:
            return "", ""
        name, algorithm, secret = self.tsig
        return (f'key "{name}" {{ algorithm {algorithm}; secret "{secret}"; }};',
                f' key "{name}"')

    def options(self) -> str:
        """The `options` lines of a secondary: its places, no recursion, no NOTIFY of its
        own, no cap on an RRset (one record per member can pass BIND's default of 100),
        and every refresh and retry after ``refresh`` seconds."""
        return f"""{named_places(self.tmp, self.port)}    recursion no;
    allow-query {{ 127.0.0.0/8; }};
    dnssec-validation no;
    notify no;
    max-records-per-type 0;
    min-refresh-time {self.refresh};
    max-refresh-time {self.refresh};
    min-retry-time {self.refresh};
    max-retry-time {self.refresh};
"""

    def configure(self) -> list[str]:
        conf = self.tmp / "named.conf"
        keys, primary_key = self.access()
        notify = ""
        if self.notify:
            notify = ("allow-notify { key " + f'"{self.tsig[0]}"; }};' if self.tsig
                      else "allow-notify { 127.0.0.1; };")
        zones = "".join(f"""
zone "{z}" {{
    type secondary;
    primaries {{ 127.0.0.1 port {self.primary.port}{primary_key}; }};
    request-ixfr yes;
    {notify}
    file "{self.tmp}/{z}.db";
}};""" for z in self.zones)
        conf.write_text(f"""
{keys}
options {{
{self.options()}}};
controls {{ }};
{zones}
""")
        check(["named-checkconf", str(conf)])
        return ["named", "-4", "-g", "-c", str(conf)]


class KnotSecondary(Secondary):
    """knotd in the foreground, its rundir, databases and zone files under ``tmp``/knot,
    its control socket there too (unused).

    Holding a version, it asks IXFR (Knot always does when it has the zone) and takes an
    AXFR-form answer; without a zone it asks AXFR. NOTIFY is taken only through the zone's
    `acl` with `action: notify` (address 127.0.0.1, and the key with ``tsig``)."""

    kind = "knot"
    asks_ixfr = True

    def zone_file(self, zone: str) -> Path:
        return self.tmp / "knot" / f"{zone.rstrip('.')}.zone"

    def access(self) -> tuple[str, str, str, str]:
        """The configuration's pieces for ``tsig`` and ``notify``: the `key:` section, a
        remote's `key:` line, the `acl:` section and a zone's `acl:` line ("" when unused)."""
        keys = key = acl = zone_acl = ""
        if self.tsig:
            name, algorithm, secret = self.tsig
            keys = f"""key:
  - id: {name}
    algorithm: {algorithm}
    secret: {secret}
"""
            key = f"\n    key: {name}"
        if self.notify:
            acl = f"""acl:
  - id: notify_from_primary
    address: 127.0.0.1
    action: notify{key}
"""
            zone_acl = "\n    acl: notify_from_primary"
        return keys, key, acl, zone_acl

    def timers(self) -> str:
        """A template's refresh and retry intervals: ``refresh`` seconds (2 at least)."""
        every = max(self.refresh, 2)
        return "".join(f"\n    {t}: {every}" for t in (
            "refresh-min-interval", "refresh-max-interval", "retry-min-interval",
            "retry-max-interval"))

    def head(self, home: Path) -> str:
        """Everything of the configuration up to its own templates: the server (files
        under ``home``), the log, the primary and the key and NOTIFY acl of ``access``,
        and the default template with its timers."""
        keys, key, acl, _ = self.access()
        return f"""\
server:
    rundir: "{home}"
    pidfile: "{home}/knot.pid"
    listen: 127.0.0.1@{self.port}
    # one worker of each kind: the tests run beside others on two cores
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
control:
    listen: knot.sock
log:
  - target: stderr
    any: info
database:
    storage: "{home}"
{keys}remote:
  - id: primary
    address: 127.0.0.1@{self.primary.port}{key}
{acl}template:
  - id: default
    storage: "{home}"
    file: "%s.zone"{self.timers()}
"""

    def configure(self) -> list[str]:
        home = self.tmp / "knot"
        home.mkdir(exist_ok=True)
        conf = home / "knot.conf"
        zone_acl = self.access()[3]
        zones = "".join(f"""
  - domain: {z}
    master: primary{zone_acl}
""" for z in self.zones)
        conf.write_text(f"{self.head(home)}zone:{zones}")
        check(["knotc", "-c", str(conf), "conf-check"])
        return ["knotd", "-c", str(conf)]
