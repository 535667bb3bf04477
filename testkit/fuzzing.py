"""Hypothesis strategies and a demo `Responder` for the packet path's property tests
(tests/dns/test_fuzz_respond.py) and their long form with a live server (bench/fuzz.py).

The profile is chosen by the environment so that bench/fuzz.py can run the same
properties with many more examples (``DNSSIDE_FUZZ_PROFILE=dnsside-long`` or
``DNSSIDE_FUZZ_EXAMPLES=N``) without a copy of them.
"""

from __future__ import annotations

import functools
import os
import struct

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from dnsside.core.index import IndexOptions
from dnsside.dns.responder import Responder
from dnsside.model.events import Synced, Upsert
from dnsside.sources.file import load_records
from testkit.inprocess import empty_index
from testkit.serve import DEMO

settings.register_profile(
    "dnsside-ci", max_examples=300, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dnsside-long", max_examples=20000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PROFILE = settings.get_profile(os.environ.get("DNSSIDE_FUZZ_PROFILE", "dnsside-ci"))
if os.environ.get("DNSSIDE_FUZZ_EXAMPLES"):  # bench/fuzz.py --examples N
    PROFILE = settings(PROFILE, max_examples=int(os.environ["DNSSIDE_FUZZ_EXAMPLES"]))


@functools.cache
def responder() -> Responder:
    records, warnings = load_records(DEMO)
    assert not warnings
    options = IndexOptions(cluster_name="east")
    index = empty_index(options)
    index.apply([*(Upsert(rec) for rec in records), Synced()])
    r = index.responder
    assert r.ready
    return r


# --------------------------------------------------------------------------- strategies

NAMES = [
    "nginx-svc.default.svc-global", "_http._tcp.nginx-svc.default.svc-global",
    "cockroachdb.db.svc-global", "_grpc._tcp.cockroachdb.db.svc-global",
    "nginx-set-0.east.nginx-svc.default.svc-global", "west.cockroachdb.db.svc-global",
    "default.svc-global", "_tcp.nginx-svc.default.svc-global", "svc-global",
    "nope.svc-global", "web.default.svc-global", "example.com", "",
]
QTYPES = [1, 2, 6, 13, 16, 28, 33, 41, 251, 252, 255, 65]


def _wire(labels: list[bytes]) -> bytes:
    return b"".join(bytes([len(x)]) + x for x in labels) + b"\x00"


@st.composite
def qnames(draw: st.DrawFn) -> bytes:
    """A wire name: a demo name in random case, or random labels (any bytes), maybe too long."""
    if draw(st.booleans()):
        text = draw(st.sampled_from(NAMES))
        mask = draw(st.integers(0, 2**64 - 1))
        text = "".join(c.upper() if mask >> (i % 64) & 1 else c for i, c in enumerate(text))
        labels = [x.encode() for x in text.split(".") if x]
        if draw(st.booleans()):
            labels = draw(st.lists(st.binary(min_size=1, max_size=63), max_size=3)) + labels
        return _wire(labels)
    return _wire(draw(st.lists(st.binary(min_size=1, max_size=63), max_size=6)))


@st.composite
def opt_records(draw: st.DrawFn) -> bytes:
    options = b"".join(
        struct.pack("!HH", code, len(data)) + data
        for code, data in draw(st.lists(
            st.tuples(st.sampled_from([3, 8, 10, 12, 15, 65001]) | st.integers(0, 0xFFFF),
                      st.binary(max_size=40)),
            max_size=3,
        ))
    )
    payload = draw(st.sampled_from([0, 100, 512, 1232, 4096, 65535]) | st.integers(0, 0xFFFF))
    version = draw(st.sampled_from([0, 0, 0, 1]) | st.integers(0, 255))
    flags = draw(st.sampled_from([0, 0x8000]) | st.integers(0, 0xFFFF))
    ext_rcode = draw(st.sampled_from([0, 0, 1]))
    ttl = ext_rcode << 24 | version << 16 | flags
    return b"\x00" + struct.pack("!HHIH", 41, payload, ttl, len(options)) + options


@st.composite
def queries(draw: st.DrawFn) -> bytes:
    """A well-formed query: any ID, mostly-plausible flags, maybe EDNS."""
    qid = draw(st.integers(0, 0xFFFF))
    flags = draw(st.sampled_from([0x0100, 0x0000, 0x0110, 0x0120, 0x0130]) |
                 st.integers(0, 0x7FFF))  # QR clear
    qtype = draw(st.sampled_from(QTYPES) | st.integers(0, 0xFFFF))
    qclass = draw(st.sampled_from([1, 1, 1, 3, 254, 255]) | st.integers(0, 0xFFFF))
    opt = draw(st.none() | opt_records())
    name = draw(qnames())
    question = name + struct.pack("!HH", qtype, qclass)
    header = struct.pack("!6H", qid, flags, 1, 0, 0, 1 if opt else 0)
    return header + question + (opt or b"")


MUTATIONS = st.lists(
    st.tuples(st.sampled_from(["flip", "set", "cut", "insert", "pointer", "count", "delete"]),
              st.integers(0, 2000), st.integers(0, 0xFFFF), st.binary(max_size=8)),
    min_size=1, max_size=5,
)


def mutate(data: bytes, ops: list[tuple[str, int, int, bytes]]) -> bytes:
    d = bytearray(data)
    for op, at, value, blob in ops:
        pos = at % (len(d) + 1)
        if op == "flip" and d:
            d[pos % len(d)] ^= 1 << (value % 8)
        elif op == "set" and d:
            d[pos % len(d)] = value & 0xFF
        elif op == "cut":
            del d[pos:]
        elif op == "insert":
            d[pos:pos] = blob
        elif op == "delete":
            del d[pos : pos + 1 + value % 4]
        elif op == "pointer":  # a compression pointer to anywhere, at any place
            d[pos : pos + 2] = struct.pack("!H", 0xC000 | value & 0x3FFF)
        elif op == "count" and len(d) >= 12:  # QDCOUNT/ANCOUNT/NSCOUNT/ARCOUNT
            i = 4 + 2 * (at % 4)
            d[i : i + 2] = struct.pack("!H", value % 4 if value & 1 else value)
    return bytes(d)
