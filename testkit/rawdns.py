"""Raw DNS packets and sockets for the protocol tests.

dnspython builds only well-formed queries; these helpers build anything (bad
counts, pointers in the question, mixed case kept byte for byte) and talk to a
server over plain sockets, with socket timeouts as deadlines.
"""

from __future__ import annotations

import socket
import struct
import time

import dns.message

from testkit import objects

A, NS, SOA, HINFO, TXT, AAAA, SRV, OPT, IXFR, AXFR, ANY = 1, 2, 6, 13, 16, 28, 33, 41, 251, 252, 255
RD, CD, DO = 0x0100, 0x0010, 0x8000
EDE = 15  # the Extended DNS Error EDNS option (RFC 8914)
TRANSPORTS = ["udp", "tcp"]  # what a protocol rule is asked over


def wire_name(name: str) -> bytes:
    """Dotted name → wire format, case kept as given (no lower-casing)."""
    out = b""
    for label in name.strip(".").split("."):
        if label:
            raw = label.encode("ascii")
            out += bytes([len(raw)]) + raw
    return out + b"\x00"


def opt_rr(payload: int = 1232, version: int = 0, do: bool = False, options: bytes = b"",
           ext_rcode: int = 0) -> bytes:
    ttl = ext_rcode << 24 | version << 16 | (DO if do else 0)
    return b"\x00" + struct.pack("!HHIH", OPT, payload, ttl, len(options)) + options


def option(code: int, data: bytes) -> bytes:
    return struct.pack("!HH", code, len(data)) + data


def query(name: str | bytes, qtype: int = A, qclass: int = 1, *, qid: int = 0x1234,
          flags: int = RD, edns: bytes | None = None, qdcount: int | None = None,
          ancount: int = 0, nscount: int = 0, arcount: int | None = None,
          tail: bytes = b"") -> bytes:
    """A query; ``name`` as text (case kept) or raw wire bytes. ``edns`` is an OPT RR."""
    qname = name if isinstance(name, bytes) else wire_name(name)
    question = qname + struct.pack("!HH", qtype, qclass)
    ar = edns or b""
    header = struct.pack(
        "!6H", qid, flags, 1 if qdcount is None else qdcount, ancount, nscount,
        (1 if edns else 0) if arcount is None else arcount,
    )
    return header + question + ar + tail


def question_of(wire: bytes) -> bytes:
    """The question bytes (name + type + class) of a well-formed, uncompressed query."""
    i = 12
    while wire[i]:
        i += wire[i] + 1
    return wire[12 : i + 5]


def _name_end(wire: bytes, i: int) -> int:
    while wire[i] and wire[i] < 0xC0:
        i += wire[i] + 1
    return i + (2 if wire[i] else 1)


def answer_records(reply: bytes) -> list[bytes]:
    """The answer section's records, each as its bytes (owner as sent: usually a pointer)."""
    i = 12 + len(question_of(reply)) if reply[4:6] == b"\x00\x01" else 12
    out = []
    for _ in range(struct.unpack_from("!H", reply, 6)[0]):
        end = _name_end(reply, i) + 10
        end += struct.unpack_from("!H", reply, end - 2)[0]
        out.append(reply[i:end])
        i = end
    return out


def in_one_order(reply: bytes) -> bytes:
    """``reply`` with its answer records sorted: two replies to one question that differ only
    in where the answer starts (--round-robin) are then the same bytes. Sound for our
    replies, where nothing points into the answer records once they rotate."""
    records = answer_records(reply)
    start = 12 + len(question_of(reply)) if reply[4:6] == b"\x00\x01" else 12
    end = start + sum(map(len, records))
    return reply[:start] + b"".join(sorted(records)) + reply[end:]


def same_but_turn(a: bytes, b: bytes) -> bool:
    """Two replies to one question are the same but for --round-robin's turn: the same bytes
    once their answer records are sorted; truncated ones (each carries the next page of
    the records) the same header and size."""
    if a[:12] != b[:12]:
        return False
    if a[2] & 0x02:  # TC
        return len(a) == len(b)
    return in_one_order(a) == in_one_order(b)


def parse(reply: bytes) -> dns.message.Message:
    return dns.message.from_wire(reply, ignore_trailing=False)


def udp(host: str, port: int, wire: bytes, timeout: float = 2.0) -> bytes | None:
    """Send one datagram; the reply, or None when nothing came back before ``timeout``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(wire, (host, port))
        try:
            return s.recv(65535)
        except TimeoutError:
            return None


class Tcp:
    """One TCP connection speaking RFC 7766 framing."""

    def __init__(self, host: str, port: int, timeout: float = 3.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, *messages: bytes) -> None:
        self.sock.sendall(b"".join(struct.pack("!H", len(m)) + m for m in messages))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout: float = 3.0) -> bytes | None:
        """The next framed message; None if the server closed the connection first.
        Raises TimeoutError when nothing complete arrives before ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 2:
                size = self.buf[0] << 8 | self.buf[1]
                if len(self.buf) >= 2 + size:
                    msg, self.buf = self.buf[2 : 2 + size], self.buf[2 + size :]
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete message")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return None
            if not data:
                return None
            self.buf += data

    def exchange(self, wire: bytes, timeout: float = 3.0) -> bytes | None:
        self.send(wire)
        return self.recv(timeout)

    def closed_within(self, timeout: float) -> bool:
        """True when the server closes (FIN or RST) before ``timeout``; data is discarded."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                if not self.sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Tcp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tcp(host: str, port: int, wire: bytes, timeout: float = 3.0) -> bytes | None:
    with Tcp(host, port, timeout) as conn:
        conn.send(wire)
        try:
            return conn.recv(timeout)
        except TimeoutError:
            return None


def exchange(host: str, port: int, wire: bytes, transport: str, timeout: float = 2.0
             ) -> bytes | None:
    return (udp if transport == "udp" else tcp)(host, port, wire, timeout)


def bulk_objects(name: str, namespace: str, count: int, net: int) -> list[dict[str, object]]:
    """A local exported headless Service with ``count`` ready endpoints (10.<net>.x.y)."""
    endpoints = [objects.endpoint(f"10.{net}.{i // 250}.{i % 250 + 1}", True, f"{name}-{i}")
                 for i in range(count)]
    return [objects.service(namespace, name, None, [("http", 80)], {objects.EXPORTED: "true"}),
            objects.endpoint_slice(namespace, f"{name}-x1", name, endpoints, [("http", 80)])]
