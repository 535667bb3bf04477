"""`--locality local-first` seen from outside: a real `dnsside serve --source FILE` (the
file re-read every 0.2 s), a test that edits the file as a cluster would change, and
dnspython and dig asking with a deadline.

Only the local cluster's addresses while one local member is ready; every cluster's
within 3 s of the last local member going unready (and of the local Service going); the
local ones again within 3 s of one being ready. The figures seen are printed (`-s`)."""

from __future__ import annotations

import copy
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.serve import DEMO, Dnsside, answers, wait_for

EAST = ["10.42.1.10", "10.42.1.11"]  # nginx-svc's pods in the local cluster, east
WEST = ["10.43.179.60", "10.43.218.18", "10.43.245.244"]  # its ready pods in west
NAME = "nginx-svc.default.svc-global"
MCS_NAME = "nginx-svc.default.svc.clusterset.local"
SRV_NAME = "_http._tcp.nginx-svc.default.svc-global"
DEADLINE = 3.0  # seconds from the file's change to the answer's


class Cluster:
    """The demo dump in a file, edited in place as the API objects would change."""

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "east.yaml"
        self.dump: dict[str, Any] = yaml.safe_load(DEMO.read_text())
        self.original = copy.deepcopy(self.dump)
        self.write()

    def item(self, name: str) -> dict[str, Any]:
        return next(o for o in self.dump["items"] if o["metadata"]["name"] == name)

    def local_ready(self, *ready: bool) -> None:
        for endpoint, value in zip(self.item("nginx-svc-b060a")["endpoints"], ready,
                                   strict=True):
            endpoint["conditions"]["ready"] = value

    def delete_local_service(self) -> None:
        self.dump["items"] = [o for o in self.dump["items"]
                              if not (o["kind"] == "Service"
                                      and o["metadata"]["name"] == "nginx-svc")]

    def restore_local_service(self) -> None:
        self.dump["items"].append(next(o for o in self.original["items"]
                                       if o["kind"] == "Service"
                                       and o["metadata"]["name"] == "nginx-svc"))

    def write(self) -> float:
        """Write the dump at once (a rename: never half a file); when it was written."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(self.dump))
        os.replace(tmp, self.path)
        return time.monotonic()


def until(srv: Dnsside, name: str, want: list[str], since: float, rdtype: str = "A"
          ) -> float:
    """Seconds from ``since`` until ``name`` answers exactly ``want`` (sorted), asked over
    UDP every 20 ms; fails after the deadline."""
    wait_for(lambda: answers(srv.query(name, rdtype), rdtype) == want, DEADLINE,
             f"{name} {rdtype} to answer {want}")
    return time.monotonic() - since


def dig_answers(srv: Dnsside, name: str, rdtype: str = "A") -> list[str]:
    out = subprocess.run(["dig", f"@{srv.host}", "-p", str(srv.port), "+time=3", "+tries=1",
                          "+short", name, rdtype], capture_output=True, text=True,
                         timeout=30).stdout
    return sorted(out.split())


def srv_targets(srv: Dnsside) -> list[str]:
    return sorted(rd.target.to_text() for rrset in srv.query(SRV_NAME, "SRV").answer
                  for rd in rrset if rd.rdtype == 33)


@pytest.fixture
def served(tmp_path: Path) -> Any:
    cluster = Cluster(tmp_path)
    with Dnsside("--source", str(cluster.path), "--cluster-name", "east",
                 "--reload-interval", "0.2", "--locality", "local-first",
                 "--mcs-zone", "clusterset.local.") as srv:
        yield cluster, srv


def test_local_first_follows_the_local_members_within_seconds(served: Any) -> None:
    cluster, srv = served
    seen: dict[str, float] = {}
    # Local only while a local member is ready: every answer, from both clients.
    for _ in range(20):
        assert answers(srv.query(NAME)) == EAST
        assert answers(srv.query(NAME, tcp=True)) == EAST
    assert dig_answers(srv, NAME) == EAST
    assert answers(srv.query(MCS_NAME)) == EAST
    assert all(".east." in t for t in srv_targets(srv))
    assert srv.metric("dnsside_locality_spilled_services",
                      reason="no-ready-local-member") == 0

    # The last local member goes unready: every cluster, within the deadline.
    cluster.local_ready(False, False)
    written = cluster.write()
    seen["unready -> every cluster"] = until(srv, NAME, WEST, written)
    until(srv, MCS_NAME, WEST, written)
    assert dig_answers(srv, NAME) == WEST
    assert srv_targets(srv) and all(".west." in t for t in srv_targets(srv))
    srv.wait_log("global service default/nginx-svc: no local member ready")
    assert srv.metric("dnsside_locality_spilled_services",
                      reason="no-ready-local-member") == 1

    # One local member ready again: local only, within the deadline.
    cluster.local_ready(False, True)
    written = cluster.write()
    seen["ready -> local"] = until(srv, NAME, ["10.42.1.11"], written)
    assert dig_answers(srv, MCS_NAME) == ["10.42.1.11"]
    srv.wait_log("global service default/nginx-svc: no longer answers beyond the local "
                 "cluster: a local member is ready again")
    assert srv.metric("dnsside_locality_spilled_services",
                      reason="no-ready-local-member") == 0

    # The local Service is deleted: every cluster; back: local again.
    cluster.delete_local_service()
    seen["local Service deleted -> every cluster"] = until(srv, NAME, WEST, cluster.write())
    cluster.restore_local_service()
    seen["local Service back -> local"] = until(srv, NAME, ["10.42.1.11"], cluster.write())

    # The per-cluster and per-pod names were never filtered.
    assert answers(srv.query("west.nginx-svc.default.svc-global")) == WEST
    assert answers(srv.query("nginx-set-1.east.nginx-svc.default.svc-global")) == [EAST[1]]

    # For comparison, a change that is no locality move: a new service appears.
    cluster.dump["items"] += [svc for svc in yaml.safe_load_all(_FRESH)]
    seen["new service appears (any change)"] = until(
        srv, "fresh.default.svc-global", ["10.42.9.9"], cluster.write())
    for what, seconds in seen.items():
        print(f"locality: {what}: {seconds:.3f} s")


_FRESH = """\
apiVersion: v1
kind: Service
metadata: {name: fresh, namespace: default, labels: {mirror.linkerd.io/exported: "true"}}
spec: {clusterIP: None, ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: fresh-abcde
  namespace: default
  labels: {kubernetes.io/service-name: fresh}
addressType: IPv4
endpoints: [{addresses: [10.42.9.9], conditions: {ready: true}, hostname: fresh-0}]
ports: [{name: http, port: 80, protocol: TCP}]
"""
