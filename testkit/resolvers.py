"""Real resolvers in front of dnsside, each started from a config the test writes.

unbound, dnsmasq, knot-resolver (kresd), BIND (as a forwarder, a `type stub` zone
and a `type static-stub` zone) and PowerDNS Recursor, on 127.0.0.1 with a free
port, sending `svc-global` to dnsside. Everything stays on loopback (the project's
network rule): every resolver gets root hints naming 127.0.0.1 only, no DNSSEC
validation and no trust-anchor fetches, and kresd and pdns lose the modules or
features that would otherwise go out (RFC 5011 updates, time-skew checks, the
security poll).

dnsside is given port 53 on an address of its own in 127.0.0.0/8
(:func:`serve_on_port_53`): an NS record's glue carries no port, so a resolver that
follows the NS (BIND `type stub`, unbound `stub-prime: yes`) reaches the name
server on port 53 of the glue address, as it would in a cluster. A random
address keeps parallel test runs apart. Binding port 53 needs root, which the
suite has (CI runs as root).
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from testkit.serve import Dnsside, answers, wait_for

ZONE = "svc-global"
PROBE = "resolver-probe.svc-global"  # NXDOMAIN; asked until a resolver answers, never else
ROOT_HINTS = """\
.            3600000 IN NS hint.root.
hint.root.   3600000 IN A  127.0.0.1
"""


def named_places(tmp: Path, port: int) -> str:
    """The lines of a BIND `options` block every named of the tests starts with: its
    files under ``tmp``, listening on 127.0.0.1:``port`` only."""
    return f"""    directory "{tmp}";
    pid-file "{tmp}/named.pid";
    session-keyfile "{tmp}/session.key";
    managed-keys-directory "{tmp}";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
"""


def port_is_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be bound for both TCP and UDP right now."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
            t.bind(("127.0.0.1", port))
            u.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 free for both TCP and UDP right now (a resolver needs both; a
    port free for UDP only may be some TCP client's, and the resolver's TCP side then
    fails quietly). :meth:`Resolver.start` still checks both, the port can be taken."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind(("127.0.0.1", 0))
            port = int(t.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise AssertionError("no port free for both TCP and UDP")


def loopback_address() -> str:
    """A random address in 127.0.0.0/8, away from 127.0.0.x (127.0.0.1, 127.0.0.53...)."""
    return f"127.{random.randint(100, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"


def serve_on_port_53(*args: str, wait_synced: bool = True) -> Dnsside:
    """`dnsside serve` on port 53 of a fresh loopback address (see the module docstring)."""
    last = ""
    for _ in range(5):
        try:
            return Dnsside(*args, listen=f"{loopback_address()}:53", wait_synced=wait_synced)
        except AssertionError as exc:  # the address was taken: try another
            if "in use" not in str(exc):
                raise
            last = str(exc)
    raise AssertionError(f"no free loopback address for port 53: {last}")


def stub_query(port: int, name: str, rdtype: str, timeout: float = 5.0) -> dns.message.Message:
    """A stub resolver's query (RD set, EDNS 1232) to 127.0.0.1:``port``; TCP after TC."""
    q = dns.message.make_query(name, rdtype, use_edns=0, payload=1232)
    msg, _tcp = dns.query.udp_with_fallback(q, "127.0.0.1", port=port, timeout=timeout)
    return msg


class PeerProcess:
    """A DNS server a test starts from a config it writes (a resolver, a secondary): its
    process, its log, its port, and stopping it."""

    kind = "peer"

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = tmp / f"{self.kind}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def launch(self, argv: list[str]) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.tmp)

    def start_on_a_free_port(self, argv: Callable[[], list[str]], ready: Callable[[], bool],
                             timeout: float, what: str) -> None:
        """Pick a free port, write the config and start (``argv`` does both for
        ``self.port``), then wait until ``ready``. The port may be taken between the
        probe and the bind by a test running beside this one: then another, up to three."""
        for _ in range(3):
            self.port = free_port()
            self.launch(argv())
            try:
                wait_for(ready, timeout, what)
                return
            except AssertionError:
                self.stop()
        raise AssertionError(f"{self.kind} did not start:\n{self.log_text()}")

    def exited(self) -> None:
        """Raise, with its log, if the process is gone."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.kind} exited:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Resolver(PeerProcess):
    """One resolver process: write its config for a free port, start it, ask it, stop it."""

    kind = "resolver"

    def __init__(self, tmp: Path, upstream: str, upstream_port: int = 53) -> None:
        super().__init__(tmp)
        self.upstream = upstream
        self.upstream_port = upstream_port
        (tmp / "root.hints").write_text(ROOT_HINTS)

    # Subclasses: the files and the command line for self.port.
    def configure(self) -> None:
        raise NotImplementedError

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self, ready: Callable[[dns.message.Message], bool] | None = None) -> None:
        """Start and wait until the resolver answers; by default until it gets
        dnsside's NXDOMAIN for :data:`PROBE` (so no startup SERVFAIL is ever cached for
        a name a test asks)."""
        good = ready or (lambda m: m.rcode() == dns.rcode.NXDOMAIN)

        def argv() -> list[str]:
            self.configure()
            return self.argv()

        self.start_on_a_free_port(argv, lambda: self._answers(good), 30,
                                  f"{self.kind} to answer")

    def _answers(self, good: Callable[[dns.message.Message], bool]) -> bool:
        """True once the resolver answers well over UDP and over TCP."""
        self.exited()
        q = dns.message.make_query(PROBE, "A", use_edns=0, payload=1232)
        try:
            return good(dns.query.udp(q, "127.0.0.1", port=self.port, timeout=1.0)) and good(
                dns.query.tcp(q, "127.0.0.1", port=self.port, timeout=1.0))
        except (dns.exception.DNSException, OSError, EOFError):
            # (a BadResponse too: a reply to another question, from whatever held the
            # port before, or a resolver still starting; seen once in a full run)
            return False

    def query(self, name: str, rdtype: str, timeout: float = 5.0) -> dns.message.Message:
        return stub_query(self.port, name, rdtype, timeout)

    def check(self, argv: list[str]) -> None:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"{argv}: {out.stdout}{out.stderr}"


def same_answer(dnsside: Dnsside, resolver: Resolver, name: str,
                rdtype: str) -> dns.message.Message:
    """Ask dnsside (over TCP) and ``resolver``: the rcode, the answer's rdata of every type
    and the owner of the negative answer's SOA must agree; the resolver's reply."""
    direct = dnsside.query(name, rdtype, tcp=True)
    via = resolver.query(name, rdtype)
    assert via.rcode() == direct.rcode(), f"{name} {rdtype}: {via}"
    assert via.flags & dns.flags.RA
    for t in ("A", "AAAA", "SRV", "SOA", "NS", "TXT"):
        assert answers(via, t) == answers(direct, t), f"{name} {rdtype} {t}"
    if not direct.answer:
        assert [r.name for r in via.authority if r.rdtype == dns.rdatatype.SOA] == [
            r.name for r in direct.authority if r.rdtype == dns.rdatatype.SOA]
    return via


class Unbound(Resolver):
    """unbound with a stub zone: QNAME minimisation (strict), harden-below-nxdomain and
    0x20, as strict as unbound gets without DNSSEC; ``stub_prime`` asks the zone for its
    NS and then follows the glue."""

    kind = "unbound"

    def __init__(self, tmp: Path, upstream: str, upstream_port: int = 53, *,
                 stub_prime: bool = False, tcp_upstream: bool = False, extra: str = "",
                 zones: tuple[str, ...] = (ZONE,), strict: bool = True) -> None:
        super().__init__(tmp, upstream, upstream_port)
        self.stub_prime = stub_prime
        self.tcp_upstream = tcp_upstream
        self.extra = extra
        self.zones = zones  # one stub zone each, all at the same upstream
        self.strict = strict  # qname-minimisation-strict (relaxed is unbound's default)
        self.conf = tmp / "unbound.conf"

    def configure(self) -> None:
        insecure = "".join(f'    domain-insecure: "{zone}"\n' for zone in self.zones)
        stubs = "".join(f"""
stub-zone:
    name: "{zone}"
    stub-addr: {self.upstream}@{self.upstream_port}
    stub-prime: {"yes" if self.stub_prime else "no"}
""" for zone in self.zones)
        self.conf.write_text(f"""
server:
    interface: 127.0.0.1
    port: {self.port}
    do-ip6: no
    do-daemonize: no
    use-syslog: no
    logfile: ""
    verbosity: 1
    chroot: ""
    username: ""
    directory: "{self.tmp}"
    pidfile: "{self.tmp}/unbound.pid"
    num-threads: 1
    module-config: "iterator"
    root-hints: "{self.tmp}/root.hints"
    harden-below-nxdomain: yes
    qname-minimisation: yes
    qname-minimisation-strict: {"yes" if self.strict else "no"}
    use-caps-for-id: yes
    do-not-query-localhost: no
{insecure}    tcp-upstream: {"yes" if self.tcp_upstream else "no"}
    access-control: 127.0.0.0/8 allow
{self.extra}
remote-control:
    control-enable: no
{stubs}""")
        self.check(["unbound-checkconf", str(self.conf)])

    def argv(self) -> list[str]:
        return ["unbound", "-d", "-c", str(self.conf)]


class Dnsmasq(Resolver):
    """dnsmasq (from dnsmasq-base) forwarding the zone, no daemon, no other upstream."""

    kind = "dnsmasq"

    def __init__(self, tmp: Path, upstream: str, upstream_port: int = 53, *,
                 extra: tuple[str, ...] = ()) -> None:
        super().__init__(tmp, upstream, upstream_port)
        self.extra = extra

    def configure(self) -> None:
        pass

    def argv(self) -> list[str]:
        return ["dnsmasq", "--keep-in-foreground", "--log-facility=-", "--conf-file=/dev/null",
                "--no-resolv", "--no-hosts", "--no-poll", "--bind-interfaces",
                "--listen-address=127.0.0.1", f"--port={self.port}", "--pid-file=",
                "--user=root", f"--server=/{ZONE}/{self.upstream}#{self.upstream_port}",
                *self.extra]


class Kresd(Resolver):
    """knot-resolver with `policy.STUB` for the zone. Root priming, RFC 5011 updates,
    trust-anchor signalling and the time-skew check (each would query the root) are
    unloaded, the root trust anchor removed, and the root hint is 127.0.0.1."""

    kind = "kresd"

    def __init__(self, tmp: Path, upstream: str, upstream_port: int = 53, *,
                 extra: str = "") -> None:
        super().__init__(tmp, upstream, upstream_port)
        self.extra = extra
        self.conf = tmp / "kresd.conf"

    def configure(self) -> None:
        self.conf.write_text(f"""
for _, m in ipairs({{'ta_update', 'ta_signal_query', 'ta_sentinel', 'priming',
                     'detect_time_skew', 'detect_time_jump'}}) do
    modules.unload(m)
end
trust_anchors.remove('.')
modules.load('hints > iterate')
hints.root({{['hint.root.'] = '127.0.0.1'}})
net.listen('127.0.0.1', {self.port}, {{ kind = 'dns' }})
cache.open(10 * MB, 'lmdb://{self.tmp}/cache')
policy.add(policy.suffix(policy.STUB({{'{self.upstream}@{self.upstream_port}'}}),
                         {{todname('{ZONE}.')}}))
{self.extra}
""")

    def argv(self) -> list[str]:
        return ["kresd", "-n", "-c", str(self.conf), str(self.tmp)]


class Bind(Resolver):
    """BIND 9 recursing, the zone configured as ``mode``: `forward` (forward only),
    `stub` (asks dnsside for the zone's NS and follows the glue) or `static-stub`
    (server-addresses, no priming). Validation off; root hints to 127.0.0.1."""

    def __init__(self, tmp: Path, upstream: str, mode: str, *, extra: str = "",
                 primaries_port: int = 53) -> None:
        super().__init__(tmp, upstream, 53)
        self.primaries_port = primaries_port  # `type stub`: where it asks for the NS
        self.kind = f"bind-{mode}"
        self.log = tmp / f"{self.kind}.log"
        self.mode = mode
        self.extra = extra
        self.conf = tmp / "named.conf"

    def configure(self) -> None:
        zone = {
            "forward": f"type forward; forward only; forwarders {{ {self.upstream} port 53; }};",
            "stub": f"type stub; primaries {{ {self.upstream} port {self.primaries_port}; }}; "
                    f'file "{self.tmp}/stub.db";',
            "static-stub": f"type static-stub; server-addresses {{ {self.upstream}; }};",
        }[self.mode]
        self.conf.write_text(f"""
options {{
{named_places(self.tmp, self.port)}    recursion yes;
    allow-query {{ 127.0.0.0/8; }};
    allow-recursion {{ 127.0.0.0/8; }};
    dnssec-validation no;
    // BIND >= 9.18.28 refuses to cache an RRset of more than 100 records (CVE-2024-1737):
    // one A record per member, so a service with more than 100 members needs more.
    max-records-per-type 1000;
    {self.extra}
}};
controls {{ }};
zone "." {{ type hint; file "{self.tmp}/root.hints"; }};
zone "{ZONE}" {{ {zone} }};
""")
        self.check(["named-checkconf", str(self.conf)])

    def argv(self) -> list[str]:
        return ["named", "-4", "-g", "-c", str(self.conf)]


class PowerDns(Resolver):
    """PowerDNS Recursor with `forward-zones`; DNSSEC off, no security poll, root hint
    127.0.0.1."""

    kind = "pdns-recursor"

    def __init__(self, tmp: Path, upstream: str, upstream_port: int = 53, *,
                 extra: str = "") -> None:
        super().__init__(tmp, upstream, upstream_port)
        self.extra = extra
        # The control socket's path must fit a sockaddr_un (108 bytes): a pytest tmp_path
        # under a pytest-xdist worker's folder does not.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="pdns-"))

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    def configure(self) -> None:
        (self.tmp / "recursor.conf").write_text(f"""
local-address=127.0.0.1
local-port={self.port}
daemon=no
write-pid=no
socket-dir={self.socket_dir}
hint-file={self.tmp}/root.hints
dnssec=off
security-poll-suffix=
query-local-address=127.0.0.1
forward-zones={ZONE}={self.upstream}:{self.upstream_port}
threads=1
{self.extra}
""")

    def argv(self) -> list[str]:
        return ["pdns_recursor", f"--config-dir={self.tmp}"]


KINDS = ["unbound", "dnsmasq", "kresd", "bind-forward", "bind-stub", "bind-static-stub",
         "pdns-recursor"]


def make(kind: str, tmp: Path, upstream: str, extra: dict[str, str] | None = None) -> Resolver:
    """A resolver of ``kind`` (one of :data:`KINDS`) sending the zone to ``upstream``:53.
    ``extra`` maps a kind to config lines added to its defaults (dnsmasq: flags,
    separated by spaces)."""
    more = (extra or {}).get(kind, "")
    if kind == "unbound":
        return Unbound(tmp, upstream, stub_prime=True, extra=more)
    if kind == "dnsmasq":
        return Dnsmasq(tmp, upstream, extra=tuple(more.split()))
    if kind == "kresd":
        return Kresd(tmp, upstream, extra=more)
    if kind.startswith("bind-"):
        return Bind(tmp, upstream, kind.removeprefix("bind-"), extra=more)
    if kind == "pdns-recursor":
        return PowerDns(tmp, upstream, extra=more)
    raise ValueError(kind)
