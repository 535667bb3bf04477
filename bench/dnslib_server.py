"""The naive Python baseline: dnslib's stock ``DNSServer`` answering the same zone.

The records come from the zone file ``nsd_zone.py`` writes (the same records
dnsside and NSD serve). The resolver keeps them in a dict keyed by (name, type)
— a fair lookup, not dnslib's linear ``ZoneResolver`` scan — and builds each
reply the way dnslib servers do: parse the query into objects, add the answer
RRs (and A glue for SRV targets, as dnsside and NSD do), pack. That per-query
object building is the point of the comparison. The stock server is
``socketserver.ThreadingMixIn`` + UDP: a thread per query. Logging is off.

    python -m bench.dnslib_server --zone bench/out/nsd/svc-global.zone --port 5355
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from dnslib import QTYPE, RCODE, RR
from dnslib.server import BaseResolver, DNSLogger, DNSServer


class ZoneDictResolver(BaseResolver):  # type: ignore[misc]
    def __init__(self, zone_text: str) -> None:
        self.records: dict[tuple[str, int], list[Any]] = {}
        self.soa: Any = None
        for rr in RR.fromZone(zone_text):
            key = (str(rr.rname).lower(), rr.rtype)
            self.records.setdefault(key, []).append(rr)
            if rr.rtype == QTYPE.SOA:
                self.soa = rr

    def resolve(self, request: Any, handler: Any) -> Any:
        reply = request.reply()
        q = request.q
        rrs = self.records.get((str(q.qname).lower(), q.qtype))
        if rrs is None:
            reply.header.rcode = RCODE.NXDOMAIN
            reply.add_auth(self.soa)
            return reply
        for rr in rrs:
            reply.add_answer(rr)
            if rr.rtype == QTYPE.SRV:
                for glue in self.records.get((str(rr.rdata.target).lower(), QTYPE.A), ()):
                    reply.add_ar(glue)
        return reply


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zone", required=True)
    p.add_argument("--port", type=int, default=5355)
    p.add_argument("--address", default="127.0.0.1")
    args = p.parse_args()
    with open(args.zone) as f:
        resolver = ZoneDictResolver(f.read())
    logger = DNSLogger("-recv,-send,-request,-reply,-truncated,-error,-data", prefix=False)
    server = DNSServer(resolver, port=args.port, address=args.address, logger=logger)
    print(f"dnslib listening on udp {args.address}:{server.server.server_address[1]} "
          f"({len(resolver.records)} RRsets)", file=sys.stderr, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server.start_thread()
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
