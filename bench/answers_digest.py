"""Every answer dnsside gives for a topology, as one digest: to show a change is byte-identical.

    .venv/bin/python -m bench.answers_digest --size 0          # the demo
    .venv/bin/python -m bench.answers_digest --size 10000      # the 10k topology
    .venv/bin/python -m bench.answers_digest --size 0 --flag=--mcs-zone=clusterset.local.
    .venv/bin/python -m bench.answers_digest --flat-network 3  # in-process, see below

It starts a real ``dnsside serve --source FILE`` and asks it, over UDP, every name
the zone holds (each with A, AAAA, SRV, TXT and ANY), a nonexistent name below
each, and the apex's SOA and NS, with a fixed message ID and EDNS, then prints
the SHA-256 of all replies in order (SOA serials zeroed) and writes them, one per line in hex, to
``bench/out/answers-<size>.txt`` for a diff.

The list of names must not come from the code under test,
or a change that drops a name would drop it from the list too. So the first run
writes the names to ``bench/out/names-<size>.txt`` and every later run asks
exactly those (``--renew-names`` makes the list again).

``--flat-network N`` asks the same questions of the flat network's topology
(``bench/flat_network.py``: east with the Links and remote-discovery mirrors of N linked
clusters, each cluster's own headless Services applied as the linked cluster's watch
delivers them) in-process, through ``Responder.respond`` over UDP: the objects of N fake
API servers are the same as these records, and what is compared is the index's answers.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import dns.message
import dns.name
import dns.rdatatype

from testkit.serve import Dnsside

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"

QTYPES = ("A", "AAAA", "SRV", "TXT", "ANY")


def topology_file(size: int) -> Path:
    from bench import topology

    if size == 0:
        return topology.DEMO
    path, _ = topology.cached(size, OUT)
    return path


def names_of(source: Path, flags: list[str]) -> list[str]:
    """Every owner name the index holds for ``source`` (through the code as it is now)."""
    from dnsside.config import Config
    from dnsside.core.build import make_index
    from dnsside.model.events import Kind, Replace, Synced
    from dnsside.sources.file import load_records

    config = Config(source=str(source), cluster_name="east")
    for flag in flags:
        if flag.startswith("--mcs-zone="):
            config.mcs_zones = (*config.mcs_zones, flag.split("=", 1)[1])
    index = make_index(config)
    records, _ = load_records(source)
    index.apply([Replace(frozenset(Kind), tuple(records)), Synced()])
    out = {dns.name.from_wire(key[:-4], 0)[0].to_text() for key in index.responder.answers}
    return sorted(out)


def flat_network_index(clusters: int, flags: list[str]) -> Any:
    """The index of ``bench/flat_network.py``'s topology (3,000 endpoints per linked cluster,
    100 pods per Service, 60 local Services), every linked cluster synced."""
    from bench.flat_network import CLUSTERS, local_objects, remote_objects
    from dnsside.core.build import make_index
    from dnsside.core.index import IndexOptions
    from dnsside.model.events import Kind, Remote, RemoteState, RemoteStatus, Replace, Synced
    from dnsside.model.linkerd import LinkRecord, parse_object, parse_remote_service, parse_slice

    names = list(CLUSTERS[:clusters])
    local = tuple(r for i, o in enumerate(local_objects(names, 3000, 100, 60))
                  if (r := parse_object(o, f"item {i}")) is not None)
    mcs = tuple(f.split("=", 1)[1] for f in flags if f.startswith("--mcs-zone="))
    index = make_index(IndexOptions(cluster_name="east", mcs_zones=mcs))
    index.apply([Replace(frozenset(Kind), local), Synced()])
    selector = next(r for r in local if isinstance(r, LinkRecord)).remote_selector
    for c, name in enumerate(names):
        items, _ = remote_objects(c, 3000, 100)
        records = tuple(r for i, o in enumerate(items) if (r := (
            parse_remote_service(o, f"item {i}", name, selector) if o["kind"] == "Service"
            else parse_slice(o, f"item {i}"))) is not None)
        index.apply([Remote(name, Replace(frozenset({Kind.SERVICE, Kind.SLICE}), records)),
                     RemoteStatus(name, RemoteState.SYNCED, "", "bench")])
    return index


def _without_serial(reply: bytes) -> bytes:
    """The reply with its SOA serial zeroed: dnsside starts it at the clock, so it is the
    one field that differs between two runs of the same code."""
    message = dns.message.from_wire(reply)
    for rrset in (*message.answer, *message.authority):
        if rrset.rdtype == dns.rdatatype.SOA:
            serial = struct.pack("!I", rrset[0].serial)
            reply = reply.replace(serial, b"\0\0\0\0")
    return reply


def _query(name: str, qtype: str) -> bytes:
    """The question, always the same bytes: a fixed ID, no flags, EDNS with 1232 octets."""
    query = dns.message.make_query(name, qtype, use_edns=0, payload=1232)
    query.id = 0x4242
    query.flags = 0
    return bytes(query.to_wire())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=0, help="members; 0 for the demo")
    parser.add_argument("--flag", action="append", default=[], help="extra serve flag")
    parser.add_argument("--renew-names", action="store_true")
    parser.add_argument("--flat-network", type=int, default=0, metavar="CLUSTERS",
                        help="the flat network's topology with this many linked clusters, "
                             "in-process (--size is then not read)")
    args = parser.parse_args()
    flat = flat_network_index(args.flat_network, args.flag) if args.flat_network else None
    source = topology_file(args.size) if flat is None else Path()
    tag = (f"flat{args.flat_network}" if flat is not None else f"{args.size}") + "".join(
        re.sub(r"\W+", "_", f) for f in args.flag)
    OUT.mkdir(parents=True, exist_ok=True)
    names_path = OUT / f"names-{tag}.txt"
    if args.renew_names or not names_path.exists():
        names = names_of(source, args.flag) if flat is None else sorted(
            {dns.name.from_wire(key[:-4], 0)[0].to_text() for key in flat.responder.answers})
        names_path.write_text("\n".join(names) + "\n")
    names = names_path.read_text().split()
    apexes = ["svc-global.", *(f.split("=", 1)[1] for f in args.flag
                               if f.startswith("--mcs-zone="))]
    questions = [(n, t) for n in names for t in QTYPES]
    questions += [(f"nonexistent-{i}.{n}", "A") for i, n in enumerate(names)]
    questions += [(a, t) for a in apexes for t in ("SOA", "NS")]
    digest = hashlib.sha256()
    lines = []

    def asked(name: str, qtype: str, reply: bytes | None) -> None:
        assert reply is not None, (name, qtype)
        reply = _without_serial(reply)
        digest.update(struct.pack("!H", len(reply)) + reply)
        lines.append(f"{name} {qtype} {reply.hex()}")

    if flat is not None:
        for name, qtype in questions:
            asked(name, qtype, flat.responder.respond(_query(name, qtype), True))
    else:
        server = Dnsside("--source", str(source), "--cluster-name", "east", *args.flag,
                         timeout=120)
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(5)
                for name, qtype in questions:
                    sock.sendto(_query(name, qtype), (server.host, server.port))
                    asked(name, qtype, sock.recvfrom(65535)[0])
        finally:
            server.stop(timeout=30)
    (OUT / f"answers-{tag}.txt").write_text("\n".join(lines) + "\n")
    print(f"{len(questions)} questions over {len(names)} names: sha256 {digest.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
