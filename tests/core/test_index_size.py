"""What the index does to stay small at 100k members keeps its behaviour:
packed endpoints, namespaced tables, tallies instead of GlobalService objects,
republishing only what changed on the wire, kubernetes-asyncio without its generated
API, and list pages requested ahead."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import subprocess
import sys
from typing import Any

import pytest
import yaml

from dnsside.core.index import FREEZE_FROM, Index, IndexOptions
from dnsside.core.tables import Table
from dnsside.dns.wire import Answer
from dnsside.kubeapi.client import continue_token
from dnsside.model.events import (
    Kind,
    Remote,
    Replace,
    Synced,
    Upsert,
)
from dnsside.model.linkerd import (
    Endpoint,
    Endpoints,
    Record,
    SliceRecord,
    parse_object,
    parse_remote_service,
    parse_slice,
)
from dnsside.model.selectors import LabelSelector
from dnsside.sources.kube import KubeSource
from dnsside.sources.pacing import Pacing
from testkit import flatnet, objects
from testkit.fakekube import FakeKube
from testkit.inprocess import empty_index, synced_index
from testkit.serve import DEMO

pytestmark = pytest.mark.quick

ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]
ALL = frozenset({Kind.SERVICE, Kind.SLICE, Kind.LINK})


def records() -> tuple[Record, ...]:
    out = tuple(r for o in ITEMS if (r := parse_object(o)) is not None)
    assert len(out) == len(ITEMS)
    return out


def demo_index(*mcs: str) -> Index:
    return synced_index(records(), IndexOptions(cluster_name="east"), kinds=ALL, mcs_zones=mcs)


# --------------------------------------------------------------------------- records


ENDPOINTS = [
    Endpoint(("10.42.1.10",), True, "nginx-set-0", "nginx-set-0"),
    Endpoint(("10.42.1.11", "fd00::11"), False, None, "pod-x"),
    Endpoint(("10.42.1.12",), True, "web-1", None),
    Endpoint((), True, None, None),
]


def test_packed_endpoints_read_back_as_they_were() -> None:
    packed = Endpoints.pack(ENDPOINTS)
    assert isinstance(packed, Endpoints)
    assert list(packed) == ENDPOINTS and len(packed) == 4 and packed[1] == ENDPOINTS[1]
    assert packed.ready and packed == tuple(ENDPOINTS)
    again = Endpoints.pack(list(ENDPOINTS))
    assert again == packed and hash(again) == hash(packed)
    assert Endpoints.pack([dataclasses.replace(e, ready=False) for e in ENDPOINTS]) != packed
    assert not Endpoints.pack([ENDPOINTS[1]]).ready
    assert list(Endpoints.pack([])) == [] and len(Endpoints.pack([])) == 0


def test_a_name_holding_a_separator_stays_unpacked() -> None:
    odd = [Endpoint(("10.0.0.1",), True, "a\x1fb", None)]
    assert Endpoints.pack(odd) == tuple(odd) and type(Endpoints.pack(odd)) is tuple
    obj = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-svc-b060a"))
    obj["endpoints"][0]["targetRef"]["name"] = "pod\x1e1"
    sl = parse_object(obj)
    assert isinstance(sl, SliceRecord) and type(sl.endpoints) is tuple
    assert sl.endpoints[0].pod_name == "pod\x1e1" and sl.has_ready_endpoint


def test_parsed_slices_pack_and_share_the_gateway_endpoint() -> None:
    slices = [r for r in records() if isinstance(r, SliceRecord)]
    gateway = [s for s in slices if len(s.endpoints) == 1 and s.endpoints[0].hostname is None
               and s.endpoints[0].pod_name is None]
    assert len(gateway) > 2
    by_value: dict[Any, Any] = {}
    for s in gateway:  # equal gateway endpoints are one object
        assert by_value.setdefault(s.endpoints, s.endpoints) is s.endpoints
    for s in slices:
        assert s.has_ready_endpoint == any(e.ready for e in s.endpoints)


def test_table_is_a_mapping_keyed_by_namespace_and_name() -> None:
    t: Table[int] = Table()
    t[("a", "x")] = 1
    t[("b", "x")] = 2
    t[("a", "x")] = 3
    assert len(t) == 2 and t[("a", "x")] == 3 and ("b", "x") in t and ("b", "y") not in t
    assert sorted(t) == [("a", "x"), ("b", "x")] and sorted(t.records()) == [2, 3]
    assert t.get(("c", "x")) is None and t.pop(("c", "x"), 0) == 0
    assert t.pop(("a", "x")) == 3 and len(t) == 1 and sorted(t) == [("b", "x")]
    del t[("b", "x")]
    assert not t and list(t) == []
    with pytest.raises(KeyError):
        t.pop(("b", "x"))


# --------------------------------------------------------------------------- the index


def test_global_services_are_assembled_on_demand_and_match_the_answers() -> None:
    idx = demo_index()
    assert ("default", "nginx-svc") in idx.global_services
    gs = idx.global_services[("default", "nginx-svc")]
    assert gs == idx.assemble(("default", "nginx-svc"))
    ready = {a for m in gs.members if m.ready for a in m.addresses}
    reply = idx.responder.respond(b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                                  b"\tnginx-svc\x07default\nsvc-global\x00\x00\x01\x00\x01")
    assert reply is not None and reply.count(b"\x00\x01\x00\x01\x00\x00\x00") == len(ready)
    assert sum(idx.counts.member_counts().values()) == sum(len(g.members) for g in idx.global_services.values())
    with pytest.raises(KeyError):
        idx.global_services[("default", "no-such-service")]


def test_a_write_that_changes_no_answer_replaces_nothing() -> None:
    """An object rewritten with no change we read, or a change that moves no answer
    (a not-ready mirror's port list), keeps every Answer object and the serial."""
    idx = demo_index("clusterset.local.")
    idx.publisher.cut(idx.publisher.serial + 1)
    before = dict(idx.responder.answers)
    same = next(r for r in records() if r.name == "nginx-set-0-west")
    assert idx.apply([Upsert(same)]) == set()
    assert not idx.publisher.pending
    assert all(idx.responder.answers[k] is a for k, a in before.items())
    # A change that does move answers swaps only that service's entries.
    svc = copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == "nginx-set-0-west"))
    svc["spec"]["clusterIP"] = svc["spec"]["clusterIPs"][0] = "10.43.9.9"
    changed = idx.apply([Upsert(parse_object(svc))])  # type: ignore[arg-type]
    assert changed == {("default", "nginx-svc")} and idx.publisher.pending
    apex = {z.wire for z in idx.responder.zones}  # SOA, NS: re-made with the serial
    moved = {k for k, a in before.items()
             if idx.responder.answers.get(k) is not a and k[:-4] not in apex
             and b"dns-version" not in k}
    assert moved and all(b"\tnginx-svc\x07default" in k for k in moved), moved
    # Putting it back publishes the old bytes again (new objects, same wire).
    assert idx.apply([Upsert(same)]) == {("default", "nginx-svc")}
    assert all(_same(idx.responder.answers[k], before[k]) for k in moved)
    assert idx.responder.answers.keys() == before.keys()


def _same(a: Answer, b: Answer) -> bool:
    return (a.body, a.counts, a.counts_edns, a.flags, a.stat) == (
        b.body, b.counts, b.counts_edns, b.flags, b.stat)


# --------------------------------------------------------------------------- the kube source


def test_the_kube_source_loads_no_generated_api_until_asked() -> None:
    code = (
        "import sys, dnsside.sources.kube, dnsside.kubeapi.client as k\n"
        "assert k.ApiClient and k.load_kube_config\n"
        "generated = [m for m in sys.modules if m.startswith('kubernetes_asyncio.client.api.')"
        " or m.startswith('kubernetes_asyncio.client.models.')]\n"
        "assert not generated, generated\n"
        "import kubernetes_asyncio.client as c\n"
        "assert c.V1Pod.__name__ == 'V1Pod' and c.CoreV1Api.__name__ == 'CoreV1Api'\n"
        "from kubernetes_asyncio.client.models import V1Service\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr


def test_continue_token_guess() -> None:
    assert continue_token(b'{"kind":"ServiceList","metadata":{"resourceVersion":"5",'
                           b'"continue":"abc=="},"items":[]}') == "abc=="
    assert continue_token(b'{"metadata": {"continue": "x1"}, "items": []}') == "x1"
    assert continue_token(b'{"metadata":{"resourceVersion":"5"},"items":[]}') == ""


async def test_a_wrong_guess_of_the_next_page_costs_a_request_not_an_object(
    fake_kube: FakeKube,
) -> None:
    """An item whose annotation is called "continue" makes the guess wrong on the last
    page (no real token there): the list still ends with every object, once."""
    objs = [objects.service("default", f"svc-{i}", [f"10.0.0.{i + 1}"], [{"port": 80}],
                            annotations={"continue": "not-a-token"}) for i in range(5)]
    fake_kube.load(objs)
    source = KubeSource(fake_kube.kubeconfig,
                        pacing=Pacing(page_size=2, backoff_base=0.01, backoff_cap=0.1))
    batches = source.events()
    try:
        first = await asyncio.wait_for(anext(batches), 10)
    finally:
        await batches.aclose()  # type: ignore[attr-defined]  # an async generator
    replace = first[0]
    assert isinstance(replace, Replace)
    names = sorted(r.name for r in replace.records if Kind.of(r) is Kind.SERVICE)
    assert names == [f"svc-{i}" for i in range(5)]
    lists = [q for m, q in fake_kube.request_log if m == "GET" and q.startswith(
        "/api/v1/services?") and "watch" not in q]
    # The wrong guess cost at most one request (none if it was dropped before it left).
    assert len([q for q in lists if "not-a-token" not in q]) == 3
    assert len([q for q in lists if "not-a-token" in q]) <= 1


def test_a_bulk_step_collects_the_garbage_the_last_freeze_kept() -> None:
    """A freeze takes whatever is alive (the HTTP client's connections too); what
    of it later dies in a reference cycle is collected at the next bulk step, not kept for
    the life of the process."""
    import gc
    import weakref

    from dnsside.core.gcpause import bulk

    class Node:
        other: Any = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    with bulk(lambda: True):
        pass  # a relist of a big index: freezes the cycle, alive then
    del a, b
    gc.collect()
    assert alive() is not None  # frozen garbage: no collection sees it...
    with bulk(lambda: False):
        pass  # (even a relist that leaves a small index lets it go)
    assert alive() is None  # ...until the next bulk step
    assert gc.get_freeze_count() == 0


def test_a_bulk_load_that_leaves_a_small_index_takes_no_full_collection() -> None:
    """A full pass over the process costs as much as the process holds (in a test
    worker, every module and test before): a relist of a few services takes none, and
    freezes nothing; one that leaves a big index collects once and freezes it."""
    import gc

    def full_passes() -> int:
        return int(gc.get_stats()[2]["collections"])

    gc.unfreeze()
    index = empty_index(IndexOptions(cluster_name="east"))
    before = full_passes()
    index.apply([Replace(frozenset(Kind), tuple(
        r for r in map(parse_object, [*flatnet.local_objects(), flatnet.link("north")]) if r)),
        Synced()])
    assert index.synced and 0 < len(index.responder.answers) < FREEZE_FROM
    assert full_passes() == before and gc.get_freeze_count() == 0
    big = parse_remote_service(flatnet.service(
        "big", labels=dict(flatnet.REMOTE_DISCOVERY_LABELS)), "test", "north", LabelSelector(
            tuple(flatnet.REMOTE_DISCOVERY_LABELS.items())))
    assert big is not None
    eps = [flatnet.endpoint(f"10.100.{n // 250}.{n % 250 + 1}", f"big-{n}")
           for n in range(FREEZE_FROM)]
    index.apply([Remote("north", Replace(frozenset({Kind.SERVICE, Kind.SLICE}), (
        big, parse_slice(flatnet.endpoint_slice("big-1", "big", eps)))))])
    try:
        assert len(index.responder.answers) >= FREEZE_FROM
        assert full_passes() == before + 1 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
