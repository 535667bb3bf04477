"""Run a real `dnsside serve` process for a test, and talk to it with dnspython.

The process binds port 0; we learn the ports from its log lines, so tests never
race each other for a port. Log lines are collected by a reader thread so a
test can wait for one ("poll with a deadline", never a bare sleep).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import dns.message
import dns.query
import dns.rdatatype

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo-east.yaml"
# Names of the demo, and what they answer.
NGINX = "nginx-svc.default.svc-global"
NGINX_A = ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]
ROACH = "cockroachdb.db.svc-global"
BIG = "big.bulk.svc-global"  # testkit.rawdns.bulk_objects("big", "bulk", 120, ...) added to it
ZONE = "svc-global."

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Dnsside:
    """A `dnsside serve` subprocess on 127.0.0.1 with ephemeral ports."""

    def __init__(self, *args: str, wait_synced: bool = True, env: dict[str, str] | None = None,
                 listen: str = "127.0.0.1:0", wrap: Sequence[str] = (),
                 entry: Sequence[str] = ("-m", "dnsside"), timeout: float = 15.0) -> None:
        # Fixtures' probe Services have cluster-range ClusterIPs: a test probes only the
        # loopback gateways it starts itself, and says so with --gateway-probe.
        probe = [] if any(a.startswith("--gateway-probe") for a in args) else [
            "--gateway-probe", "off"]
        # ``wrap``: a command prefix, e.g. `ip netns exec NAME` (testkit/netns.py) or
        # `taskset -c 0` (bench/run.py); ``entry``: how the interpreter reaches dnsside's CLI
        # (bench/churn_memory.py puts its memory probe in between); ``timeout``: for the ports
        # and the first sync, which a benchmark's large topology makes longer.
        cmd = [*wrap, sys.executable, *entry, "serve", "--listen", listen,
               "--http-listen", "127.0.0.1:0", *probe, *args]
        # $POD_IP changes the default NS address: only a test that asks for it gets one.
        inherited = {k: v for k, v in os.environ.items() if k != "POD_IP"}
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**inherited, **(env or {})}, cwd=ROOT,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        dns_re = r"dns listening on udp\+tcp (\[[^\]]+\]|[^\s:\"]+):(\d+)"
        m = wait_for(lambda: self._match(dns_re), timeout, "dns port")
        self.host = m.group(1).strip("[]")
        self.port = int(m.group(2))
        h = wait_for(lambda: self._match(r"http listening on \S+?:(\d+)\b"), timeout,
                     "http port")
        self.http_port = int(h.group(1))
        if wait_synced:
            self.wait_log("initial sync done", timeout)
            if any(a.startswith(("--allow-transfer", "--tsig-key-file")) for a in args):
                # The first version is cut at the sync, before the first answer; its line
                # (and the NOTIFYs) follow the sync's.
                self.wait_log("zone version", timeout)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def _match(self, pattern: str) -> re.Match[str] | None:
        if self.proc.poll() is not None and not self._reader.is_alive():
            log = "\n".join(self.lines)
            raise AssertionError(f"dnsside exited {self.proc.returncode}:\n{log}")
        for line in list(self.lines):
            m = re.search(pattern, line)
            if m:
                return m
        return None

    def wait_log(self, text: str, timeout: float = 15.0) -> str:
        return wait_for(lambda: next((x for x in list(self.lines) if text in x), None), timeout,
                        f"log line {text!r}")

    def query(self, name: str, rdtype: str | int = "A", *, tcp: bool = False, edns: int = -1,
              payload: int = 1232, timeout: float = 3.0) -> dns.message.Message:
        q = dns.message.make_query(name, rdtype, use_edns=edns, payload=payload)
        if tcp:
            return dns.query.tcp(q, self.host, port=self.port, timeout=timeout)
        return dns.query.udp(q, self.host, port=self.port, timeout=timeout, ignore_trailing=False)

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def series(self, series: str) -> float | None:
        """The value of one series of /metrics, written as exported (``name{a="x"}``);
        None when it is not exported."""
        _, text = self.http("/metrics")
        m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def metric(self, name: str, **labels: str) -> float | None:
        """One series by name and labels, the labels in the order the metric declares."""
        label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return self.series(f"{name}{{{label_text}}}" if labels else name)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def freeze(self, timeout: float = 10.0) -> None:
        """SIGSTOP, and return only once every thread of the process is stopped.

        The signal is delivered asynchronously: a thread running on another core may
        still answer a query or two after ``kill`` returns, so a test that asks right
        away could be answered by a process it believes hung."""
        self.proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")

        def all_stopped() -> bool:
            states = []
            for task in tasks.iterdir():
                try:
                    stat = (task / "stat").read_text()
                except FileNotFoundError:  # a thread that ended meanwhile
                    continue
                states.append(stat.rsplit(")", 1)[1].split()[0])
            return bool(states) and all(s in ("T", "t") for s in states)

        wait_for(all_stopped, timeout, "every thread of dnsside to stop")

    def __enter__(self) -> Dnsside:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def expect_udp_io(srv: Dnsside, mode: str) -> Dnsside:
    """``srv``, after checking it moves UDP datagrams the ``mode`` way (`--udp-io`):
    "batch" silently falling back to "plain" would leave the batch path untested."""
    srv.wait_log(f"udp io: {mode} ")
    return srv


def answers(msg: dns.message.Message, rdtype: str = "A") -> list[str]:
    """The rdata of every answer RR of ``rdtype``, as text, sorted."""
    t = dns.rdatatype.from_text(rdtype)
    return sorted(rd.to_text() for rrset in msg.answer if rrset.rdtype == t for rd in rrset)


def demo_server(*extra: str, **kw: Any) -> Dnsside:
    return Dnsside("--source", str(DEMO), "--cluster-name", "east", *extra, **kw)


def parser_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every option string ``parser`` takes (``--ttl``, ``-h``...), with its action.
    argparse has no public list of them: this is the one place the tests read its
    private ``_actions``."""
    return {s: a for a in parser._actions for s in a.option_strings}


def run_cli(args: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dnsside", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
