"""The zone the protocol rules are checked on (test_protocol.py, test_edns.py,
test_truncation.py), asked three ways: in-process (the fast tier), and through a real
`dnsside serve` with UDP moved in batches (recvmmsg/sendmmsg) and one by one."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
import yaml

from testkit.inprocess import Server, file_responder
from testkit.rawdns import bulk_objects
from testkit.serve import DEMO, Dnsside, expect_udp_io


@pytest.fixture(scope="module", params=[
    pytest.param("in-process", marks=pytest.mark.quick), "batch", "plain"])
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The demo plus `mid.bulk` (50 addresses: > 512 B, < 1232 B) and `big.bulk` (120:
    > 1232 B): a Responder in-process, or `dnsside serve` with `--udp-io` batch or plain."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += bulk_objects("mid", "bulk", 50, 98) + bulk_objects("big", "bulk", 120, 99)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    if request.param == "in-process":
        yield file_responder(path)
        return
    env = {**os.environ, "DNSSIDE_UDP_IO": request.param}
    with Dnsside("--source", str(path), "--cluster-name", "east", env=env) as s:
        yield expect_udp_io(s, request.param)


@pytest.fixture(scope="module")
def sockets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dnsside]:
    """For dig and kdig: the demo plus `big.bulk` (120 addresses, too big for any UDP
    reply) in a `dnsside serve`."""
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += bulk_objects("big", "bulk", 120, 99)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    with Dnsside("--source", str(path), "--cluster-name", "east") as s:
        yield s
