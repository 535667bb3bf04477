"""Through a secondary: how NSD, Knot and BIND order the records they serve as dnsside's
secondaries (docs/zone-transfer.md's table), and `--locality local-first` moves reaching
all three within 3 s, by NOTIFY and IXFR, as any other change does."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import dns.message
import dns.query
import pytest
import yaml

from testkit.resolvers import free_port
from testkit.secondaries import BindSecondary, KnotSecondary, NsdSecondary, Secondary
from testkit.serve import DEMO, Dnsside, answers, wait_for
from tests.interop.test_zone_notify import KINDS, key_file, secondaries

NGINX = "nginx-svc.default.svc-global"
EAST = ["10.42.1.10", "10.42.1.11"]
WEST = ["10.43.179.60", "10.43.218.18", "10.43.245.244"]


def firsts(port: int, n: int = 60) -> collections.Counter[str]:
    """Which record comes first, over ``n`` UDP answers (random query IDs)."""
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(n):
        reply = dns.query.udp(dns.message.make_query(NGINX, "A"), "127.0.0.1", port=port,
                              timeout=3)
        seen[reply.answer[0][0].to_text()] += 1
    return seen


def with_line(kind: type[Secondary], conf: str, after: str, line: str) -> type[Secondary]:
    """``kind`` with ``line`` added after the first ``after`` of its configuration."""

    class Configured(kind):  # type: ignore[valid-type,misc]
        def configure(self) -> list[str]:
            argv = super().configure()
            path = self.tmp / conf
            path.write_text(path.read_text().replace(after, after + line, 1))
            return argv

    Configured.__name__ = f"{kind.__name__}+{line.strip()}"
    return Configured


# (server, its setting, whether every record must come first sometimes)
ORDERS = [
    (NsdSecondary, False),
    (with_line(NsdSecondary, "nsd.conf", "server:\n", "    round-robin: yes\n"), True),
    (KnotSecondary, False),
    (with_line(KnotSecondary, "knot/knot.conf", "server:\n", "    answer-rotation: on\n"),
     True),
    (BindSecondary, True),  # rrset-order's default: random
    (with_line(BindSecondary, "named.conf", "options {\n",
               "    rrset-order { order cyclic; };\n"), True),
]


@pytest.mark.parametrize("kind,rotates", ORDERS, ids=[k.__name__ for k, _ in ORDERS])
def test_how_each_secondary_orders_an_rrset(tmp_path: Path, kind: type[Secondary],
                                            rotates: bool) -> None:
    with Dnsside("--source", str(DEMO), "--cluster-name", "east",
                 "--allow-transfer", "127.0.0.1/32") as srv:
        sec = kind(tmp_path, srv, ["svc-global"])
        try:
            sec.start()
            seen = firsts(sec.port)
        finally:
            sec.stop()
    print(f"\n{kind.__name__}: first records over 60 answers {dict(seen)}")
    assert sum(seen.values()) == 60
    if rotates:
        assert set(seen) == set(EAST + WEST), seen  # each of the 5 first at least once
    else:
        assert len(seen) == 1, seen  # always the same record first


def test_locality_moves_reach_every_secondary_by_notify_and_ixfr(tmp_path: Path) -> None:
    """dnsside (local-first) reads the demo from a file re-read every 0.2 s and NOTIFYs
    NSD, BIND and Knot; the last local member going unready and one coming back are each
    in all three secondaries' answers within 3 s of the file's write."""
    demo = yaml.safe_load(DEMO.read_text())
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(demo))
    slice_ = next(o for o in demo["items"] if o["metadata"]["name"] == "nginx-svc-b060a")
    ports = [free_port() for _ in KINDS]
    notify = [a for p in ports for a in ("--notify", f"127.0.0.1:{p}")]
    with Dnsside("--source", str(path), "--cluster-name", "east", "--reload-interval", "0.2",
                 "--locality", "local-first", "--allow-transfer", "127.0.0.1",
                 "--tsig-key-file", str(key_file(tmp_path)), *notify) as srv, \
            secondaries(tmp_path, srv, ports) as secs:
        for sec in secs:
            wait_for(lambda sec=sec: answers(sec.query(NGINX, "A")) == EAST, 15,
                     f"{sec.kind} to serve the local view")
        ixfr_before = srv.metric("dnsside_transfers_total", result="ok", type="ixfr") or 0
        for what, ready, want in (("last local member unready", (False, False), WEST),
                                  ("a local member ready again", (False, True), EAST[1:])):
            for endpoint, value in zip(slice_["endpoints"], ready, strict=True):
                endpoint["conditions"]["ready"] = value
            path.write_text(yaml.safe_dump(demo))
            written = time.monotonic()
            took = {}
            for sec in secs:
                wait_for(lambda sec=sec, want=want: answers(sec.query(NGINX, "A")) == want,
                         15, f"{sec.kind} to show: {what}")
                took[sec.kind] = time.monotonic() - written
            print(f"\n{what}: in the secondaries after "
                  + ", ".join(f"{k} {s:.2f}s" for k, s in took.items()))
            assert answers(srv.query(NGINX, "A")) == want
            assert max(took.values()) <= 3.0, (what, took)
        wait_for(lambda: (srv.metric("dnsside_transfers_total", result="ok", type="ixfr")
                          or 0) >= ixfr_before + 2 * len(secs), 10, "an IXFR per move each")
