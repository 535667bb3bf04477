"""How a transfer's records are packed into messages (dnsside.dns.transfer.iter_messages):
in order, each message as full as the limit allows (one record more would pass it), every
record once, with the question; for a question spelled other than the apex in lower case,
owners spelled out. Checked against the rule itself, record by record, for several limits,
an AXFR (SOA, the version's records, SOA) and an IXFR's differences."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import dns.message
import pytest
import yaml

from dnsside.dns import transfer
from dnsside.dns.versions import spelled_out
from testkit.inprocess import file_index
from testkit.rawdns import AXFR, bulk_objects, query
from testkit.serve import DEMO

pytestmark = pytest.mark.quick


@pytest.fixture(scope="module")
def zone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    demo = yaml.safe_load(DEMO.read_text())
    demo["items"] += bulk_objects("big", "bulk", 700, 70)
    path = tmp_path_factory.mktemp("zone") / "zone.json"
    path.write_text(json.dumps(demo))
    return path


def by_the_rule(req: transfer.TransferRequest, records: list[bytes], limit: int) -> list[list[bytes]]:
    """The records of each message, one by one: a record that would pass the limit starts
    the next message (a message holds at least one)."""
    out: list[list[bytes]] = [[]]
    size = 12 + len(req.question)
    for rr in records:
        if size + len(rr) > limit and out[-1]:
            out.append([])
            size = 12 + len(req.question)
        out[-1].append(rr)
        size += len(rr)
    return out


@pytest.mark.parametrize("limit", [65535, 4096, 700, 120])
@pytest.mark.parametrize("apex", ["svc-global", "SVC-Global"])
def test_messages_are_as_full_as_the_limit_allows(zone: Path, limit: int, apex: str) -> None:
    index = file_index(zone, allow_transfer=["127.0.0.0/8"])
    index.publisher.cut(1000)
    req = transfer.request(query(apex, AXFR), index.responder.zone_by_wire)
    assert req is not None
    records = transfer.axfr_records(req, index.publisher.versions[req.zone.wire])
    flat = list(records)
    if apex != apex.lower():
        flat = [spelled_out(rr, req.zone.wire) for rr in flat]
    messages = transfer.messages(req, records, limit)
    expected = by_the_rule(req, flat, limit)
    assert len(messages) == len(expected) > (1 if limit < 65535 else 0)
    for message, want in zip(messages, expected, strict=True):
        head = 12 + len(req.question)
        assert message[:2] == req.header[:2] and message[12:head] == req.question
        assert struct.unpack_from("!H", message, 6)[0] == len(want)
        assert message[head:] == b"".join(want)
        assert len(message) <= limit or len(want) == 1
    # and a DNS library reads every record of them, SOA first and last
    answers = [rr for m in messages for rr in dns.message.from_wire(m).answer]
    assert answers[0].rdtype == answers[-1].rdtype == 6
