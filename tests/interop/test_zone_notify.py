"""dnsside as the hidden primary of NSD, BIND and Knot at once, the way it is deployed:
TSIG on every transfer and NOTIFY (``--tsig-key-file``), NOTIFY to each secondary
(``--notify``), IXFR from the history. A gateway that dies is out of every secondary's
answers within 3 s, carried by IXFR; dnsside stopped, the secondaries keep answering; a
new dnsside comes back with a higher serial and they catch up; a wrong key or an address
outside ``--allow-transfer`` gets nothing."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.gateways import FakeGateway, probed_demo
from testkit.resolvers import free_port
from testkit.secondaries import (
    BindSecondary,
    KnotSecondary,
    NsdSecondary,
    Secondary,
    Tsig,
    serial,
)
from testkit.serve import DEMO, Dnsside, answers, wait_for

NGINX = "nginx-svc.default.svc-global"
WEST = {"10.43.179.60", "10.43.218.18", "10.43.245.244"}
KEY: Tsig = ("xfr-key", "hmac-sha256", "cTaeNLkiyNPuYPuAmMvWRxrqIubyQ0EQavBnSShpBDU=")
WRONG: Tsig = ("xfr-key", "hmac-sha256", "qG0NP1r0jWTGNBJdSf3Dgxz3WqRNGDCsy8mFezNEFnI=")
KINDS: list[type[Secondary]] = [NsdSecondary, BindSecondary, KnotSecondary]


def key_file(tmp: Path, key: Tsig = KEY) -> Path:
    """The key as `tsig-keygen` writes it."""
    name, algorithm, secret = key
    path = tmp / "xfr.key"
    path.write_text(f'key "{name}" {{\n\talgorithm {algorithm};\n\tsecret "{secret}";\n}};\n')
    return path


@pytest.fixture
def gateways() -> Iterator[dict[str, FakeGateway]]:
    gws = {c: FakeGateway().start() for c in ("west", "north", "south")}
    yield gws
    for gw in gws.values():
        gw.stop()


def primary(tmp: Path, gateways: dict[str, FakeGateway], ports: list[int],
            listen: str = "127.0.0.1:0") -> Dnsside:
    notify = [a for p in ports for a in ("--notify", f"127.0.0.1:{p}")]
    return Dnsside("--source", str(probed_demo(tmp, gateways)), "--cluster-name", "east",
                   "--gateway-probe", "on", "--allow-transfer", "127.0.0.1",
                   "--tsig-key-file", str(key_file(tmp)), *notify, listen=listen)


@contextlib.contextmanager
def secondaries(tmp: Path, srv: Dnsside, ports: list[int]) -> Iterator[list[Secondary]]:
    started: list[Secondary] = []
    try:
        for kind, port in zip(KINDS, ports, strict=True):
            (tmp / kind.kind).mkdir(exist_ok=True)
            sec = kind(tmp / kind.kind, srv, ["svc-global"], refresh=3600, tsig=KEY,
                       notify=True, port=port)
            sec.start()
            started.append(sec)
        yield started
    finally:
        for sec in started:
            sec.stop()


def west_in(sec: Secondary) -> bool:
    return bool(WEST & set(answers(sec.query(NGINX, "A"))))


def test_a_dead_gateway_leaves_every_secondary_within_3s_by_notify_and_ixfr(
        tmp_path: Path, gateways: dict[str, FakeGateway]) -> None:
    ports = [free_port() for _ in KINDS]
    with primary(tmp_path, gateways, ports) as srv, \
            secondaries(tmp_path, srv, ports) as secs:
        for sec in secs:
            wait_for(lambda sec=sec: west_in(sec), 15, f"west in {sec.kind}'s answers")
        ixfr_before = srv.metric("dnsside_transfers_total", result="ok", type="ixfr") or 0
        axfr_before = srv.metric("dnsside_transfers_total", result="ok", type="axfr") or 0
        gateways["west"].stop()
        stopped = time.monotonic()
        gone: dict[str, float] = {}

        def all_gone() -> bool:
            for sec in secs:
                if sec.kind not in gone and not west_in(sec):
                    gone[sec.kind] = time.monotonic() - stopped
            return len(gone) == len(secs)

        wait_for(all_gone, 15, "west out of every secondary")
        print("\nwest out of the secondaries' answers after "
              + ", ".join(f"{k} {s:.2f}s" for k, s in gone.items()))
        assert WEST.isdisjoint(answers(srv.query(NGINX, "A")))
        for sec in secs:  # the members that stay are still there
            assert {"10.42.1.10", "10.42.1.11"} <= set(answers(sec.query(NGINX, "A")))
        # Each asked IXFR (a secondary holding a version does) and got the differences.
        wait_for(lambda: (srv.metric("dnsside_transfers_total", result="ok", type="ixfr")
                          or 0) >= ixfr_before + len(secs), 10, "an IXFR from each")
        assert srv.metric("dnsside_transfers_total", result="ok", type="axfr") == axfr_before
        assert srv.metric("dnsside_transfers_total", result="full", type="ixfr") == 0
        assert (srv.metric("dnsside_notifies_total", result="ok") or 0) >= 2 * len(secs)
        line = srv.wait_log("differences, ")
        assert "IXFR from " in line
        assert max(gone.values()) <= 3.0, gone


def test_a_pod_gone_and_a_link_deleted_reach_every_secondary_by_ixfr(tmp_path: Path) -> None:
    """The other changes the service mirror makes: a pod's mirror deleted, then a whole
    Link (its mirrors stay behind, orphaned, and leave the answers). dnsside reads the
    demo from a file it re-reads every 0.2 s; each change is in all three secondaries'
    answers within 3 s of the file's write, carried by IXFR."""
    demo = yaml.safe_load(DEMO.read_text())
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(demo))
    ports = [free_port() for _ in KINDS]
    notify = [a for p in ports for a in ("--notify", f"127.0.0.1:{p}")]
    with Dnsside("--source", str(path), "--cluster-name", "east", "--reload-interval", "0.2",
                 "--allow-transfer", "127.0.0.1", "--tsig-key-file", str(key_file(tmp_path)),
                 *notify) as srv, secondaries(tmp_path, srv, ports) as secs:
        for sec in secs:
            assert set(answers(sec.query(NGINX, "A"))) >= WEST
        ixfr_before = srv.metric("dnsside_transfers_total", result="ok", type="ixfr") or 0
        changes: list[tuple[str, Callable[[dict[str, Any]], bool], set[str]]] = [
            ("a pod's mirror deleted", lambda o: o["metadata"]["name"].startswith(
                "nginx-set-2-west"), WEST - {"10.43.245.244"}),
            ("Link west deleted", lambda o: o["kind"] == "Link"
             and o["metadata"]["name"] == "west", set()),
        ]
        for what, gone, west_left in changes:
            demo["items"] = [o for o in demo["items"] if not gone(o)]
            path.write_text(yaml.safe_dump(demo))
            written = time.monotonic()
            took = {}
            for sec in secs:
                wait_for(lambda sec=sec: WEST & set(answers(sec.query(NGINX, "A")))
                         == west_left, 15, f"{sec.kind} to show: {what}")
                took[sec.kind] = time.monotonic() - written
            print(f"\n{what}: in the secondaries after "
                  + ", ".join(f"{k} {s:.2f}s" for k, s in took.items()))
            assert WEST & set(answers(srv.query(NGINX, "A"))) == west_left
            assert max(took.values()) <= 3.0, (what, took)
        wait_for(lambda: (srv.metric("dnsside_transfers_total", result="ok", type="ixfr")
                          or 0) >= ixfr_before + 2 * len(secs), 10, "an IXFR per change each")
        assert srv.metric("dnsside_transfers_total", result="full", type="ixfr") == 0


def test_secondaries_outlive_dnsside_and_catch_up_with_a_new_one(
        tmp_path: Path, gateways: dict[str, FakeGateway]) -> None:
    """dnsside stopped: each secondary still answers, at the serial it held. A new dnsside
    on the same address (a restart) numbers its first version by a later second, NOTIFYs
    them, and each transfers the zone again: its serial goes up, never back."""
    ports = [free_port() for _ in KINDS]
    first = primary(tmp_path, gateways, ports)
    listen = f"127.0.0.1:{first.port}"
    with first, secondaries(tmp_path, first, ports) as secs:
        held = {sec.kind: sec.serial("svc-global") for sec in secs}
        expected = answers(first.query(NGINX, "A"))
        first.stop()
        for sec in secs:
            assert sec.serial("svc-global") == held[sec.kind]
            assert answers(sec.query(NGINX, "A")) == expected
        with primary(tmp_path, gateways, ports, listen=listen) as second:
            new = serial(second.port, "svc-global")
            assert new is not None and all(new > s for s in held.values() if s), (new, held)
            for sec in secs:
                wait_for(lambda sec=sec: sec.serial("svc-global") == new, 15,
                         f"{sec.kind} to catch up with the new dnsside")
                assert answers(sec.query(NGINX, "A")) == answers(second.query(NGINX, "A"))
            # The new process has no history to answer their IXFR from: the whole zone.
            second.wait_log("whole zone, the history does not reach its serial")


def test_a_wrong_key_and_a_stranger_get_nothing(tmp_path: Path,
                                                gateways: dict[str, FakeGateway]) -> None:
    port = free_port()
    with primary(tmp_path, gateways, [port]) as srv:
        nsd = NsdSecondary(tmp_path, srv, ["svc-global"], refresh=3600, tsig=WRONG,
                           notify=True, port=port)
        try:
            nsd.start(until="listening")
            # Its signed SOA checks get NOTAUTH (BADSIG), its transfers too, if it tries one.
            wait_for(lambda: (srv.metric("dnsside_queries_total", qtype="none",
                                         rcode="NOTAUTH", transport="udp") or 0)
                     + (srv.metric("dnsside_transfers_total", result="badtsig", type="axfr")
                        or 0) + (srv.metric("dnsside_transfers_total", result="badtsig",
                                            type="ixfr") or 0) > 0,
                     15, "dnsside to turn the wrong key down")
            assert nsd.serial("svc-global") is None  # it never got the zone
        finally:
            nsd.stop()
        name, algorithm, secret = KEY
        for source, key, why in (("127.0.0.2", KEY, "not in --allow-transfer"),
                                 ("127.0.0.1", None, "no TSIG, and --tsig-key-file")):
            args = ["dig", f"@{srv.host}", "-p", str(srv.port), "-b", source, "AXFR",
                    "svc-global", "+time=3", "+tries=1"]
            if key:
                args[1:1] = ["-y", f"{algorithm}:{name}:{secret}"]
            out = subprocess.run(args, capture_output=True, text=True, timeout=20).stdout
            assert "Transfer failed" in out, out
            srv.wait_log(why)
        assert (srv.metric("dnsside_transfers_total", result="refused", type="axfr") or 0) >= 1
        assert (srv.metric("dnsside_transfers_total", result="badtsig", type="axfr") or 0) >= 1
        signed = subprocess.run(["dig", f"@{srv.host}", "-p", str(srv.port), "-y",
                                 f"{algorithm}:{name}:{secret}", "AXFR", "svc-global",
                                 "+time=3", "+tries=1"], capture_output=True, text=True,
                                timeout=20).stdout
        assert "XFR size" in signed and "Transfer failed" not in signed, signed
