"""A throw-away network namespace for tests that need a resolver on port 53.

Application resolvers (glibc, Go) read `/etc/resolv.conf` and ask port 53: the only way
to point them at a test's resolver without touching the machine's own resolver is a
network namespace. `ip netns exec NAME` bind-mounts `/etc/netns/NAME/resolv.conf` over
`/etc/resolv.conf` for the command it runs, so one file written by the test is the
system resolver configuration inside. The namespace has only a loopback interface
(127.0.0.0/8 and ::1): nothing a process started inside it sends can leave it.

Every process started through :meth:`Netns.popen` is stopped, and the namespace and
its `/etc/netns` directory removed, when the context exits, also when a test fails.
Needs root (CI runs as root).

A server that must stay in the test process (a fake API server whose state the test
changes directly) can listen inside too: :func:`enter_netns` moves only the calling
thread there, so a server whose event loop runs in a thread of its own binds its
sockets in the namespace while the rest of the test process stays outside
(``ThreadedKube(..., netns=ns.name)`` in testkit/threadedkube.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_serial = itertools.count()

# <sched.h>; Python's os.setns and os.CLONE_NEWNET arrive only in 3.12.
CLONE_NEWNET = 0x40000000


def enter_netns(name: str) -> None:
    """Move the calling thread, and the threads it starts from then on, into the network
    namespace ``name`` (as `ip netns add` made it). setns(2) applies to one thread only:
    a helper thread can serve inside while the test's own thread stays outside."""
    path = Path("/var/run/netns") / name
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns: {os.strerror(err)}", str(path))
    finally:
        os.close(fd)


class Netns:
    """``with Netns("apps", resolv_conf="nameserver 127.0.0.1\\n") as ns: ns.run([...])``."""

    def __init__(self, tag: str, resolv_conf: str = "nameserver 127.0.0.1\n") -> None:
        # Unique per process and call: other engineers' and other tests' namespaces coexist.
        self.name = f"dnsside-{tag}-{os.getpid()}-{next(_serial)}"
        self.etc = Path("/etc/netns") / self.name
        self.resolv_conf = resolv_conf
        self.procs: list[subprocess.Popen[Any]] = []

    def __enter__(self) -> Netns:
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        try:
            subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True,
                           capture_output=True)
            self.etc.mkdir(parents=True, exist_ok=True)
            (self.etc / "resolv.conf").write_text(self.resolv_conf)
            # glibc consults files before dns: an empty hosts file keeps the machine's
            # /etc/hosts out of the answers.
            (self.etc / "hosts").write_text("127.0.0.1 localhost\n")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_addresses(self, addresses: Sequence[str]) -> None:
        """Give the namespace's loopback interface these addresses too: pod addresses for
        servers started inside (dnsside never answers a loopback address, so a test's
        pods cannot live in 127.0.0.0/8)."""
        for address in addresses:
            subprocess.run(["ip", "-n", self.name, "addr", "add", f"{address}/32", "dev", "lo"],
                           check=True, capture_output=True)

    def cmd(self, args: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *args]

    def popen(self, args: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start a long-running process inside; it is stopped when the namespace goes."""
        proc: subprocess.Popen[Any] = subprocess.Popen(self.cmd(args), **kw)
        self.procs.append(proc)
        return proc

    def run(self, args: Sequence[str], timeout: float = 60, **kw: Any
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.cmd(args), capture_output=True, text=True, timeout=timeout,
                              **kw)

    def stop(self, proc: subprocess.Popen[Any], timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; always reaped."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()

    def close(self) -> None:
        # Signal every process first, then reap: members of a cluster (etcd) stop in
        # parallel instead of each waiting for peers that are already gone.
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            self.stop(proc)
        # Anything still inside was started by this test (through `ip netns exec`).
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        shutil.rmtree(self.etc, ignore_errors=True)

