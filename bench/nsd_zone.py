"""The records dnsside serves, as a zone file, for NSD and for the dnslib baseline.

The zone is written *from the index*: the topology file is loaded with the same
file source and index the server uses, every pre-encoded answer in
``Responder.answers`` is turned back into a query, answered (over the TCP path,
so nothing is truncated) and decoded with dnslib. The answer section of each is
one RRset of the zone. Additional-section glue needs no entry of its own: every
SRV target is a name of the zone with its own A record.

    python -m bench.nsd_zone bench/out/topo-10000.json --cluster-name east --dir bench/out/nsd

writes ``svc-global.zone`` and ``nsd.conf`` (RRL off, one server process, no
chroot, files under the directory) and checks both with nsd-checkzone and
nsd-checkconf.
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from dnslib import QTYPE, DNSRecord

from dnsside.core.index import Index
from dnsside.dns.responder import Responder
from dnsside.dns.wire import CLASS_IN, NS, SOA
from testkit.inprocess import file_index

ORIGIN = "svc-global."


def to_text(wire: bytes) -> str:
    """Wire-format name (uncompressed) → dotted text with a trailing dot."""
    labels, i = [], 0
    while wire[i]:
        labels.append(wire[i + 1 : i + 1 + wire[i]].decode("ascii", "backslashreplace"))
        i += wire[i] + 1
    return ".".join(labels) + "."


def query_for(key: bytes, qid: int = 0) -> bytes:
    """A plain query (no EDNS) for an answers-table key: wire name + type + class."""
    return struct.pack("!6H", qid, 0, 1, 0, 0, 0) + key


def rrsets(responder: Responder) -> Iterator[tuple[str, int, list[str]]]:
    """(owner, type, zone lines) for every RRset the responder answers but the apex SOA and NS."""
    for key in sorted(responder.answers):
        name, qtype = key[:-4], struct.unpack("!H", key[-4:-2])[0]
        if name in responder.zone_by_wire and qtype in (SOA, NS):
            continue
        reply = responder.respond(query_for(key), udp=False)
        assert reply is not None
        record = DNSRecord.parse(reply)
        lines = [rr.toZone() for rr in record.rr]
        yield to_text(name), qtype, lines


def zone_text(index: Index) -> str:
    zone = index.responder.zones[0]
    ttl = zone.options.ttl
    head = [
        f"$ORIGIN {ORIGIN}",
        f"$TTL {ttl}",
        f"@ {ttl} IN SOA {ORIGIN} hostmaster.{ORIGIN} {zone.serial} 7200 1800 86400 {ttl}",
        f"@ {ttl} IN NS {ORIGIN}",  # the apex is its own name server; its A is in the body
    ]
    body = [line for _, _, lines in rrsets(index.responder) for line in lines]
    return "\n".join(head + body) + "\n"


NSD_CONF = """\
server:
    server-count: 1
    ip-address: 127.0.0.1
    port: {port}
    do-ip6: no
    username: ""
    chroot: ""
    zonesdir: "{dir}"
    pidfile: "{dir}/nsd.pid"
    xfrdfile: "{dir}/xfrd.state"
    zonelistfile: "{dir}/zone.list"
    database: ""
    logfile: "{dir}/nsd.log"
    verbosity: 0
    hide-version: yes
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
    ipv4-edns-size: 1232
remote-control:
    control-enable: no
zone:
    name: "{origin}"
    zonefile: "{origin}zone"
"""


def write_nsd(index: Index, directory: Path, port: int) -> Path:
    """Zone file + nsd.conf in ``directory``; both checked. Returns the conf path."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    zone_path = directory / f"{ORIGIN}zone"
    zone_path.write_text(zone_text(index))
    conf = directory / "nsd.conf"
    conf.write_text(NSD_CONF.format(port=port, dir=directory, origin=ORIGIN))
    subprocess.run(["nsd-checkzone", ORIGIN, str(zone_path)], check=True,
                   capture_output=True, text=True)
    subprocess.run(["nsd-checkconf", str(conf)], check=True, capture_output=True, text=True)
    return conf


def set_port(conf: Path, port: int) -> None:
    lines = conf.read_text().splitlines()
    conf.write_text("\n".join(f"    port: {port}" if x.strip().startswith("port:") else x
                              for x in lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("topology", type=Path)
    p.add_argument("--cluster-name", default="east")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--port", type=int, default=5354)
    args = p.parse_args()
    index = file_index(args.topology, cluster_name=args.cluster_name)
    conf = write_nsd(index, args.dir, args.port)
    n = sum(1 for _ in (args.dir / f"{ORIGIN}zone").open())
    print(f"{conf}: {n} zone lines, {len(index.responder.answers)} RRsets; checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CLASS_IN", "QTYPE", "query_for", "rrsets", "write_nsd", "zone_text"]
