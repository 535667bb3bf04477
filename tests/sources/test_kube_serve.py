"""`dnsside serve --source kube` against the fake API server: the DNS answers converge.

The fake API server runs on its own event-loop thread so that these tests can
block on DNS polls while it keeps serving watches; every control call is
marshalled onto that thread.
"""

from __future__ import annotations

import copy
import re
import threading
from typing import Any

import dns.exception
import dns.rcode
import yaml

from testkit.serve import DEMO, Dnsside, answers, demo_server, wait_for
from testkit.threadedkube import ThreadedKube

NGINX = "nginx-svc.default.svc-global"
ITEMS: list[dict[str, Any]] = yaml.safe_load(DEMO.read_text())["items"]


def serve(kube: ThreadedKube, *extra: str, wait_synced: bool = True) -> Dnsside:
    return Dnsside("--kubeconfig", kube.kubeconfig, "--cluster-name", "east",
                   "--kube-backoff-cap", "0.3", *extra, wait_synced=wait_synced)


def obj(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in ITEMS if o["metadata"]["name"] == name))


class Poller:
    """Queries a name in a loop and records every answer that is not a good one."""

    def __init__(self, srv: Dnsside, name: str = NGINX) -> None:
        self.srv, self.name = srv, name
        self.bad: list[str] = []
        self.count = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                msg = self.srv.query(self.name, "A", timeout=2)
                if msg.rcode() != dns.rcode.NOERROR or not answers(msg):
                    self.bad.append(f"{dns.rcode.to_text(msg.rcode())} {answers(msg)}")
            except dns.exception.Timeout:
                self.bad.append("timeout")
            self.count += 1

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(5)
        assert self.count > 10, "the poller barely ran"
        assert self.bad == [], f"bad answers while faults were injected: {self.bad[:5]}"


def test_same_answers_as_the_file_source(kube: ThreadedKube) -> None:
    questions = [(NGINX, "A"), ("west.nginx-svc.default.svc-global", "A"),
                 ("_http._tcp.nginx-svc.default.svc-global", "SRV"),
                 ("cockroachdb.db.svc-global", "SRV"), ("web.default.svc-global", "A"),
                 ("default.svc-global", "A"), ("metrics.default.svc-global", "A")]
    with demo_server() as from_file, serve(kube) as from_api:
        for name, rdtype in questions:
            a, b = from_file.query(name, rdtype, tcp=True), from_api.query(name, rdtype, tcp=True)
            assert (a.rcode(), a.answer, a.additional) == (b.rcode(), b.answer, b.additional)
        assert from_api.http("/readyz")[0] == 200
    assert kube.call(kube.kube.verbs) == {"GET"}


def test_new_link_appears_and_per_pod_mirror_goes(kube: ThreadedKube) -> None:
    with serve(kube) as srv:
        link = obj("south")  # `linkerd multicluster link --cluster-name far | kubectl apply`
        link["metadata"]["name"] = link["spec"]["targetClusterName"] = "far"
        root = obj("nginx-svc-west")
        root["metadata"]["name"] = "nginx-svc-far"
        root["metadata"]["labels"]["mirror.linkerd.io/cluster-name"] = "far"
        pod = obj("nginx-set-0-west")
        pod["metadata"]["name"] = "nginx-set-0-far"
        pod["metadata"]["labels"]["mirror.linkerd.io/cluster-name"] = "far"
        pod["metadata"]["labels"]["mirror.linkerd.io/headless-mirror-svc-name"] = "nginx-svc-far"
        pod["spec"]["clusterIP"], pod["spec"]["clusterIPs"] = "10.44.0.9", ["10.44.0.9"]
        sl = obj("nginx-set-0-west-ba6e2")
        sl["metadata"]["name"] = "nginx-set-0-far-1"
        sl["metadata"]["labels"]["kubernetes.io/service-name"] = "nginx-set-0-far"
        for o in (link, root, pod, sl):
            kube.call(kube.kube.apply, o)
        wait_for(lambda: "10.44.0.9" in answers(srv.query(NGINX)), what="the far link")
        assert answers(srv.query("nginx-set-0.far.nginx-svc.default.svc-global")) == ["10.44.0.9"]
        srv.wait_log("link far seen: 1 members")
        kube.call(kube.kube.delete, "Service", "default", "nginx-set-2-west")
        wait_for(lambda: "10.43.245.244" not in answers(srv.query(NGINX)), what="mirror removal")
        gone = srv.query("nginx-set-2.west.nginx-svc.default.svc-global")
        assert gone.rcode() == dns.rcode.NXDOMAIN


def test_gateway_goes_not_ready(kube: ThreadedKube) -> None:
    with serve(kube) as srv:
        for name in ("nginx-set-0-west-ba6e2", "nginx-set-1-west-d2a95", "nginx-set-2-west-73bac"):
            sl = obj(name)
            sl["endpoints"][0]["conditions"]["ready"] = False
            kube.call(kube.kube.apply, sl)
        wait_for(lambda: answers(srv.query(NGINX)) == ["10.42.1.10", "10.42.1.11"],
                 what="west left out")
        assert srv.query("west.nginx-svc.default.svc-global").rcode() == dns.rcode.NXDOMAIN


def test_local_pod_added_while_streams_are_down(kube: ThreadedKube) -> None:
    with serve(kube) as srv:
        poller = Poller(srv)
        kube.call(kube.kube.fail_next, 4, 503)
        kube.call(kube.kube.drop_streams)
        sl = obj("nginx-svc-b060a")
        sl["endpoints"].append({"addresses": ["10.42.1.12"], "hostname": "nginx-set-2",
                                "conditions": {"ready": True}})
        kube.call(kube.kube.apply, sl)
        wait_for(lambda: "10.42.1.12" in answers(srv.query(NGINX)), what="the new local pod")
        assert answers(srv.query("nginx-set-2.east.nginx-svc.default.svc-global")) == ["10.42.1.12"]
        poller.finish()
        srv.wait_log("dnsside.kube")  # the restart is logged with its resource


def test_objects_deleted_across_a_410_disappear(kube: ThreadedKube) -> None:
    with serve(kube) as srv:
        poller = Poller(srv)
        kube.run(kube.kube.set_unreachable(True))
        for name in ("nginx-set-1-west", "nginx-set-2-west"):
            kube.call(kube.kube.delete, "Service", "default", name)
        kube.call(kube.kube.delete, "EndpointSlice", "default", "web-west-e3590")
        kube.call(kube.kube.compact)
        # While the API is unreachable, the last index keeps serving.
        assert "10.43.218.18" in answers(srv.query(NGINX))
        kube.run(kube.kube.set_unreachable(False))
        wait_for(lambda: answers(srv.query(NGINX)) == ["10.42.1.10", "10.42.1.11", "10.43.179.60"],
                 what="deleted mirrors gone after the relist")
        wait_for(lambda: "10.43.100.7" not in answers(srv.query("web.default.svc-global")),
                 what="web-west without a ready slice")
        poller.finish()
        text = srv.http("/metrics")[1]
        assert re.search(r'^dnsside_relists_total\{resource="\w+"\} [1-9]', text, re.M), text
        assert re.search(r'^dnsside_watch_restarts_total\{.*\} [1-9]', text, re.M)


def test_api_failing_for_a_while_keeps_serving(kube: ThreadedKube) -> None:
    with serve(kube) as srv:
        before = answers(srv.query(NGINX))
        poller = Poller(srv)
        kube.call(kube.kube.fail_next, 8, 500)
        kube.call(kube.kube.drop_streams)
        wait_for(lambda: kube.call(lambda: kube.kube.pending_failures) == 0,
                 what="all injected failures consumed")
        kube.call(kube.kube.delete, "Service", "default", "nginx-set-0-west")
        wait_for(lambda: "10.43.179.60" not in answers(srv.query(NGINX)),
                 what="recovery after the outage")
        poller.finish()
        assert len(before) == 5
        assert srv.http("/readyz")[0] == 200


def test_not_ready_and_servfail_before_the_first_sync(kube: ThreadedKube) -> None:
    kube.call(kube.kube.fail_next, 10_000, 500, match=lambda r: "services" in r.path)
    with serve(kube, wait_synced=False) as srv:
        msg = wait_for(lambda: srv.query(NGINX), what="an answer")
        assert msg.rcode() == dns.rcode.SERVFAIL
        assert srv.query("example.com").rcode() == dns.rcode.REFUSED
        assert srv.http("/readyz")[0] == 503
        assert srv.http("/healthz")[0] == 200
        assert srv.metric("dnsside_source_synced", source="kube") == 0  # what alerts read
        kube.call(kube.kube.clear_failures)
        srv.wait_log("initial sync done")
        assert len(answers(srv.query(NGINX))) == 5
        assert srv.http("/readyz")[0] == 200
        assert srv.metric("dnsside_source_synced", source="kube") == 1
        assert srv.metric("dnsside_source_last_event_timestamp_seconds", source="kube") > 0
