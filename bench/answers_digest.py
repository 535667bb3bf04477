"""Every answer dnsside gives for a topology, as one digest: to show a change is byte-identical.

    .venv/bin/python -m bench.answers_digest --size 0          # the demo
    .venv/bin/python -m bench.answers_digest --size 10000      # the 10k topology
    .venv/bin/python -m bench.answers_digest --size 0 --flag=--mcs-zone=clusterset.local.

It starts a real ``dnsside serve --source FILE`` and asks it, over UDP, every name
the zone holds (each with A, AAAA, SRV, TXT and ANY), a nonexistent name below
each, and the apex's SOA and NS, with a fixed message ID and EDNS, then prints
the SHA-256 of all replies in order (SOA serials zeroed) and writes them, one per line in hex, to
``bench/out/answers-<size>.txt`` for a diff.

The list of names must not come from the code under test,
or a change that drops a name would drop it from the list too. So the first run
writes the names to ``bench/out/names-<size>.txt`` and every later run asks
exactly those (``--renew-names`` makes the list again).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import socket
import struct
import sys
from pathlib import Path

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


def _without_serial(reply: bytes) -> bytes:
    """The reply with its SOA serial zeroed: dnsside starts it at the clock, so it is the
    one field that differs between two runs of the same code."""
    message = dns.message.from_wire(reply)
    for rrset in (*message.answer, *message.authority):
        if rrset.rdtype == dns.rdatatype.SOA:
            serial = struct.pack("!I", rrset[0].serial)
            reply = reply.replace(serial, b"\0\0\0\0")
    return reply


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=0, help="members; 0 for the demo")
    parser.add_argument("--flag", action="append", default=[], help="extra serve flag")
    parser.add_argument("--renew-names", action="store_true")
    args = parser.parse_args()
    source = topology_file(args.size)
    tag = f"{args.size}" + "".join(re.sub(r"\W+", "_", f) for f in args.flag)
    OUT.mkdir(parents=True, exist_ok=True)
    names_path = OUT / f"names-{tag}.txt"
    if args.renew_names or not names_path.exists():
        names_path.write_text("\n".join(names_of(source, args.flag)) + "\n")
    names = names_path.read_text().split()
    apexes = ["svc-global.", *(f.split("=", 1)[1] for f in args.flag
                               if f.startswith("--mcs-zone="))]
    questions = [(n, t) for n in names for t in QTYPES]
    questions += [(f"nonexistent-{i}.{n}", "A") for i, n in enumerate(names)]
    questions += [(a, t) for a in apexes for t in ("SOA", "NS")]
    server = Dnsside("--source", str(source), "--cluster-name", "east", *args.flag,
                     timeout=120)
    digest = hashlib.sha256()
    lines = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(5)
            for name, qtype in questions:
                query = dns.message.make_query(name, qtype, use_edns=0, payload=1232)
                query.id = 0x4242
                query.flags = 0
                sock.sendto(query.to_wire(), (server.host, server.port))
                reply = _without_serial(sock.recvfrom(65535)[0])
                digest.update(struct.pack("!H", len(reply)) + reply)
                lines.append(f"{name} {qtype} {reply.hex()}")
    finally:
        server.stop(timeout=30)
    (OUT / f"answers-{tag}.txt").write_text("\n".join(lines) + "\n")
    print(f"{len(questions)} questions over {len(names)} names: sha256 {digest.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
