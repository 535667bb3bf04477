"""What each resolver shows while dnsside is not synced yet, hung and stopped, and that
none keeps serving an error for longer than the zone's TTL once dnsside answers again.

One dnsside (`--source kube` against the fake API server, `--ttl 3`) on port 53 of
a loopback address, the seven resolvers of the matrix in front of it, all asked at
once (a thread each) through one timeline:

1. not synced: the API server fails every list; dnsside answers SERVFAIL (EDE 14);
2. synced: the failures stop; every resolver must answer within TTL + SLACK;
3. hung (SIGSTOP): a name none of them has cached;
4. resumed (SIGCONT): every resolver must answer it within TTL + SLACK;
5. stopped (SIGTERM, the process is gone): another uncached name;
6. restarted on the same address: every resolver must answer within TTL + SLACK.

The resolvers run with their defaults except ``CACHE_SETTINGS``, each of which a
default run showed to be needed (docs/protocol.md has the table, defaults included).
BIND `type stub` is the one exception to rule 2: a stub zone whose first refresh
gets SERVFAIL stays unloaded until BIND retries (about a minute), so a stub started
before dnsside's first sync is checked separately (`cold_stub`); the one in the
timeline is started after the sync.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.exception
import dns.message
import dns.rcode
import pytest

from testkit.resolvers import KINDS, Resolver, make, serve_on_port_53
from testkit.serve import DEMO, Dnsside, answers, wait_for
from testkit.threadedkube import ThreadedKube

TTL = 3
SLACK = 5.0  # polling, scheduling, a loaded 2-core machine: far below every bad default
ASK_TIMEOUT = 12.0  # a stub resolver gives up long before (glibc: 5 s per try)
NGINX = "nginx-svc.default.svc-global"
HUNG = "nginx-set-0.east." + NGINX
STOPPED = "nginx-set-1.east." + NGINX
WANT = {NGINX: 5, HUNG: 1, STOPPED: 1}  # addresses in the right answer
# What a default run shows each of these needs so that an error never outlives TTL:
CACHE_SETTINGS = {
    # A SERVFAIL stays in the packet cache for packetcache-servfail-ttl (60 s); a query
    # that met a closed port is throttled per (server, name, type) for 60 s.
    "pdns-recursor": f"packetcache-servfail-ttl={TTL}\ndont-throttle-netmasks=127.0.0.0/8",
    # After timeouts unbound may stop asking a server it thinks is down (a 9 s wait after
    # the restart in one run out of three); keep probing it.
    "unbound": "    infra-keep-probing: yes",
    # kresd keeps every answer, SERVFAIL included, at least cache.min_ttl (5 s).
    "kresd": f"cache.min_ttl({TTL})",
}


class Outcome:
    """One resolver's reply to one question: rcode (or "timeout"), EDE codes, seconds."""

    def __init__(self, msg: dns.message.Message | None, seconds: float) -> None:
        self.msg, self.seconds = msg, seconds
        if msg is None:
            self.rcode, self.ede, self.count = "timeout", (), 0
        else:
            self.rcode = dns.rcode.to_text(msg.rcode())
            self.ede = tuple(o.code for o in msg.options if o.otype == 15)  # type: ignore[attr-defined]
            self.count = len(answers(msg))

    def __repr__(self) -> str:
        if self.msg is None:
            return f"no answer in {self.seconds:.0f} s"
        ede = f" (EDE {', '.join(map(str, self.ede))})" if self.ede else ""
        return f"{self.rcode}{ede} after {self.seconds:.1f} s"


def outcome(r: Resolver, name: str, timeout: float) -> Outcome:
    started = time.monotonic()
    try:
        msg: dns.message.Message | None = r.query(name, "A", timeout=timeout)
    except dns.exception.Timeout:
        msg = None
    return Outcome(msg, time.monotonic() - started)


def each(resolvers: list[Resolver], fn: Callable[[Resolver], object]) -> dict[str, object]:
    """``fn`` on every resolver at once, a thread each; {kind: result or exception}."""
    out: dict[str, object] = {}

    def run(r: Resolver) -> None:
        try:
            out[r.kind] = fn(r)
        except Exception as exc:
            out[r.kind] = exc

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in resolvers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    return out


def recovery(resolvers: list[Resolver], name: str, since: float,
             timeout: float = TTL + SLACK + 10) -> dict[str, object]:
    """Seconds from ``since`` until each resolver gives the right answer for ``name``
    (inf when it did not within ``timeout``)."""

    def one(r: Resolver) -> float:
        try:
            wait_for(lambda: outcome(r, name, 2.0).count == WANT[name], timeout,
                     f"{r.kind} to answer {name}")
        except AssertionError:
            return float("inf")
        return time.monotonic() - since

    return each(resolvers, one)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedKube]:
    k = ThreadedKube(tmp_path_factory.mktemp("kube"))
    k.call(k.kube.load, DEMO)
    yield k
    k.close()


def dnsside_args(kube: ThreadedKube) -> tuple[str, ...]:
    return ("--kubeconfig", kube.kubeconfig, "--cluster-name", "east", "--ttl", str(TTL),
            "--kube-backoff-cap", "0.3")


def start(kinds: list[str], tmp: Path, upstream: str, tag: str = "") -> list[Resolver]:
    resolvers = []
    for kind in kinds:
        (tmp / (kind + tag)).mkdir()
        resolvers.append(make(kind, tmp / (kind + tag), upstream, CACHE_SETTINGS))
    started = each(resolvers, lambda r: r.start(ready=lambda m: True))  # any reply will do
    failed = {k: v for k, v in started.items() if isinstance(v, Exception)}
    for r in resolvers:
        if failed:
            r.stop()
    assert not failed, failed
    return resolvers


def test_outages_through_every_resolver(kube: ThreadedKube, tmp_path: Path) -> None:
    kube.call(kube.kube.fail_next, 100_000, 500, match=lambda r: "services" in r.path)
    report: dict[str, dict[str, object]] = {k: {} for k in KINDS}
    srv: Dnsside = serve_on_port_53(*dnsside_args(kube), wait_synced=False)
    host = srv.host
    resolvers: list[Resolver] = []
    try:
        wait_for(lambda: srv.query(NGINX).rcode() == dns.rcode.SERVFAIL, what="SERVFAIL")
        resolvers = start(KINDS, tmp_path, host)  # bind-stub here is the cold one

        # 1-2: not synced, then synced.
        for kind, o in each(resolvers, lambda r: outcome(r, NGINX, ASK_TIMEOUT)).items():
            report[kind]["not synced"] = o
        kube.call(kube.kube.clear_failures)
        srv.wait_log("initial sync done")
        back = time.monotonic()
        warm = [r for r in resolvers if r.kind != "bind-stub"]
        (cold_stub,) = [r for r in resolvers if r.kind == "bind-stub"]
        for kind, s in recovery(warm, NGINX, back).items():
            report[kind]["after sync"] = s
        time.sleep(max(0.0, back + TTL + SLACK - time.monotonic()))  # past the bound
        cold = outcome(cold_stub, NGINX, ASK_TIMEOUT)
        report["bind-stub"]["after sync"] = f"{cold!r} at {time.monotonic() - back:.0f} s"
        assert cold.rcode == "SERVFAIL", "the cold stub zone is still not loaded (see above)"
        assert "refresh: unexpected rcode (SERVFAIL)" in cold_stub.log_text()
        cold_stub.stop()
        resolvers = [*warm, *start(["bind-stub"], tmp_path, host, "-warm")]

        # 3-4: hung, then resumed.
        srv.freeze()
        try:
            for kind, o in each(resolvers, lambda r: outcome(r, HUNG, ASK_TIMEOUT)).items():
                report[kind]["hung"] = o
        finally:
            srv.proc.send_signal(signal.SIGCONT)
        back = time.monotonic()
        for kind, s in recovery(resolvers, HUNG, back).items():
            report[kind]["after SIGCONT"] = s

        # 5-6: stopped, then restarted on the same address.
        assert srv.stop() == 0
        for kind, o in each(resolvers, lambda r: outcome(r, STOPPED, ASK_TIMEOUT)).items():
            report[kind]["stopped"] = o
        srv = Dnsside(*dnsside_args(kube), listen=f"{host}:53")
        back = time.monotonic()
        for kind, s in recovery(resolvers, STOPPED, back).items():
            report[kind]["after restart"] = s
    finally:
        for r in resolvers:
            r.stop()
        srv.__exit__()

    table = "\n".join(f"  {kind:17} " + "; ".join(
        f"{k}: {v:.1f} s" if isinstance(v, float) else f"{k}: {v!r}" for k, v in row.items())
        for kind, row in report.items())
    print(f"resolver outages (TTL {TTL} s; 'after ...' = seconds until the right answer):\n"
          + table)  # shown with pytest -s; docs/protocol.md has the table

    for kind, row in report.items():
        for phase in ("not synced", "hung", "stopped"):
            o = row[phase]
            assert isinstance(o, Outcome), (kind, phase, o)
            assert o.rcode in ("SERVFAIL", "timeout"), f"{kind} while {phase}: {o!r}\n{table}"
        assert row["not synced"].rcode == "SERVFAIL", f"{kind}\n{table}"  # type: ignore[attr-defined]
        for phase in ("after sync", "after SIGCONT", "after restart"):
            seconds = row[phase]
            if kind == "bind-stub" and phase == "after sync":
                continue  # the cold stub, checked above
            assert isinstance(seconds, float), (kind, phase, seconds)
            assert seconds <= TTL + SLACK, f"{kind} kept an error {seconds:.1f} s {phase}\n{table}"
