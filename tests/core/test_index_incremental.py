"""A big Service changed one endpoint at a time (issue 33, item 12), without sockets.

The index keeps a big service's members and their encoding between rebuilds
(core/members.KeptMembers, core/encode.EncodedMembers) and re-encodes only what changed.
What it answers must be exactly what an index built afresh from the same objects
answers, byte for byte, in every zone and with every flag that shapes answers, after
every kind of change; and one endpoint's change must cost one member, not the service.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import dns.name
import pytest

from dnsside.core.index import Index, IndexOptions
from dnsside.dns.zone import ZoneOptions
from dnsside.model.endpoints import Endpoint
from dnsside.model.events import (
    Delete,
    Event,
    Kind,
    Remote,
    RemoteState,
    RemoteStatus,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import (
    Port,
    Record,
    Role,
    ServiceRecord,
    SliceRecord,
    parse_object,
    parse_remote_service,
    parse_slice,
)
from dnsside.model.selectors import LabelSelector
from testkit import objects
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    link,
    local_objects,
    service,
)
from testkit.inprocess import empty_index, synced_index

# Quick tier: the tests marked below; the exhaustive ones run in the full suite (the
# quick tier must stay under a minute).

PODS = 80  # per cluster: past core/members.KEEP_FROM, so the big-service path is taken
MCS = "clusterset.local."
SELECTOR = LabelSelector(tuple(REMOTE_DISCOVERY_LABELS.items()))
EXPORTED = {"mirror.linkerd.io/exported": "true"}
Pods = dict[int, tuple[str, bool]]  # pod number → (address, ready)


def v4(n: int, shift: int = 0) -> str:
    return f"10.{40 + (n + shift) // 250}.{(n + shift) % 250}.7"


def pods(count: int = PODS, shift: int = 0) -> Pods:
    return {n: (v4(n, shift), True) for n in range(count)}


def pods6(count: int) -> Pods:
    return {n: (f"fd00:42::{n:x}", True) for n in range(count)}


def a_slice(name: str, state: Pods, *, prefix: str = "big", ipv6: bool = False,
            ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    eps = [endpoint(ip, f"{prefix}-{n}", ready=ready) for n, (ip, ready) in sorted(state.items())]
    return endpoint_slice(name, "big", eps, address_type="IPv6" if ipv6 else "IPv4",
                          ports=ports)


class World:
    """The objects as they are now: east's exported headless `big` (two IPv4 slices and an
    IPv6 one for its first pods: dual-stack hostnames) and north's own `big`, read
    directly (--flat-network), in one slice."""

    def __init__(self) -> None:
        self.local = {"big-a": a_slice("big-a", {n: p for n, p in pods().items() if n % 2}),
                      "big-b": a_slice("big-b", {n: p for n, p in pods().items()
                                                 if not n % 2}),
                      "big-6": a_slice("big-6", pods6(20), ipv6=True)}
        self.north = {"big-1": a_slice("big-1", pods(shift=1000), prefix="nb")}

    def local_records(self) -> tuple[Record, ...]:
        objs = [*local_objects(), link("north"), service("big", labels=EXPORTED),
                *self.local.values()]
        return tuple(r for r in map(parse_object, objs) if r is not None)

    def north_records(self) -> tuple[Record, ...]:
        big = parse_remote_service(service("big", labels=dict(REMOTE_DISCOVERY_LABELS)),
                                   "test", "north", SELECTOR)
        assert big is not None
        return (big, *map(parse_slice, self.north.values()))


def world_index(zone: ZoneOptions, world: World) -> Index:
    index = empty_index(IndexOptions(cluster_name="east", zone=zone), mcs_zones=(MCS,))
    index.apply([Replace(frozenset(Kind), world.local_records()), Synced()])
    index.apply([Remote("north", Replace(frozenset({Kind.SERVICE, Kind.SLICE}),
                                         world.north_records())),
                 RemoteStatus("north", RemoteState.SYNCED, "", "test")])
    return index


A_IN = b"\x00\x01\x00\x01"
SOA_IN = b"\x00\x06\x00\x01"  # the apex's SOA holds the serial: a clock, not the answers


def answers(index: Index) -> dict[bytes, tuple[bytes, bytes, object]]:
    return {k: (a.body, a.counts, a.stat) for k, a in index.responder.answers.items()
            if not k.endswith(SOA_IN)}


def same_as_afresh(index: Index, world: World, zone: ZoneOptions,
                   fresh: Index | None = None) -> None:
    """What ``index`` answers (and assembles) is what an index made from ``world`` at once
    (``fresh``, if given) answers: every question, every byte."""
    fresh = world_index(zone, world) if fresh is None else fresh
    got, want = answers(index), answers(fresh)
    assert got.keys() == want.keys(), sorted(got.keys() ^ want.keys())[:5]
    differ = [k for k in want if got[k] != want[k]]
    assert not differ, differ[:5]
    assert dict(index.responder.names).keys() == dict(fresh.responder.names).keys()
    key = ("data", "big")
    assert index.global_services[key] == fresh.global_services[key]


@functools.cache
def afresh(zone: ZoneOptions) -> Index:
    """The index made from an unchanged `World` at once, under ``zone``: made once per zone
    and only read (the tests compare against it)."""
    return world_index(zone, World())


def north_slice(world: World, state: Pods, **kw: Any) -> Event:
    world.north["big-1"] = a_slice("big-1", state, prefix="nb", **kw)
    return Remote("north", Upsert(parse_slice(world.north["big-1"])))


def local_slice(world: World, name: str, state: Pods, **kw: Any) -> Event:
    world.local[name] = a_slice(name, state, **kw)
    return Upsert(parse_slice(world.local[name]))


def north_pods() -> Pods:
    return pods(shift=1000)


# Each change: what it does to the world, as the event a source would send.
CHANGES: dict[str, Callable[[World], Event]] = {
    "re-sent identical": lambda w: Remote("north", Upsert(parse_slice(w.north["big-1"]))),
    "one not ready": lambda w: north_slice(w, {**north_pods(), 7: (v4(7, 1000), False)}),
    "one moved": lambda w: north_slice(w, {**north_pods(), 9: ("10.99.0.9", True)}),
    "one gone": lambda w: north_slice(w, {n: p for n, p in north_pods().items() if n != 3}),
    "one added": lambda w: north_slice(w, {**north_pods(), PODS: ("10.99.1.1", True)}),
    "all moved": lambda w: north_slice(w, pods(shift=5000)),
    "an unsafe address": lambda w: north_slice(w, {**north_pods(), 4: ("127.0.0.1", True)}),
    "ports changed": lambda w: north_slice(w, north_pods(),
                                           ports=objects.ports([("web", 80), ("web2", 80)])),
    "a local one not ready": lambda w: local_slice(
        w, "big-a", {n: (v4(n), n != 25) for n in range(PODS) if n % 2}),
    "a dual-stack one moved": lambda w: local_slice(
        w, "big-6", {**pods6(20), 2: ("fd00:99::2", True)}, ipv6=True),
    "a local slice gone": lambda w: (w.local.pop("big-b"), Delete(Kind.SLICE, "data",
                                                                   "big-b"))[1],
}

ZONES = {
    "default": ZoneOptions(),
    "round-robin off, local-first": ZoneOptions(round_robin=False, srv_priority="local-first"),
    "publish not ready": ZoneOptions(publish_not_ready=True),
}


def apply(index: Index, event: Event, ahead: bool) -> None:
    """Apply ``event``; ``ahead``: as the server does, its work done ahead first, in small
    steps (Index.prepare), which must change no answer."""
    if ahead:
        before = answers(index)
        steps = sum(1 for _ in index.prepare([event], chunk=7))
        assert answers(index) == before and steps >= 0
    index.apply([event])


@pytest.mark.parametrize("zone", ZONES.values(), ids=list(ZONES))
@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
@pytest.mark.parametrize("ahead", [False, True], ids=["applied", "prepared"])
def test_a_big_service_changed_answers_what_an_index_made_afresh_answers(
        change: str, zone: ZoneOptions, ahead: bool) -> None:
    world = World()
    index = world_index(zone, world)
    assert len(index.global_services[("data", "big")].members) == 2 * PODS
    apply(index, CHANGES[change](world), ahead)
    same_as_afresh(index, world, zone)
    # And back (the kept members of the change are the ones then replaced).
    world2 = World()
    index.apply([Replace(frozenset(Kind), world2.local_records()),
                 Remote("north", Replace(frozenset({Kind.SERVICE, Kind.SLICE}),
                                         world2.north_records()))])
    same_as_afresh(index, world2, zone, afresh(zone))


@pytest.mark.parametrize("ahead", [False, True], ids=["applied", "prepared"])
def test_changes_one_after_another_answer_what_an_index_made_afresh_answers(
        ahead: bool) -> None:
    zone = ZoneOptions()
    world = World()
    index = world_index(zone, world)
    for change in CHANGES.values():
        apply(index, change(world), ahead)
        same_as_afresh(index, world, zone)


@pytest.mark.quick
def test_the_pods_a_change_leaves_alone_keep_their_very_answers() -> None:
    """One pod of north's changed: every other pod's answer stays the very object the
    responder held (nothing re-encoded or rewritten for it); the changed pod's is new."""
    world = World()
    index = world_index(ZoneOptions(), world)
    table = index.responder.answers
    name = "{}.north.big.data.svc-global."
    key = {n: dns.name.from_text(name.format(f"nb-{n}")).to_wire() + A_IN for n in (8, 9)}
    before = {n: table[k] for n, k in key.items()}
    index.apply([CHANGES["one moved"](world)])  # pod 9
    assert table[key[8]] is before[8]
    assert table[key[9]] is not before[9] and table[key[9]].body != before[9].body


@pytest.mark.quick
def test_one_endpoint_changed_encodes_one_member_not_the_service() -> None:
    """The index's count of members encoded (once per zone: svc-global and the MCS zone):
    one endpoint's change re-encodes that one; a slice re-sent identical none; every
    address changed, every member of that slice."""
    world = World()
    index = world_index(ZoneOptions(), world)
    before = index.publisher.encoded_members
    index.apply([CHANGES["one moved"](world)])
    assert index.publisher.encoded_members - before == 2  # one member, in two zones
    before = index.publisher.encoded_members
    assert index.apply([CHANGES["re-sent identical"](world)]) == set()
    assert index.publisher.encoded_members == before
    index.apply([CHANGES["all moved"](world)])
    assert index.publisher.encoded_members - before == 2 * PODS
    # The server's way: a slice all changed is encoded ahead, in steps; then applied.
    world.north["big-1"] = a_slice("big-1", north_pods(), prefix="nb")
    back = Remote("north", Upsert(parse_slice(world.north["big-1"])))
    before = index.publisher.encoded_members
    steps = sum(1 for _ in index.prepare([back], chunk=10))
    assert steps == PODS // 10 and index.publisher.encoded_members - before == 2 * PODS
    before = index.publisher.encoded_members
    index.apply([back])
    assert index.publisher.encoded_members == before  # all of it done ahead
    same_as_afresh(index, world, ZoneOptions())
    before = index.publisher.encoded_members
    index.apply([CHANGES["a local one not ready"](world)])  # it leaves the answers
    assert index.publisher.encoded_members == before


# Linkerd's per-pod mirrors of a big headless service of west: one Service and one
# slice (the gateway's endpoint) per pod.
HTTP = Port("http", 8080, "TCP")
MIRROR_KINDS = frozenset({Kind.SERVICE, Kind.SLICE})  # no Link list: every cluster counts


def pod_mirror(n: int, ip: str | None = None) -> ServiceRecord:
    return ServiceRecord("data", f"web-{n}-west", Role.POD_MIRROR, "web", "west",
                         f"web-{n}", (ip or f"10.96.{n // 250}.{n % 250 + 1}",), (HTTP,))


def gateway_slice(n: int, ready: bool = True) -> SliceRecord:
    return SliceRecord("data", f"web-{n}-west-x", f"web-{n}-west",
                       (Endpoint(("172.18.0.3",), ready, None, None),), (HTTP,))


def mirrors_index(records: list[Record]) -> Index:
    return synced_index(records, IndexOptions(cluster_name="east"), kinds=MIRROR_KINDS,
                        mcs_zones=(MCS,))


@pytest.mark.quick
def test_one_per_pod_mirror_changed_encodes_one_member_and_answers_as_afresh() -> None:
    """A service of PODS per-pod mirrors: one mirror's gateway endpoint not ready, then
    another's ClusterIP moved, each re-encode one member (per zone), and the answers are
    an index made afresh's."""
    records: dict[str, Record] = {}
    for n in range(PODS):
        records[f"svc{n}"], records[f"slice{n}"] = pod_mirror(n), gateway_slice(n)
    index = mirrors_index(list(records.values()))
    assert len(index.global_services[("data", "web")].members) == PODS
    for change, key in ((gateway_slice(5, ready=False), "slice5"),
                        (pod_mirror(9, "10.97.0.9"), "svc9")):
        before = index.publisher.encoded_members
        records[key] = change
        index.apply([Upsert(change)])
        assert index.publisher.encoded_members - before == 2 - (key == "slice5") * 2  # not ready: gone
        fresh = mirrors_index(list(records.values()))
        assert answers(index) == answers(fresh)
        assert index.global_services[("data", "web")] == fresh.global_services[("data", "web")]


@pytest.mark.quick
@pytest.mark.parametrize("moved", [0, 1499], ids=["first", "last"])
def test_a_service_past_one_answers_size_answers_as_afresh_after_one_pod_moved(
        moved: int) -> None:
    """1,500 of north's pods: more SRV records than an answer holds, so a change past the
    ones it holds keeps the SRV answers as they were, one among them makes them anew;
    either way, the bytes of an index made afresh."""
    world = World()
    world.north["big-1"] = a_slice("big-1", pods(1500, shift=1000), prefix="nb")
    zone = ZoneOptions()
    index = world_index(zone, world)
    srv = dns.name.from_text("big.data.svc-global.").to_wire() + b"\x00\x21\x00\x01"
    before = index.responder.answers[srv]
    assert len(before.body) > 60_000  # full: the records that fit, not all 1,500 + 80
    index.apply([north_slice(world, {**pods(1500, shift=1000), moved: ("10.99.7.7", True)})])
    same_as_afresh(index, world, zone)
    assert (index.responder.answers[srv] is before) is (moved == 1499)
