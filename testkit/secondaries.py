"""Authoritative secondaries of dnsside, each started from a config the test writes:
NSD and BIND on 127.0.0.1 with a free port, pulling the zones by zone transfer from a
dnsside on 127.0.0.1 (the address `--allow-transfer 127.0.0.1` lets in).

dnsside sends no NOTIFY yet: each secondary transfers at start, then polls the SOA
every ``refresh`` seconds (its min/max-refresh-time; the SOA says 7,200) and transfers
again when the serial moved. A secondary is ready when it answers the SOA of every
zone with the serial dnsside serves.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from testkit.resolvers import PeerProcess
from testkit.serve import Dnsside


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

    def __init__(self, tmp: Path, primary: Dnsside, zones: list[str], refresh: int = 5
                 ) -> None:
        super().__init__(tmp.resolve())
        self.refresh = refresh  # seconds between SOA polls: dnsside sends no NOTIFY yet
        self.primary = primary
        self.zones = [z.rstrip(".") for z in zones]

    def configure(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> None:
        """Start; wait until every zone is served at dnsside's current serial."""

        def caught_up() -> bool:
            self.exited()
            return all(serial(self.port, z) == serial(self.primary.port, z)
                       and serial(self.port, z) is not None for z in self.zones)

        self.start_on_a_free_port(self.configure, caught_up, timeout,
                                  f"{self.kind} to transfer {', '.join(self.zones)}")

    def query(self, name: str, rdtype: str) -> dns.message.Message:
        q = dns.message.make_query(name, rdtype, use_edns=0, payload=1232)
        q.flags &= ~dns.flags.RD
        return dns.query.tcp(q, "127.0.0.1", port=self.port, timeout=5.0)


class NsdSecondary(Secondary):
    """NSD in the foreground (`-d`), one server process, no chroot, no remote control."""

    kind = "nsd"

    def configure(self) -> list[str]:
        conf = self.tmp / "nsd.conf"
        zones = "".join(f"""
zone:
    name: "{z}."
    zonefile: "{z}.zone"
    request-xfr: 127.0.0.1@{self.primary.port} NOKEY
    provide-xfr: 127.0.0.0/8 NOKEY
    min-refresh-time: {self.refresh}
    max-refresh-time: {self.refresh}
""" for z in self.zones)
        conf.write_text(f"""\
server:
    server-count: 1
    ip-address: 127.0.0.1
    port: {self.port}
    do-ip6: no
    username: ""
    chroot: ""
    zonesdir: "{self.tmp}"
    pidfile: "{self.tmp}/nsd.pid"
    xfrdfile: "{self.tmp}/xfrd.state"
    zonelistfile: "{self.tmp}/zone.list"
    database: ""
    verbosity: 2
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
remote-control:
    control-enable: no
{zones}""")
        subprocess.run(["nsd-checkconf", str(conf)], check=True, capture_output=True)
        return ["nsd", "-d", "-c", str(conf)]


class BindSecondary(Secondary):
    """named in the foreground (`-g`), authoritative only."""

    kind = "bind"

    def configure(self) -> list[str]:
        conf = self.tmp / "named.conf"
        zones = "".join(f"""
zone "{z}" {{ type secondary; primaries {{ 127.0.0.1 port {self.primary.port}; }};
    file "{self.tmp}/{z}.db"; }};""" for z in self.zones)
        conf.write_text(f"""
options {{
    directory "{self.tmp}";
    pid-file "{self.tmp}/named.pid";
    session-keyfile "{self.tmp}/session.key";
    managed-keys-directory "{self.tmp}";
    listen-on port {self.port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    allow-query {{ 127.0.0.0/8; }};
    dnssec-validation no;
    notify no;
    // an RRset of one record per member can pass BIND's default cap of 100
    max-records-per-type 0;
    min-refresh-time {self.refresh};
    max-refresh-time {self.refresh};
}};
controls {{ }};
{zones}
""")
        subprocess.run(["named-checkconf", str(conf)], check=True, capture_output=True)
        return ["named", "-4", "-g", "-c", str(conf)]
