"""A hostile linked cluster's API server costs only its own cluster (`--flat-network`).

`dnsside serve --flat-network` runs against three fake API servers (testkit/fakekube.py):
the local cluster `east`, a well-behaved linked cluster `west`, and `north`, whose API
server turns hostile once dnsside has synced it (:attr:`FakeKube.hostile`): malformed
JSON, one endless line, an object of many megabytes in a watch and in a list page, a list
that never ends, a trickle of one byte a second on a list and on a watch, a million
Services, too many endpoints. For each, seen from outside: `north` alone is marked capped
or failed, once in the log, in /metrics and in /debug/explain; every answer (west's, the
local ones, and north's last-known members) stays what it was while queries go on; the
bytes north managed to push are bounded; dnsside's peak resident memory (VmHWM in
/proc/<pid>/status) stays under :data:`RSS_BOUND`; and once north behaves again it is
synced again. The caps are shrunk with their flags so that every case takes seconds.

The namespace allow-list (`--flat-network-namespaces`) is tested here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from testkit.clusters import linked_cluster, local_cluster, serve_flat
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    link,
    local_objects,
    service,
    west_objects,
)
from testkit.serve import Dnsside, answers, run_cli, wait_for
from testkit.threadedkube import ThreadedKube

DB = "db.data.svc-global"
NAMES = (DB, "db-0.west.db.data.svc-global", "db-0.north.db.data.svc-global",
         "db-0.east.db.data.svc-global")
EAST_DB = {"10.42.0.10", "10.42.0.11"}
WEST_DB0, NORTH_DB0 = "10.244.1.5", "10.245.1.5"
# The caps the tests run with: small, so that each case takes seconds.
MAX_OBJECT_BYTES = 64 * 1024  # a list page may hold 8 times that: 512 KiB
CAPS = ("--flat-network-max-object-bytes", str(MAX_OBJECT_BYTES),
        "--flat-network-max-endpoints", "2000", "--flat-network-max-objects", "500",
        "--flat-network-timeout", "2")
# dnsside's peak resident memory through every case. Idle with these fixtures it is about
# 50 MB and stays under 65 MB through each case; with the byte cap lifted
# (--flat-network-max-object-bytes 1 GiB), the 64 MiB watch line or list page alone took
# it to 304-312 MB.
RSS_BOUND = 120 * 1024 * 1024
HUGE = 64 * 1024 * 1024  # bytes of the "object of many megabytes" north tries to send

Hostile = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


# --------------------------------------------------------------------------- the clusters


def north_objects() -> list[dict[str, Any]]:
    return [service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
            endpoint_slice("db-n1", "db", [endpoint(NORTH_DB0, "db-0")])]


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[ThreadedKube, ThreadedKube, ThreadedKube]]:
    """(east, west, north): east links both, with the Secrets `linkerd multicluster link`
    writes."""
    west = linked_cluster(tmp_path / "west", west_objects())
    north = linked_cluster(tmp_path / "north", north_objects())
    east = local_cluster(tmp_path / "east", [*local_objects(), link("north")],
                         {"west": west, "north": north})
    try:
        yield east, west, north
    finally:
        north.call(setattr, north.kube, "hostile", None)
        for k in (east, west, north):
            k.close()


# --------------------------------------------------------------------------- what is seen


@contextlib.contextmanager
def telling(srv: Dnsside) -> Iterator[None]:
    """On a failure, dnsside's log is part of the report."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- dnsside's log (end):\n"
                             + "\n".join(line[:400] for line in srv.lines[-60:])) from None


def addresses(srv: Dnsside, name: str = DB) -> set[str]:
    return set(answers(srv.query(name, "A"), "A"))


def everything(srv: Dnsside) -> dict[str, set[str]]:
    return {name: addresses(srv, name) for name in NAMES}


def metric(srv: Dnsside, name: str, labels: str = 'cluster="north"') -> float | None:
    return srv.series(f"{name}{{{labels}}}")


def count(srv: Dnsside, text: str) -> int:
    return sum(text in line for line in list(srv.lines))


def peak_rss(srv: Dnsside) -> int:
    status = Path(f"/proc/{srv.proc.pid}/status").read_text()
    m = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.M)
    assert m, status
    return int(m.group(1)) * 1024


class Steady:
    """Polls that also query every name and keep what differed from ``before``: the
    answers must not move while north misbehaves."""

    def __init__(self, srv: Dnsside, before: dict[str, set[str]]) -> None:
        self.srv = srv
        self.before = before
        self.queries = 0
        self.changed: list[dict[str, set[str]]] = []

    def __call__(self, check: Callable[[], Any]) -> Callable[[], Any]:
        def poll() -> Any:
            now = everything(self.srv)
            self.queries += len(now)
            if now != self.before:
                self.changed.append(now)
            return check()
        return poll


# --------------------------------------------------------------------------- hostile servers


def _watching(request: web.Request, plural: str) -> bool:
    return request.path.endswith("/" + plural) and request.query.get("watch") in ("1", "true")


def _listing(request: web.Request, plural: str) -> bool:
    return request.path.endswith("/" + plural) and "watch" not in request.query


class North:
    """What north's API server does once it turns hostile, and how many bytes it got out."""

    def __init__(self) -> None:
        self.sent = 0  # the most bytes one hostile answer got written
        self.stopped = False

    async def stream(self, request: web.Request, pieces: Iterator[bytes],
                     pause: float = 0.0) -> web.StreamResponse:
        """A 200 whose body is ``pieces``, written until they end or the client goes."""
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        sent = 0
        try:
            for piece in pieces:
                # Over TLS, a write to a connection the client dropped is discarded without
                # an error (asyncio's SSL transport), and need not yield to the loop: let
                # the loop see the connection go, and stop counting then.
                await asyncio.sleep(0)
                if self.stopped or request.transport is None or request.transport.is_closing():
                    break
                await resp.write(piece)
                sent += len(piece)
                self.sent = max(self.sent, sent)
                if pause:
                    await asyncio.sleep(pause)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # dnsside hung up: what this test wants
        return resp

    # Each behaviour: (which request it answers, how), and what north's state becomes.

    async def malformed_list(self, request: web.Request) -> web.StreamResponse | None:
        if not _listing(request, "services"):
            return None
        body = b'{"kind":"ServiceList","metadata":{"resourceVersion":"1"},"items":[{"meta'
        return web.Response(body=body, content_type="application/json")

    async def malformed_watch(self, request: web.Request) -> web.StreamResponse | None:
        if not _watching(request, "services"):
            return None
        return await self.stream(request, iter([b'{"type":"ADDED","object":{"metadata":}}\n']))

    async def endless_line(self, request: web.Request) -> web.StreamResponse | None:
        if not _watching(request, "endpointslices"):
            return None
        block = b"x" * 65536
        return await self.stream(request, iter([b'{"type":"ADDED","object":{"x":"',
                                                *[block] * (HUGE // len(block))]))

    async def huge_watch_object(self, request: web.Request) -> web.StreamResponse | None:
        if not _watching(request, "services"):
            return None
        block = b"y" * 65536  # valid JSON: only its size is wrong
        return await self.stream(request, iter([
            b'{"type":"ADDED","object":{"apiVersion":"v1","kind":"Service","metadata":'
            b'{"name":"big","namespace":"data","annotations":{"a":"',
            *[block] * (HUGE // len(block)), b'"}},"spec":{"clusterIP":"None"}}}\n']))

    async def huge_list_page(self, request: web.Request) -> web.StreamResponse | None:
        if not _listing(request, "endpointslices"):
            return None
        block = b"z" * 65536
        return await self.stream(request, iter([
            b'{"kind":"EndpointSliceList","metadata":{"resourceVersion":"1"},"items":'
            b'[{"metadata":{"name":"big","namespace":"data","annotations":{"a":"',
            *[block] * (HUGE // len(block)),
            b'"}},"addressType":"IPv4","endpoints":[]}]}']))

    async def endless_list(self, request: web.Request) -> web.StreamResponse | None:
        if not _listing(request, "services"):
            return None
        page = int(request.query.get("continue") or "0")
        meta = {"resourceVersion": "1", "continue": str(page + 1)}
        item = {k: v for k, v in service(f"s{page}", headless=False).items() if k != "kind"}
        return web.json_response({"kind": "ServiceList", "metadata": meta, "items": [item]})

    async def trickle_list(self, request: web.Request) -> web.StreamResponse | None:
        if not _listing(request, "services"):
            return None
        body = json.dumps({"kind": "ServiceList", "metadata": {"resourceVersion": "1"},
                           "items": []}).encode()
        return await self.stream(request, (body[i:i + 1] for i in range(len(body))), 1.0)

    async def trickle_watch(self, request: web.Request) -> web.StreamResponse | None:
        if not _watching(request, "services"):
            return None
        line = json.dumps({"type": "ADDED", "object": service("slow")}).encode() + b"\n"
        return await self.stream(request, (line[i:i + 1] for i in range(len(line))), 1.0)

    async def million_services(self, request: web.Request) -> web.StreamResponse | None:
        if not _listing(request, "services"):
            return None
        first = int(request.query.get("continue") or "0")
        limit = int(request.query.get("limit") or "500")
        items = [{k: v for k, v in service(f"s{n}", labels=dict(REMOTE_DISCOVERY_LABELS))
                  .items() if k != "kind"} for n in range(first, first + limit)]
        meta = {"resourceVersion": "1", "continue": str(first + limit),
                "remainingItemCount": 1_000_000 - first - limit}
        return web.json_response({"kind": "ServiceList", "metadata": meta, "items": items})

    async def expire_every_watch(self, request: web.Request) -> web.StreamResponse | None:
        """Every watch of services answered with 410 Expired at once (lists still work)."""
        if not _watching(request, "services"):
            return None
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "reason": "Expired", "code": 410,
                                  "message": "too old resource version"}, status=410)


def restart_watches(kube: Any, relist: bool) -> None:
    """End north's watches cleanly (as at their timeoutSeconds), so dnsside asks again; with
    ``relist``, a write and a compaction first, so that it resumes into a 410 and lists."""
    kube.end_streams()
    if relist:
        kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "bump", "namespace": "data"}})
        kube.compact()


# name: (behaviour, what starts it once north synced, state, cap or what the log says)
RELIST = "relist"  # history compacted, streams dropped: the watches resume into a 410
REWATCH = "rewatch"  # streams dropped: the watches resume
CASES: dict[str, tuple[str, str, str, str]] = {
    "malformed JSON in a list": ("malformed_list", RELIST, "lost", "not JSON"),
    "malformed JSON in a watch": ("malformed_watch", REWATCH, "lost", "not JSON"),
    "one endless line": ("endless_line", REWATCH, "capped", "bytes"),
    "an object of many megabytes in a watch": ("huge_watch_object", REWATCH, "capped",
                                               "bytes"),
    "an object of many megabytes in a list page": ("huge_list_page", RELIST, "capped",
                                                   "bytes"),
    "a list that never ends": ("endless_list", RELIST, "capped", "time"),
    "a trickle of one byte a second on a list": ("trickle_list", RELIST, "capped", "time"),
    "a trickle of one byte a second on a watch": ("trickle_watch", REWATCH, "capped", "time"),
    "a million Services": ("million_services", RELIST, "capped", "objects"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_api_server_costs_only_its_own_cluster(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube], case: str) -> None:
    east, west, north = clusters
    behaviour, start, state, told = CASES[case]
    west_lists = lambda: west.call(lambda: west.kube.count("/api/v1/services"))  # noqa: E731
    hostile = North()
    with serve_flat(east, *CAPS, "--log-level", "debug") as srv, telling(srv):
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0}, 15, "both synced")
        before = everything(srv)
        assert before["db-0.north.db.data.svc-global"] == {NORTH_DB0}
        steady = Steady(srv, before)
        listed = west_lists()

        north.call(setattr, north.kube, "hostile", getattr(hostile, behaviour))
        north.call(restart_watches, north.kube, start == RELIST)
        if state == "capped":
            wait_for(steady(lambda: metric(srv, "dnsside_remote_capped") == 1), 20,
                     "north capped")
            line = srv.wait_log(f"cluster north: flat network: capped ({told})")
            # It keeps trying (with backoff), and says so once.
            wait_for(steady(lambda: (metric(srv, "dnsside_remote_cap_hits_total",
                                            f'cap="{told}",cluster="north"') or 0) >= 2),
                     20, "a second try")
            assert count(srv, "cluster north: flat network: capped") == 1
            _, report = srv.http("/debug/explain?name=" + DB)
            assert (f"capped ({told} cap; Secret linkerd-multicluster/cluster-credentials-north)"
                    in report)
        else:
            wait_for(steady(lambda: metric(srv, "dnsside_remote_synced") == 0), 20,
                     "north failed")
            line = srv.wait_log("cluster north: flat network: its API is lost")
            assert told in line
            wait_for(steady(lambda: north.call(lambda: sum(
                n for (_, p), n in north.kube.requests.items() if "services" in p)) >= 8),
                20, "retries")
            assert count(srv, "cluster north: flat network: its API is lost") == 1
            assert metric(srv, "dnsside_remote_capped") == 0
            _, report = srv.http("/debug/explain?name=" + DB)
            assert "lost (Secret linkerd-multicluster/cluster-credentials-north): " in report
        assert "WARNING" in line.upper()
        assert "its last complete list stands" in line or "last-known members" in line
        # Only north: west followed and answered throughout, the same as before.
        assert metric(srv, "dnsside_remote_synced", 'cluster="west"') == 1
        assert metric(srv, "dnsside_remote_capped", 'cluster="west"') == 0
        assert west_lists() == listed  # west was not even listed again
        assert west.call(lambda: west.kube.open_streams) == 2
        assert not steady.changed, steady.changed[:3]
        assert steady.queries >= len(NAMES)
        assert everything(srv) == before
        assert srv.http("/readyz")[0] == 200
        # What north pushed was cut short, and dnsside's memory stayed bounded.
        assert hostile.sent < 16 * 1024 * 1024, hostile.sent
        assert peak_rss(srv) < RSS_BOUND, peak_rss(srv)

        # North behaves again: it is synced again, and its changes arrive.
        hostile.stopped = True
        north.call(setattr, north.kube, "hostile", None)
        north.call(north.kube.apply, endpoint_slice("db-n1", "db", [
            endpoint(NORTH_DB0, "db-0"), endpoint("10.245.1.6", "db-1")]))
        wait_for(lambda: metric(srv, "dnsside_remote_synced") == 1
                 and metric(srv, "dnsside_remote_capped") == 0, 20, "north synced again")
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0, "10.245.1.6"}, 10,
                 "north's change")


def test_watches_that_always_expire_are_relisted_with_backoff(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    """An API that answers every watch with 410 would have dnsside relist in a tight loop:
    the relists back off (said once per wait in the log), north stays synced with what its
    lists say, and nobody's answers move."""
    east, west, north = clusters
    hostile = North()
    with serve_flat(east, *CAPS, "--log-level", "debug") as srv, telling(srv):
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0}, 15, "both synced")
        before = everything(srv)
        steady = Steady(srv, before)
        north.call(setattr, north.kube, "hostile", hostile.expire_every_watch)
        north.call(restart_watches, north.kube, False)
        srv.wait_log("cluster north: watch services: watches expire within seconds of a list: "
                     "relisting in", 20)
        wait_for(steady(lambda: (metric(srv, "dnsside_relists_total",
                                        'resource="cluster north: services"') or 0) >= 3),
                 30, "three relists")
        assert not steady.changed, steady.changed[:3]
        assert metric(srv, "dnsside_remote_synced") == 1
        assert metric(srv, "dnsside_remote_synced", 'cluster="west"') == 1
        # Every relist after the first short-lived watch waited (the log says each wait).
        relists = metric(srv, "dnsside_relists_total", 'resource="cluster north: services"')
        assert relists is not None
        assert count(srv, "cluster north: watch services: watches expire within seconds") \
            >= relists - 1


def test_too_many_endpoints_keep_what_the_cluster_had(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    """Endpoints past --flat-network-max-endpoints, arriving by watch (the cluster grows):
    the watch stops there, the relist is over the cap too, and north keeps what it had."""
    east, _, north = clusters
    with serve_flat(east, *CAPS) as srv:
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0}, 15, "both synced")
        before = everything(srv)
        steady = Steady(srv, before)
        for i in range(4):  # 4 x 700 endpoints of a Service north does not select
            north.call(north.kube.apply, endpoint_slice(f"bulk-{i}", "bulk", [
                endpoint(f"10.246.{i}.{n % 250}", f"b-{n}") for n in range(700)]))
        wait_for(steady(lambda: metric(srv, "dnsside_remote_capped") == 1), 20, "capped")
        line = srv.wait_log("cluster north: flat network: capped (endpoints)")
        assert "more than 2000 endpoints" in line and "--flat-network-max-endpoints" in line
        assert "its last complete list stands (1 services)" in line
        wait_for(steady(lambda: (metric(srv, "dnsside_remote_cap_hits_total",
                                        'cap="endpoints",cluster="north"') or 0) >= 3),
                 20, "retries")
        assert count(srv, "cluster north: flat network: capped") == 1
        assert not steady.changed, steady.changed[:3]
        assert metric(srv, "dnsside_remote_synced", 'cluster="west"') == 1
        # Back under the cap: synced again.
        for i in range(2):
            north.call(north.kube.delete, "EndpointSlice", "data", f"bulk-{i}")
        wait_for(lambda: metric(srv, "dnsside_remote_synced") == 1
                 and metric(srv, "dnsside_remote_capped") == 0, 20, "north synced again")
        assert everything(srv) == before


def test_a_list_of_big_objects_is_read_in_smaller_pages(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    """Pages over the byte cap (twice --flat-network-max-object-bytes) of objects each
    under it: the list asks for fewer items per page, and nothing is capped."""
    east, _, north = clusters
    big = [endpoint_slice(f"big-{i}", "big", [
        endpoint(f"10.247.{i}.{n}", f"a-rather-long-pod-hostname-of-statefulset-big-{i}-{n}")
        for n in range(150)]) for i in range(12)]
    assert all(len(json.dumps(s)) < MAX_OBJECT_BYTES for s in big)
    assert len(json.dumps(big)) > 2 * MAX_OBJECT_BYTES
    north.call(north.kube.load, [service("big", labels=dict(REMOTE_DISCOVERY_LABELS)), *big])
    with serve_flat(east, *CAPS) as srv, telling(srv):
        pod = "a-rather-long-pod-hostname-of-statefulset-big-{}-{}.north.big.data.svc-global"
        wait_for(lambda: addresses(srv, pod.format(11, 149)) == {"10.247.11.149"}, 15,
                 "the last big pod")
        assert all(addresses(srv, pod.format(i, n)) == {f"10.247.{i}.{n}"}
                   for i in range(12) for n in (0, 77, 149))
        assert metric(srv, "dnsside_remote_capped") == 0
        assert metric(srv, "dnsside_remote_synced") == 1
        limits = north.call(lambda: [int(m.group(1)) for _, q in north.kube.request_log
                                     if "endpointslices?" in q and "watch" not in q
                                     and (m := re.search(r"limit=(\d+)", q))])
        assert limits[0] == 500 and min(limits) < 500, limits


# --------------------------------------------------------------------------- namespaces


def test_flat_network_namespaces_limit_what_linked_clusters_serve_and_what_is_watched(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    east, west, north = clusters
    west.call(west.kube.load, {"kind": "List", "items": [
        service("cache", "other", labels=dict(REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("cache-1", "cache", [endpoint("10.244.3.1", "cache-0")],
                       namespace="other")]})

    async def other_namespace(request: web.Request) -> web.StreamResponse | None:
        """North answers the list of namespace data with a Service of kube-system."""
        if not _listing(request, "services"):
            return None
        evil = {k: v for k, v in service("kube-dns", "kube-system",
                                         labels=dict(REMOTE_DISCOVERY_LABELS)).items()
                if k != "kind"}
        mine = {k: v for k, v in north_objects()[0].items() if k != "kind"}
        version = str(north.kube.resource_version)  # (on the fake's loop: it is the hook)
        return web.json_response({"kind": "ServiceList",
                                  "metadata": {"resourceVersion": version},
                                  "items": [evil, mine]})

    north.call(setattr, north.kube, "hostile", other_namespace)
    with serve_flat(east, *CAPS, "--flat-network-namespaces", "data") as srv:
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0}, 15, "both synced")
        assert srv.query("cache.other.svc-global").rcode() == 3  # NXDOMAIN: not served
        assert srv.query("kube-dns.kube-system.svc-global").rcode() == 3
        _, report = srv.http("/debug/explain?name=cache.other.svc-global")
        assert ("linked clusters' own objects in namespace other are ignored: it is not one of "
                "--flat-network-namespaces (data)") in report
        _, report = srv.http("/debug/explain?name=" + DB)
        assert "--flat-network-namespaces" not in report
        # Only namespace data was asked for.
        asked = west.call(lambda: {p for _, p in west.kube.requests})
        assert "/api/v1/namespaces/data/services" in asked
        assert "/api/v1/services" not in asked and not any("/other/" in p for p in asked)
        # What north sent for another namespace was ignored: logged once, counted.
        line = srv.wait_log("ignoring its objects in namespace 'kube-system'")
        assert "cluster north: list services in data" in line and "WARNING" in line.upper()
        assert (metric(srv, "dnsside_remote_ignored_objects_total",
                       'cluster="north",reason="namespace"') or 0) >= 1
        north.call(restart_watches, north.kube, True)  # a relist: the same, not told again
        wait_for(lambda: (metric(srv, "dnsside_remote_ignored_objects_total",
                                 'cluster="north",reason="namespace"') or 0) >= 2, 15,
                 "the relist")
        assert count(srv, "ignoring its objects in namespace") == 1
        assert metric(srv, "dnsside_remote_synced") == 1


def test_flat_network_namespaces_from_the_environment(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    east, west, _ = clusters
    west.call(west.kube.load, {"kind": "List", "items": [
        service("cache", "other", labels=dict(REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("cache-1", "cache", [endpoint("10.244.3.1", "cache-0")],
                       namespace="other")]})
    srv = serve_flat(east, env={"DNSSIDE_FLAT_NETWORK_NAMESPACES": "data,other"})
    with srv:
        wait_for(lambda: addresses(srv, "cache.other.svc-global") == {"10.244.3.1"}, 15,
                 "west's cache in namespace other")
        assert WEST_DB0 in addresses(srv)
        asked = west.call(lambda: {p for _, p in west.kube.requests})
        assert {"/api/v1/namespaces/data/services",
                "/api/v1/namespaces/other/services"} <= asked


@pytest.mark.parametrize("args, error", [
    (["--flat-network-namespaces", "data", "--namespace", "other"], "share no namespace"),
    (["--flat-network-namespaces", "Not_A_Namespace"], "is not a namespace name"),
    (["--flat-network-max-endpoints", "0"], "--flat-network-max-endpoints must be > 0"),
])
def test_flat_network_flags_are_checked(args: list[str], error: str) -> None:
    done = run_cli(["explain", DB, "--source", "kube", "--flat-network", *args])
    assert done.returncode == 2
    assert error in done.stderr


def test_relist_pacing_backs_off_after_short_watches_and_resets_after_a_long_one() -> None:
    import random

    from dnsside.sources.pacing import Backoff, RelistPacing

    pacing = RelistPacing(Backoff(0.5, 30.0, random.Random(7)), settled=10.0)
    assert pacing.delay(300.0) == 0.0  # a watch that ran for minutes: relist at once
    delays = [pacing.delay(0.1) for _ in range(8)]
    assert all(0.0 <= d <= min(30.0, 0.5 * 2 ** i) for i, d in enumerate(delays)), delays
    assert pacing.backoff.attempt == 8
    assert pacing.delay(10.0) == 0.0 and pacing.backoff.attempt == 0


# --------------------------------------------------------------------------- issue 33


def _north_watch(request: web.Request, plural: str = "services") -> bool:
    return _watching(request, plural)


def test_ignored_watch_events_are_told_once_per_reason_and_counted(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    """Events of an unknown type and DELETED events without a name, as fast as dnsside
    reads them (one warning each was 50 MB of log a second): one line per reason, every
    event counted, north's answers and everyone else's unmoved."""
    east, _, north = clusters
    hostile = North()
    weird = json.dumps({"type": "WEIRD", "object": {"metadata": {}}}).encode() + b"\n"
    nameless = json.dumps({"type": "DELETED", "object": {"metadata": {}}}).encode() + b"\n"

    async def junk(request: web.Request) -> web.StreamResponse | None:
        if not _north_watch(request):
            return None
        return await hostile.stream(request, iter([(weird + nameless) * 100] * 100))

    with serve_flat(east, *CAPS) as srv, telling(srv):
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0}, 15, "both synced")
        steady = Steady(srv, everything(srv))
        north.call(setattr, north.kube, "hostile", junk)
        north.call(restart_watches, north.kube, False)
        for reason in ("unknown-type", "no-name"):
            wait_for(steady(lambda r=reason: (metric(  # type: ignore[misc]
                srv, "dnsside_remote_ignored_objects_total",
                f'cluster="north",reason="{r}"') or 0) >= 10_000), 30, f"10,000 {reason}")
        assert count(srv, "skipping an event of unknown type 'WEIRD'") == 1
        assert count(srv, "skipping a DELETED event without namespace/name") == 1
        line = srv.wait_log("skipping an event of unknown type")
        assert "cluster north: watch services" in line and "told once" in line
        assert not steady.changed, steady.changed[:3]
        assert metric(srv, "dnsside_remote_synced") == 1
        assert metric(srv, "dnsside_remote_synced", 'cluster="west"') == 1


def test_watches_closed_at_once_are_reopened_with_backoff(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    """A server that answers each watch with one BOOKMARK and closes it was watched again at
    once, forever (19,460 requests in 10 s): a stream that neither lived nor carried a change
    is reopened after a backoff, told once, counted; one that carries a change, at once."""
    east, _, north = clusters
    hostile = North()

    async def bookmark_and_close(request: web.Request) -> web.StreamResponse | None:
        if not _north_watch(request):
            return None
        mark = {"type": "BOOKMARK", "object": {"kind": "Service", "apiVersion": "v1",
                "metadata": {"resourceVersion": request.query.get("resourceVersion", "1")}}}
        return await hostile.stream(request, iter([json.dumps(mark).encode() + b"\n"]))

    def watches() -> int:
        return north.call(lambda: sum(1 for _, q in north.kube.request_log
                                      if "/services?" in q and "watch=" in q))

    with serve_flat(east, *CAPS) as srv, telling(srv):
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0}, 15, "both synced")
        steady = Steady(srv, everything(srv))
        north.call(setattr, north.kube, "hostile", bookmark_and_close)
        north.call(restart_watches, north.kube, False)
        restarts = 'reason="closed-early",resource="cluster north: services"'
        wait_for(steady(lambda: (metric(srv, "dnsside_watch_restarts_total", restarts)
                                 or 0) >= 4), 20, "four early closes")
        # Over the next 40 polls of every name (seconds, at the tests' 0.5 s backoff cap),
        # a handful of watches, not thousands.
        first = watches()
        for _ in range(40):
            steady(lambda: None)()
        assert watches() - first < 4 * 40, watches() - first
        assert count(srv, "cluster north: watch services: the server closed the stream "
                          "after") == 1
        assert count(srv, "cluster north: watch services: stream closed by the server") == 0
        assert not steady.changed, steady.changed[:3]
        # A stream that carries a change is reopened at once again: north behaves.
        north.call(setattr, north.kube, "hostile", None)
        north.call(north.kube.apply, endpoint_slice("db-n1", "db", [
            endpoint(NORTH_DB0, "db-0"), endpoint("10.245.1.6", "db-1")]))
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0, "10.245.1.6"}, 15,
                 "north's change")


FORGED = "WARNING dnsside.index: cluster west: Secret rotated, use https://evil.example"


def test_a_linked_clusters_text_cannot_forge_a_log_line(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    """A newline (and an escape sequence) in a Status message, its reason and an object's
    name (a slice with an unsafe address, which is logged): escaped wherever dnsside says
    them (log, explain), never a line of their own."""
    east, _, north = clusters
    forged = f"etcd leader changed\n2026-11-28 15:00:00,000 {FORGED}\x1b[2K"

    async def status_with_newline(request: web.Request) -> web.StreamResponse | None:
        if _north_watch(request):
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "reason": "InternalError\nX", "code": 500,
                                      "message": forged}, status=500)
        if _listing(request, "endpointslices"):
            evil = endpoint_slice("db-n1", "db", [endpoint(NORTH_DB0, "db-0"),
                                                  endpoint("127.0.0.1", "db-9")])
            evil["metadata"]["name"] = f"x\n{FORGED}"
            item = {k: v for k, v in evil.items() if k != "kind"}
            version = str(north.kube.resource_version)
            return web.json_response({"kind": "EndpointSliceList", "metadata": {
                "resourceVersion": version}, "items": [item]})
        return None

    with serve_flat(east, *CAPS) as srv, telling(srv):
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0}, 15, "both synced")
        north.call(setattr, north.kube, "hostile", status_with_newline)
        north.call(restart_watches, north.kube, True)
        line = srv.wait_log("cluster north: flat network: its API is lost")
        assert "etcd leader changed\\n2026-11-28 15:00:00,000 WARNING" in line
        assert "\\x1b[2K" in line and "InternalError\\nX" in line
        _, report = srv.http("/debug/explain?name=" + DB)
        # (explain is JSON: the escape's backslash is written twice there)
        assert "etcd leader changed\\\\n2026" in report and "\\u001b" not in report
        wait_for(lambda: count(srv, "EndpointSlice data/x\\nWARNING dnsside.index") >= 1, 15,
                 "the slice with a newline in its name, told of its unsafe address")
        for text in srv.lines:
            assert not text.lstrip().startswith(("2026-11-28 15:00:00", FORGED)), text
            assert "\x1b" not in text, text
    # `dnsside explain`'s text, on an operator's terminal: the member's object named escaped.
    done = run_cli(["explain", "db-0.north." + DB, "--source", "kube", "--kubeconfig",
                    east.kubeconfig, "--cluster-name", "east", "--flat-network"])
    assert "EndpointSlice data/x\\nWARNING dnsside.index" in done.stdout, done.stdout
    assert not any(text.startswith(FORGED) for text in done.stdout.splitlines()), done.stdout


def test_an_event_flood_costs_only_its_own_clusters_freshness(
        clusters: tuple[ThreadedKube, ThreadedKube, ThreadedKube]) -> None:
    """North re-sends a one-pod slice as fast as dnsside reads it, 40,000 times: it is
    throttled (told once, a gauge, a counter, explain), its events are coalesced (its last
    state is what is answered), the others' answers do not move, and once it calms down it
    is no longer throttled (told once) and follows at once again. (The reads' pacing and
    the batches they make keep this flood far under the default share, 5 %, on a fake this
    small: bench/hostile_remote.py measures that; a share of 0.1 % makes the throttle bite.)"""
    east, _, north = clusters
    hostile = North()

    def tiny(ip: str) -> dict[str, Any]:
        return endpoint_slice("big-tiny", "big", [endpoint(ip, "tiny-0")])

    lines = [json.dumps({"type": "MODIFIED", "object": tiny(ip)}).encode() + b"\n"
             for ip in ("10.245.8.1", "10.245.8.2")]
    last = json.dumps({"type": "MODIFIED", "object": tiny("10.245.9.9")}).encode() + b"\n"

    async def flood(request: web.Request) -> web.StreamResponse | None:
        if not _north_watch(request, "endpointslices") or hostile.sent:
            return None  # one flood; then north is the fake again, holding its last state
        return await hostile.stream(request, iter([*(lines * 20_000), last]))

    north.call(north.kube.load, [service("big", labels=dict(REMOTE_DISCOVERY_LABELS)),
                                 tiny("10.245.8.1")])
    with serve_flat(east, *CAPS, "--flat-network-index-share", "0.001") as srv, telling(srv):
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0}, 15, "both synced")
        tiny_name = "tiny-0.north.big.data.svc-global"
        wait_for(lambda: addresses(srv, tiny_name) == {"10.245.8.1"}, 15, "north's big")
        steady = Steady(srv, everything(srv))
        north.call(setattr, north.kube, "hostile", flood)
        north.call(restart_watches, north.kube, False)
        north.call(north.kube.apply, tiny("10.245.9.9"))  # (seen only through the flood)
        wait_for(steady(lambda: (metric(srv, "dnsside_remote_throttled_events_total") or 0)
                        >= 1), 30, "throttled")
        line = srv.wait_log("cluster north: flat network: applying its watch events takes more")
        assert "WARNING" in line and "--flat-network-index-share (0.1% of the time)" in line
        throttled = "throttled: its changes come faster than --flat-network-index-share"
        wait_for(lambda: throttled in srv.http("/debug/explain?name=" + DB)[1], 30,
                 "explain says north is throttled")
        # The flood ends on 10.245.9.9: what is answered once it is over.
        wait_for(steady(lambda: metric(srv, "dnsside_remote_throttled") == 0
                        and addresses(srv, tiny_name) == {"10.245.9.9"}),
                 60, "no longer throttled, the last state answered")
        assert (metric(srv, "dnsside_remote_throttled_events_total") or 0) >= 1000
        assert hostile.sent > 1000 * len(lines[0])  # (it did flood)
        assert count(srv, "applying its watch events takes more") == 1
        assert count(srv, "cluster north: flat network: no longer throttled") == 1
        wait_for(lambda: throttled not in srv.http("/debug/explain?name=" + DB)[1], 10,
                 "explain no longer says so")
        assert not steady.changed, steady.changed[:3]
        assert metric(srv, "dnsside_remote_synced", 'cluster="west"') == 1
        # Calm again: a change is applied at once.
        north.call(setattr, north.kube, "hostile", None)
        north.call(north.kube.apply, endpoint_slice("db-n1", "db", [
            endpoint(NORTH_DB0, "db-0"), endpoint("10.245.1.6", "db-1")]))
        wait_for(lambda: addresses(srv) == EAST_DB | {WEST_DB0, NORTH_DB0, "10.245.1.6"}, 10,
                 "north's change")
