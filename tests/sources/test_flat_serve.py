"""`dnsside serve --flat-network` against two fake API servers: the local cluster `east`
and the linked cluster `west`, which accepts only the bearer token in the Link's Secret
and grants it exactly Linkerd's remote-access ClusterRole.

Every point of the feature is seen from outside: DNS answers (dnspython), /metrics, the
log, /debug/explain. Polls have deadlines; no test sleeps to synchronise.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.clusters import (
    REMOTE_TOKEN,
    REMOTE_USER,
    linked_cluster,
    local_cluster,
    serve_flat,
)
from testkit.fakekube_rbac import REMOTE_ACCESS_RULES_PRE_214
from testkit.flatnet import (
    REMOTE_DISCOVERY_LABELS,
    endpoint,
    endpoint_slice,
    link,
    local_objects,
    service,
    v1_endpoints,
    west_objects,
)
from testkit.serve import Dnsside, answers, run_cli, wait_for
from testkit.threadedkube import ThreadedKube

SECRET = "linkerd-multicluster/cluster-credentials-west"
DB = "db.data.svc-global"
EAST_DB = {"10.42.0.10", "10.42.0.11"}
MIRROR = "10.96.50.1"


@pytest.fixture
def west(tmp_path: Path) -> Iterator[ThreadedKube]:
    """The linked cluster: its API accepts only the remote-access token, with Linkerd's
    remote-access role (no Secrets, no Links; Services, EndpointSlices, Endpoints...)."""
    k = linked_cluster(tmp_path / "west", west_objects())
    yield k
    k.close()


@pytest.fixture
def east(tmp_path: Path, west: ThreadedKube) -> Iterator[ThreadedKube]:
    """The local cluster, with the Link to west and the Secret `linkerd multicluster link`
    writes for it."""
    k = local_cluster(tmp_path / "east", local_objects(), {"west": west})
    yield k
    k.close()


def addresses(srv: Dnsside, name: str = DB, rdtype: str = "A") -> set[str]:
    return set(answers(srv.query(name, rdtype), rdtype))


def metric(srv: Dnsside, name: str, cluster: str = "west") -> float | None:
    return srv.metric(name, cluster=cluster)


def count(srv: Dnsside, text: str) -> int:
    return sum(text in line for line in list(srv.lines))


def test_remote_pods_answer_by_their_own_addresses(east: ThreadedKube,
                                                   west: ThreadedKube) -> None:
    with serve_flat(east) as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        assert addresses(srv) == EAST_DB | {"10.244.1.5"}  # db-1 not ready; no mirror
        assert addresses(srv, "db-0.west.db.data.svc-global") == {"10.244.1.5"}
        srv_answer = srv.query("_grpc._tcp.db.data.svc-global", "SRV")
        targets = {rd.target.to_text() for rrset in srv_answer.answer for rd in rrset}
        assert "db-0.west.db.data.svc-global." in targets
        assert {rd.port for rrset in srv_answer.answer for rd in rrset} == {26257}
        assert metric(srv, "dnsside_remote_synced") == 1
        assert metric(srv, "dnsside_remote_credentials_valid") == 1
        _, report = srv.http("/debug/explain?name=db-0.west.db.data.svc-global")
        assert "flat network (pod IP)" in report
        # What dnsside asked west for: Services and EndpointSlices, nothing else.
        asked = {path for method, path in west.call(lambda: list(west.kube.requests))
                 if method == "GET"}
        assert "/api/v1/services" in asked and "/apis/discovery.k8s.io/v1/endpointslices" in asked
        assert not any("secrets" in p or "links" in p for p in asked)


def test_a_remote_change_reaches_the_answers(east: ThreadedKube, west: ThreadedKube) -> None:
    with serve_flat(east) as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        west.call(west.kube.apply, endpoint_slice(
            "db-x1y2z", "db", [endpoint("10.244.1.5", "db-0"), endpoint("10.244.1.6", "db-1"),
                               endpoint("10.244.1.7", "db-2")]))
        wait_for(lambda: {"10.244.1.6", "10.244.1.7"} <= addresses(srv), 10, "db-1 and db-2")
        # A label edit that unselects the Service takes its pods out (the mirror is back).
        west.call(west.kube.apply, service("db", labels={}))
        wait_for(lambda: addresses(srv) == EAST_DB | {MIRROR}, 10, "west's db unselected")


def test_a_lost_remote_keeps_its_members_and_says_so_once(east: ThreadedKube,
                                                          west: ThreadedKube) -> None:
    with serve_flat(east, "--log-level", "debug") as srv:  # the retries are debug lines
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        west.run(west.kube.set_unreachable(True))
        wait_for(lambda: metric(srv, "dnsside_remote_synced") == 0, 10, "remote_synced 0")
        srv.wait_log("its API is lost")
        assert addresses(srv) == EAST_DB | {"10.244.1.5"}  # stale, never dropped
        # Retries go on while it is away; the operator hears it once.
        wait_for(lambda: count(srv, "cluster west: watch") >= 3, 10, "three failed attempts")
        assert count(srv, "its API is lost") == 1
        assert not [line for line in srv.lines if "WARNING dnsside.kube: cluster west" in line]
        assert "its API is lost (watch " in srv.wait_log("its API is lost")
        west.run(west.kube.set_unreachable(False))
        wait_for(lambda: metric(srv, "dnsside_remote_synced") == 1, 15, "remote_synced 1")
        assert addresses(srv) == EAST_DB | {"10.244.1.5"}


def test_before_its_first_sync_a_remote_adds_nothing_and_holds_up_nothing(
        east: ThreadedKube, west: ThreadedKube) -> None:
    # Failing rather than unreachable: a port given up before dnsside starts may become
    # one of dnsside's own ephemeral ports.
    west.call(setattr, west.kube, "failing_status", 503)
    with serve_flat(east) as srv:  # waits for the initial (local) sync
        assert srv.http("/readyz")[0] == 200
        assert addresses(srv) == EAST_DB | {MIRROR}
        # west's series appears once its watch has reported (after the local sync, which
        # readiness waits for, not before), and says not synced while west fails
        wait_for(lambda: metric(srv, "dnsside_remote_synced") == 0, 10, "west not synced")
        assert addresses(srv) == EAST_DB | {MIRROR}
        west.call(setattr, west.kube, "failing_status", 0)
        wait_for(lambda: addresses(srv) == EAST_DB | {"10.244.1.5"}, 15, "west synced late")


def test_a_deleted_link_takes_its_members_at_once(east: ThreadedKube,
                                                  west: ThreadedKube) -> None:
    with serve_flat(east) as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        east.call(east.kube.delete, "Link", "linkerd-multicluster", "west")
        # The mirror is an orphan now, and west's own pods went with the Link.
        wait_for(lambda: addresses(srv) == EAST_DB, 10, "west gone")
        srv.wait_log("Link gone: its watch stopped")
        wait_for(lambda: metric(srv, "dnsside_remote_synced") is None, 10, "series removed")
        wait_for(lambda: west.call(lambda: west.kube.open_streams) == 0, 10, "west's watches closed")


@pytest.mark.parametrize("fault, expected", [
    ("missing", f"Secret {SECRET} does not exist"),
    ("no-key", f"Secret {SECRET}: it has no data key kubeconfig (keys: other)"),
    ("not-yaml", f"Secret {SECRET}, key kubeconfig: not a kubeconfig"),
    ("wrong-token", "cluster west rejected the credentials: HTTP 401"),
    ("forbidden", f"reading Secret {SECRET} is forbidden"),
])
def test_credentials_trouble_is_one_warning_a_metric_and_nothing_else(
        east: ThreadedKube, west: ThreadedKube, fault: str, expected: str) -> None:
    secret = west.call(west.kube.link_credentials, "west", token=REMOTE_TOKEN)
    if fault == "missing":
        east.call(east.kube.delete, "Secret", "linkerd-multicluster", "cluster-credentials-west")
    elif fault == "no-key":
        east.call(east.kube.apply, {**secret, "data": {"other": secret["data"]["kubeconfig"]}})
    elif fault == "not-yaml":
        east.call(east.kube.apply, {**secret, "data": {"kubeconfig": base64.b64encode(
            b"- just\n- a list\n").decode()}})
    elif fault == "wrong-token":
        east.call(east.kube.apply, west.call(west.kube.link_credentials, "west",
                                             token="revoked"))
    else:
        east.call(east.kube.forbid, "secrets")
    with serve_flat(east) as srv:
        wait_for(lambda: metric(srv, "dnsside_remote_credentials_valid") == 0, 10,
                 "credentials_valid 0")
        line = srv.wait_log("cannot use Secret")
        assert expected in line and "WARNING" in line.upper()
        assert addresses(srv) == EAST_DB | {MIRROR}  # nothing else is affected
        assert srv.http("/readyz")[0] == 200
        # It keeps trying (the Secret is read again each time), and says so once.
        wait_for(lambda: count(srv, "cannot use Secret") == 1 and (
            east.call(lambda: east.kube.requests[(
                "GET", "/api/v1/namespaces/linkerd-multicluster/secrets/"
                "cluster-credentials-west")]) >= 3), 15, "retries")
        assert count(srv, "cannot use Secret") == 1
        # Fixed: the next retry picks the good Secret up.
        if fault == "forbidden":
            east.call(east.kube.allow, "secrets")
        else:
            east.call(east.kube.apply, secret)
        wait_for(lambda: "10.244.1.5" in addresses(srv), 15, "west after the fix")
        assert metric(srv, "dnsside_remote_credentials_valid") == 1


def test_a_remote_older_than_2_14_is_read_from_v1_endpoints(tmp_path: Path) -> None:
    west = linked_cluster(tmp_path / "west", [
        service("db", labels=dict(REMOTE_DISCOVERY_LABELS)),
        v1_endpoints("db", [("10.244.1.5", "db-0")], [("10.244.1.6", "db-1")])],
        rules=REMOTE_ACCESS_RULES_PRE_214)
    try:
        east = local_cluster(tmp_path / "east", local_objects(), {"west": west})
    except BaseException:
        west.close()
        raise
    try:
        with serve_flat(east, "--publish-not-ready") as srv:
            wait_for(lambda: {"10.244.1.5", "10.244.1.6"} <= addresses(srv), 10, "west")
            srv.wait_log("reading v1 Endpoints")
            west.call(west.kube.apply, v1_endpoints("db", [("10.244.1.5", "db-0"),
                                                           ("10.244.1.6", "db-1")]))
            west.call(west.kube.delete, "Service", "data", "db")
            wait_for(lambda: addresses(srv) == EAST_DB | {MIRROR}, 10, "west's db deleted")
    finally:
        east.close()
        west.close()


def test_a_link_without_a_remote_discovery_selector_serves_nothing_directly(
        east: ThreadedKube, west: ThreadedKube) -> None:
    east.call(east.kube.apply, link("west", selector={}))
    with serve_flat(east) as srv:
        wait_for(lambda: metric(srv, "dnsside_remote_synced") == 1, 10, "west synced")
        assert addresses(srv) == EAST_DB | {MIRROR}


def test_explain_lists_the_linked_clusters_too(east: ThreadedKube, west: ThreadedKube) -> None:
    done = run_cli(["explain", DB, "--source", "kube",
                    "--kubeconfig", east.kubeconfig, "--cluster-name", "east",
                    "--flat-network"])
    assert done.returncode == 0, done.stderr
    assert "10.244.1.5" in done.stdout
    assert "flat network (pod IP)" in done.stdout
    assert "Flat network:    cluster west: synced (Secret " + SECRET in done.stdout
    assert "served by their own addresses on the flat network" in done.stdout  # the mirror


def test_revoked_credentials_after_a_sync_keep_the_members_until_a_rotated_secret(
        east: ThreadedKube, west: ThreadedKube) -> None:
    with serve_flat(east) as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        west.call(west.kube.users.tokens.pop, REMOTE_TOKEN)  # the account's token revoked
        west.call(west.kube.drop_streams)
        wait_for(lambda: metric(srv, "dnsside_remote_credentials_valid") == 0, 10,
                 "credentials_valid 0")
        assert "rejected the credentials" in srv.wait_log("cannot use Secret")
        assert addresses(srv) == EAST_DB | {"10.244.1.5"}  # what was learnt stands
        west.call(west.kube.add_token, "rotated-token", REMOTE_USER)
        east.call(east.kube.apply, west.call(west.kube.link_credentials, "west",
                                             token="rotated-token"))
        wait_for(lambda: metric(srv, "dnsside_remote_synced") == 1, 15, "synced again")
        west.call(west.kube.apply, endpoint_slice("db-x1y2z", "db", [
            endpoint("10.244.1.5", "db-0"), endpoint("10.244.1.8", "db-3")]))
        wait_for(lambda: "10.244.1.8" in addresses(srv), 10, "a change after the rotation")


def test_a_link_whose_selector_changes_is_watched_afresh(east: ThreadedKube,
                                                         west: ThreadedKube) -> None:
    with serve_flat(east) as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        east.call(east.kube.apply, link("west", selector={"matchLabels": {"tier": "none"}}))
        wait_for(lambda: addresses(srv) == EAST_DB | {MIRROR}, 10, "nothing selected")
        srv.wait_log("cluster west: Link changed: watching it afresh")
        east.call(east.kube.apply, link("west", selector={"matchExpressions": [
            {"key": "mirror.linkerd.io/exported", "operator": "In",
             "values": ["remote-discovery"]}]}))
        wait_for(lambda: addresses(srv) == EAST_DB | {"10.244.1.5"}, 10, "selected again")


def test_namespaces_and_mcs_names_apply_to_linked_clusters(east: ThreadedKube,
                                                           west: ThreadedKube) -> None:
    west.call(west.kube.load, {"kind": "List", "items": [
        service("cache", "other", labels=dict(REMOTE_DISCOVERY_LABELS)),
        endpoint_slice("cache-1", "cache", [endpoint("10.244.3.1", "cache-0")],
                       namespace="other")]})
    with serve_flat(east, "--namespace", "data", "--namespace", "linkerd-multicluster",
               "--mcs-zone", "clusterset.local.", "--publish-not-ready") as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        assert addresses(srv) == EAST_DB | {"10.244.1.5", "10.244.1.6"}
        assert addresses(srv, "db-1.west.db.data.svc.clusterset.local") == {"10.244.1.6"}
        assert srv.query("cache.other.svc-global").rcode() == 3  # NXDOMAIN: not watched
        asked = west.call(lambda: {p for _, p in west.kube.requests})
        assert "/api/v1/namespaces/data/services" in asked
        assert "/api/v1/services" not in asked


def test_flat_network_needs_the_kube_source() -> None:
    done = run_cli(["explain", DB, "--source", "examples/demo-east.yaml", "--flat-network"])
    assert done.returncode == 2
    assert "--flat-network" in done.stderr and "--source kube" in done.stderr


def test_a_global_service_may_exist_through_a_linked_cluster_alone(
        east: ThreadedKube, west: ThreadedKube) -> None:
    with serve_flat(east) as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        assert srv.query("queue.data.svc-global").rcode() == 3  # NXDOMAIN
        west.call(west.kube.load, {"kind": "List", "items": [
            service("queue", labels=dict(REMOTE_DISCOVERY_LABELS), ports=[
                {"name": "amqp", "port": 5672, "protocol": "TCP"}]),
            endpoint_slice("queue-1", "queue", [endpoint("10.244.4.1", "queue-0")],
                           ports=[{"name": "amqp", "port": 5672, "protocol": "TCP"}])]})
        wait_for(lambda: addresses(srv, "queue.data.svc-global") == {"10.244.4.1"}, 10,
                 "queue from west alone")
        srv_answer = srv.query("_amqp._tcp.queue.data.svc-global", "SRV")
        assert [(rd.port, rd.target.to_text()) for rrset in srv_answer.answer for rd in rrset] \
            == [(5672, "queue-0.west.queue.data.svc-global.")]


def test_a_linked_cluster_is_followed_like_the_local_one_through_resume_and_410(
        east: ThreadedKube, west: ThreadedKube) -> None:
    """The same reflector as the local source: a dropped stream resumes from its
    resourceVersion, history compacted away meanwhile means a relist (410) that replaces
    what it held in one swap, and no answer empties while it is away."""
    with serve_flat(east) as srv:
        wait_for(lambda: "10.244.1.5" in addresses(srv), 10, "west's db-0")
        # A dropped stream resumes: the change made meanwhile arrives.
        west.call(west.kube.drop_streams)
        west.call(west.kube.apply, endpoint_slice("db-x1y2z", "db", [
            endpoint("10.244.1.5", "db-0"), endpoint("10.244.1.6", "db-1")]))
        wait_for(lambda: "10.244.1.6" in addresses(srv), 10, "the change after the drop")
        # Away (every request 503), changed, compacted: the resume gets 410, then a relist.
        west.call(setattr, west.kube, "failing_status", 503)
        west.call(west.kube.drop_streams)
        west.call(west.kube.apply, endpoint_slice("db-x1y2z", "db", [
            endpoint("10.244.1.50", "db-0")]))
        west.call(west.kube.load, {"kind": "List", "items": [
            service("queue", labels=dict(REMOTE_DISCOVERY_LABELS)),
            endpoint_slice("queue-1", "queue", [endpoint("10.244.4.1", "queue-0")])]})
        west.call(west.kube.compact)
        wait_for(lambda: metric(srv, "dnsside_remote_synced") == 0, 10, "west away")
        seen = [addresses(srv) for _ in range(20)]  # while away: stale, never empty
        assert all(s == EAST_DB | {"10.244.1.5", "10.244.1.6"} for s in seen), seen
        west.call(setattr, west.kube, "failing_status", 0)
        wait_for(lambda: addresses(srv) == EAST_DB | {"10.244.1.50"}, 15, "the relisted db")
        # Each resource relists on its own (as the local source's do): the Service too.
        wait_for(lambda: addresses(srv, "queue.data.svc-global") == {"10.244.4.1"}, 15,
                 "the relisted queue")
        _, text = srv.http("/metrics")
        assert re.search(r'dnsside_relists_total\{resource="cluster west: [a-z]+"\} [1-9]',
                         text), "no relist of a linked cluster's resource"
        assert metric(srv, "dnsside_remote_synced") == 1
