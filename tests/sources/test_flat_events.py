"""The flat-network source on its own, in process, against a local and two remote fake API
servers: the events it yields for one linked cluster, and a Secret that changes under a
synced watch (rotated credentials, a cluster moved to another API server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dnsside.model.events import (
    Event,
    Kind,
    Remote,
    RemoteState,
    RemoteStatus,
    Replace,
)
from dnsside.model.linkerd import LinkRecord, SliceRecord, parse_link
from dnsside.sources.pacing import Pacing
from dnsside.sources.remote import FirstLists, FlatNetworkSource, LinkedOptions
from testkit.fakekube import FakeKube, running_fake_kube
from testkit.fakekube_rbac import REMOTE_ACCESS_RULES
from testkit.flatnet import REMOTE_DISCOVERY_LABELS, endpoint, endpoint_slice, link, service

pytestmark = pytest.mark.quick

FAST = Pacing(backoff_base=0.01, backoff_cap=0.1)
USER = "remote-access"


async def remote(tmp: Path, name: str, token: str, pod_ip: str) -> AsyncIterator[FakeKube]:
    (tmp / name).mkdir()
    async with running_fake_kube(tmp / name, bookmark_interval=0.2) as kube:
        kube.add_token(token, USER)
        kube.restrict(USER, REMOTE_ACCESS_RULES)
        kube.load({"kind": "List", "items": [
            service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
            endpoint_slice("db-1", "db", [endpoint(pod_ip, "db-0")])]})
        yield kube


def addresses(event: Remote) -> set[str]:
    assert isinstance(event.event, Replace)
    return {a for r in event.event.records if isinstance(r, SliceRecord)
            for e in r.endpoints for a in e.addresses}


async def next_replace(events: AsyncIterator[list[Event]], seen: list[Event]) -> Remote:
    async with asyncio.timeout(10):
        async for batch in events:
            seen.extend(batch)
            for e in batch:
                if isinstance(e, Remote) and isinstance(e.event, Replace):
                    return e
    raise AssertionError("the source ended")


async def test_a_changed_secret_reconnects_with_it(fake_kube: FakeKube, tmp_path: Path) -> None:
    gen_a = remote(tmp_path, "west-a", "token-a", "10.244.1.5")
    gen_b = remote(tmp_path, "west-b", "token-b", "10.250.9.9")
    west_a, west_b = await anext(gen_a), await anext(gen_b)
    try:
        fake_kube.apply(west_a.link_credentials("west", token="token-a"))
        the_link: LinkRecord = parse_link(link("west"))
        source = FlatNetworkSource(lambda: [the_link], fake_kube.kubeconfig, pacing=FAST,
                                   options=LinkedOptions(secret_recheck=0.1))
        source.links_changed()
        events = source.events()
        seen: list[Event] = []
        first = await next_replace(events, seen)
        assert first.cluster == "west" and addresses(first) == {"10.244.1.5"}
        assert first.event.kinds == frozenset({Kind.SERVICE, Kind.SLICE})
        # west moves to another API server, with other credentials: the Secret says so.
        fake_kube.apply(west_b.link_credentials("west", token="token-b"))
        second = await next_replace(events, seen)
        assert addresses(second) == {"10.250.9.9"}
        states = [e.state for e in seen if isinstance(e, RemoteStatus)]
        assert RemoteState.CREDENTIALS not in states and RemoteState.LOST not in states
        assert states[0] is RemoteState.CONNECTING and states[-1] is RemoteState.SYNCED
        await events.aclose()
    finally:
        for gen in (gen_a, gen_b):
            with pytest.raises(StopAsyncIteration):
                await anext(gen)


# --------------------------------------------------------------------------- first lists

def first_list(cluster: str) -> Remote:
    return Remote(cluster, Replace(frozenset({Kind.SERVICE, Kind.SLICE}), ()))


def test_the_first_lists_of_clusters_started_together_go_on_as_one_batch() -> None:
    firsts = FirstLists(wait=5.0)
    for cluster in ("west", "north", "south"):
        firsts.started(cluster)
    connecting = [RemoteStatus("west", RemoteState.CONNECTING)]
    assert firsts.take(connecting, 0.0) == connecting  # nothing held: straight on
    assert firsts.take([first_list("west")], 1.0) is None
    assert firsts.timeout(1.5) == 4.5
    # A cluster failing on its credentials is not waited for.
    assert firsts.take([RemoteStatus("north", RemoteState.CREDENTIALS, "no Secret")],
                       2.0) is None
    out = firsts.take([first_list("south")], 3.0)
    assert out is not None and [getattr(e, "cluster", None) for e in out] == [
        "west", "north", "south"]
    # Synced clusters' events are not held.
    upsert = [Remote("west", Replace(frozenset({Kind.SLICE}), ()))]
    assert firsts.take(upsert, 4.0) == upsert and firsts.timeout(4.0) is None


def test_a_slow_cluster_holds_the_others_back_for_wait_seconds_at_most() -> None:
    firsts = FirstLists(wait=2.0)
    firsts.started("west")
    firsts.started("north")
    assert firsts.take([first_list("west")], 10.0) is None
    assert firsts.flush(11.0) is None
    out = firsts.flush(12.0)
    assert out is not None and len(out) == 1
    late = [first_list("north")]
    assert firsts.take(late, 20.0) == late  # nothing held any more: at once
