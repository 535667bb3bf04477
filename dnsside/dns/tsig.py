"""TSIG (RFC 8945): shared-key signatures on zone transfers and NOTIFYs, over bytes.

A secondary proves it holds the key by signing its AXFR/IXFR request; we sign every
message of the answer, so it knows the zone came from us and was not cut short.
The other way round, our NOTIFYs are signed and the secondary's answer must be too.
Nothing here opens a socket; the only I/O is reading the key file.

What a MAC covers is the subtle part, and it differs by position:

* a request (or NOTIFY): the message as it was before the TSIG record was added
  (ARCOUNT one lower, the ID the signer used), then the "TSIG variables" (key name
  and algorithm in canonical form, the class ANY and TTL 0, the time signed, the
  fudge, the error, the other data);
* the first reply: the request's MAC, length-prefixed, then the same as a request;
  chaining the request's MAC is what ties the answer to this question;
* each later reply of a transfer: the previous reply's MAC, length-prefixed, the
  message, and only the timers (time signed, fudge): a chain, so a message dropped,
  reordered or replayed from another transfer breaks every MAC after it.

The ID: a forwarder may rewrite the header's ID; the signer's ID travels in the
TSIG record as Original ID and is what the MAC covers, so the verifier puts it back.

Why the TSIG must be the last record: the MAC covers every byte before it and
nothing after, so a record after it would ride along unsigned. A message with a
TSIG anywhere else, or with two, is refused (FORMERR), not half trusted.

Names in the MAC are lower case and uncompressed whatever a peer sent; a received
TSIG's owner may be a compression pointer, which :func:`read_name` follows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
from dataclasses import dataclass

from dnsside.dns.wire import FORMERR, name_end, question_end, to_text, to_wire

TSIG = 250
CLASS_ANY = 255
NOTAUTH = 9
BADSIG, BADKEY, BADTIME, BADTRUNC = 16, 17, 18, 22
FUDGE = 300  # seconds of clock difference accepted, as BIND, NSD and Knot use

# Algorithm name (text) -> hashlib name. hmac-md5, hmac-sha1 and hmac-sha224 are refused.
ALGORITHMS = {"hmac-sha256.": "sha256", "hmac-sha384.": "sha384", "hmac-sha512.": "sha512"}
WEAK = ("hmac-md5", "hmac-md5.sig-alg.reg.int", "hmac-sha1", "hmac-sha224")

_RR_HEAD = struct.Struct("!HHIH")  # TYPE, CLASS, TTL, RDLENGTH


class KeyFileError(ValueError):
    """A key file that cannot be used; the message says what and where (FILE:LINE)."""


@dataclass(frozen=True)
class TsigKey:
    """One shared key. ``repr`` leaves the secret out, so a log line never shows it."""

    name: str  # lower case, ending in "."
    name_wire: bytes  # canonical wire form
    algorithm: str  # e.g. "hmac-sha256."
    algorithm_wire: bytes
    secret: bytes
    digest: str  # hashlib's name, e.g. "sha256"

    def __repr__(self) -> str:
        return f"TsigKey(name={self.name!r}, algorithm={self.algorithm!r})"

    @property
    def mac_size(self) -> int:
        return hashlib.new(self.digest).digest_size

    def mac(self, data: bytes) -> bytes:
        return hmac.new(self.secret, data, self.digest).digest()


def make_key(name: str, algorithm: str, secret: bytes) -> TsigKey:
    """A :class:`TsigKey`; raises ValueError for a bad name or an algorithm we refuse."""
    alg = algorithm.lower().rstrip(".")
    if alg in WEAK:
        raise ValueError(f"algorithm {algorithm}: too weak; use hmac-sha256, hmac-sha384 or "
                         "hmac-sha512 (tsig-keygen -a hmac-sha256 NAME)")
    digest = ALGORITHMS.get(alg + ".")
    if digest is None:
        raise ValueError(f"algorithm {algorithm}: unsupported; use hmac-sha256, hmac-sha384 "
                         "or hmac-sha512")
    if not secret:
        raise ValueError("the secret is empty")
    wire = to_wire(name)
    return TsigKey(to_text(wire).lower(), wire, alg + ".", to_wire(alg), secret, digest)


def overhead(key: TsigKey) -> int:
    """The size of the TSIG record ``key`` adds to a reply: pack messages that much
    smaller than 65,535 bytes so a signed one still fits a TCP message."""
    return len(key.name_wire) + _RR_HEAD.size + len(key.algorithm_wire) + 16 + key.mac_size


# --------------------------------------------------------------------------- key files

_TOKEN = re.compile(r'\s+|#[^\n]*|//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|[{};]|[^\s{};"#/]+'
                    r'|/(?![/*])', re.S)


def _tokens(text: str, where: str) -> list[tuple[str, int, bool]]:
    """(token, line, was quoted) with comments and whitespace dropped."""
    out: list[tuple[str, int, bool]] = []
    pos, line = 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            what = "an unterminated comment" if text.startswith("/*", pos) else (
                "an unterminated string" if text[pos] == '"' else repr(text[pos]))
            raise KeyFileError(f"{where}:{line}: {what}")
        tok = m.group()
        if not (tok[0].isspace() or tok[0] == "#" or tok[:2] in ("//", "/*")):
            quoted = tok[0] == '"'
            out.append((re.sub(r"\\(.)", r"\1", tok[1:-1]) if quoted else tok, line, quoted))
        line += tok.count("\n")
        pos = m.end()
    return out


def parse_key_file(text: str, where: str) -> TsigKey:
    """The one key of a file as ``tsig-keygen`` prints it::

        key "xfr-key" {
            algorithm hmac-sha256;
            secret "base64...";
        };

    Raises :class:`KeyFileError` naming ``where`` and the line. The secret never
    appears in a message."""
    toks = _tokens(text, where)
    keys: list[TsigKey] = []
    i = 0
    last_line = text.count("\n") + 1

    def take(expect: str | None = None, what: str = "") -> tuple[str, int, bool]:
        nonlocal i
        if i >= len(toks):
            wanted = f"{expect!r} ({what})" if expect is not None else what
            raise KeyFileError(f"{where}:{toks[-1][1] if toks else 1}: the file ends where "
                               f"{wanted} should come")
        tok = toks[i]
        if expect is not None and (tok[0] != expect or tok[2]):
            raise KeyFileError(f"{where}:{tok[1]}: expected {expect!r} ({what}), found "
                               f"{_shown(tok)}")
        i += 1
        return tok

    while i < len(toks):
        word, line, _ = take(what="a key statement")
        if word != "key":
            raise KeyFileError(f"{where}:{line}: expected `key \"NAME\" {{ ... }};`, found "
                               f"{_shown(toks[i - 1])}")
        name, name_line, _ = take(what="the key's name")
        take("{", "after the key's name")
        algorithm: tuple[str, int] | None = None
        secret: tuple[str, int] | None = None
        while i < len(toks) and toks[i][0] != "}":
            stmt, sline, _ = take(what="algorithm or secret")
            value, vline, _ = take(what=f"the value of {stmt}")
            take(";", f"after {stmt}")
            if (stmt == "algorithm" and algorithm) or (stmt == "secret" and secret):
                raise KeyFileError(f"{where}:{sline}: key {name!r} has a second {stmt}")
            if stmt == "algorithm":
                algorithm = (value, vline)
            elif stmt == "secret":
                secret = (value, vline)
            else:
                raise KeyFileError(f"{where}:{sline}: unknown statement {stmt!r} in key "
                                   f"{name!r}: a key has algorithm and secret")
        take("}", "closing the key")
        take(";", "after the key's closing brace")
        if algorithm is None:
            raise KeyFileError(f"{where}:{name_line}: key {name!r} has no algorithm")
        if secret is None:
            raise KeyFileError(f"{where}:{name_line}: key {name!r} has no secret")
        try:
            raw = base64.b64decode("".join(secret[0].split()), validate=True)
        except (binascii.Error, ValueError):
            raise KeyFileError(f"{where}:{secret[1]}: the secret of key {name!r} is not "
                               "valid base64") from None
        try:
            to_wire(name)
        except ValueError as exc:
            raise KeyFileError(f"{where}:{name_line}: key name {exc}") from None
        try:
            keys.append(make_key(name, algorithm[0], raw))
        except ValueError as exc:
            line = secret[1] if "secret" in str(exc) else algorithm[1]
            raise KeyFileError(f"{where}:{line}: key {name!r}: {exc}") from None
    if len(keys) != 1:
        raise KeyFileError(f"{where}:{last_line}: {len(keys)} keys; the file must hold "
                           "exactly one (`tsig-keygen -a hmac-sha256 NAME` writes one)")
    return keys[0]


def _shown(tok: tuple[str, int, bool]) -> str:
    return f'"{tok[0]}"' if tok[2] else repr(tok[0])


def load_key_file(path: str) -> TsigKey:
    """The key in the file at ``path``. Raises :class:`KeyFileError`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise KeyFileError(f"{path}: cannot read the TSIG key file: {reason}") from None
    return parse_key_file(text, path)


# --------------------------------------------------------------------------- parsing


class _Malformed(Exception):
    pass


def read_name(data: bytes, i: int) -> tuple[bytes, int]:
    """The name at ``i`` in canonical form (pointers followed, lower case) and where it
    ends in ``data``. Raises ValueError for a name that runs off or loops."""
    out = bytearray()
    end: int | None = None
    hops = 0
    while True:
        if i >= len(data):
            raise ValueError("a name runs past the message")
        n = data[i]
        if n >= 0xC0:
            if i + 1 >= len(data) or hops > 64:
                raise ValueError("a bad compression pointer")
            if end is None:
                end = i + 2
            target = (n & 0x3F) << 8 | data[i + 1]
            if target >= i:  # pointers only point back: no loops
                raise ValueError("a compression pointer that points forward")
            i, hops = target, hops + 1
            continue
        if n > 63:
            raise ValueError("an unknown label type")
        out += data[i : i + n + 1]
        if len(out) > 255:
            raise ValueError("a name over 255 octets")
        if n == 0:
            return bytes(out).lower(), end if end is not None else i + 1
        i += n + 1


def _skip_name(data: bytes, i: int) -> int:
    """:func:`~dnsside.dns.wire.name_end`, a bad name raised as :class:`_Malformed`."""
    end = name_end(data, i)
    if end < 0:
        raise _Malformed
    return end


@dataclass(frozen=True)
class _Signed:
    """A message's TSIG record, taken apart."""

    start: int  # where the record starts: the MAC covers data[:start]
    key_name: bytes
    algorithm: bytes
    time_signed: int
    fudge: int
    mac: bytes
    original_id: int
    error: int
    other: bytes


def _find_tsig(data: bytes) -> _Signed | None:
    """The TSIG record of ``data``, None when it has none; raises _Malformed for one
    that is not the only and last record, or that does not parse."""
    if len(data) < 12:
        raise _Malformed
    qd, an, ns, ar = struct.unpack_from("!4H", data, 4)
    if ar == 0:
        return None
    i = 12
    try:
        for _ in range(qd):
            i = _skip_name(data, i) + 4
        found: _Signed | None = None
        total = an + ns + ar
        for n in range(total):
            start = i
            i = _skip_name(data, i)
            if i + 10 > len(data):
                raise _Malformed
            rtype, _rclass, _ttl, rdlen = _RR_HEAD.unpack_from(data, i)
            rd, i = i + 10, i + 10 + rdlen
            if i > len(data):
                raise _Malformed
            if rtype == TSIG:
                if n != total - 1 or i != len(data):  # not last, or one of two
                    raise _Malformed
                found = _tsig_rdata(data, start, rd, i)
    except ValueError:
        raise _Malformed from None
    return found


def _tsig_rdata(data: bytes, start: int, rd: int, end: int) -> _Signed:
    if _RR_HEAD.unpack_from(data, _skip_name(data, start))[1] != CLASS_ANY:
        raise _Malformed
    key_name, _ = read_name(data, start)
    algorithm, i = read_name(data, rd)
    if i + 10 > end:
        raise _Malformed
    hi, lo, fudge, mac_size = struct.unpack_from("!HIHH", data, i)
    i += 10
    mac = data[i : i + mac_size]
    i += mac_size
    if i + 6 > end:
        raise _Malformed
    original_id, error, other_len = struct.unpack_from("!HHH", data, i)
    i += 6
    if i + other_len != end:
        raise _Malformed
    return _Signed(start, key_name, algorithm, hi << 32 | lo, fudge, mac, original_id, error,
                   data[i:end])


def _unsigned(data: bytes, signed: _Signed) -> bytes:
    """``data`` as it was before its TSIG was added: no TSIG, ARCOUNT one lower, the
    signer's ID."""
    ar = struct.unpack_from("!H", data, 10)[0] - 1
    return (struct.pack("!H", signed.original_id) + data[2:10] + struct.pack("!H", ar)
            + data[12 : signed.start])


def _variables(key: TsigKey, time_signed: int, fudge: int, error: int, other: bytes) -> bytes:
    return (key.name_wire + struct.pack("!HI", CLASS_ANY, 0) + key.algorithm_wire
            + _timers(time_signed, fudge) + struct.pack("!HH", error, len(other)) + other)


def _timers(time_signed: int, fudge: int) -> bytes:
    return struct.pack("!HIH", time_signed >> 32 & 0xFFFF, time_signed & 0xFFFFFFFF, fudge)


def _prefixed(mac: bytes) -> bytes:
    return struct.pack("!H", len(mac)) + mac


def _append(message: bytes, key: TsigKey, time_signed: int, fudge: int, mac: bytes,
            error: int = 0, other: bytes = b"") -> bytes:
    """``message`` with a TSIG record added (ARCOUNT bumped; Original ID its own ID)."""
    rdata = (key.algorithm_wire + _timers(time_signed, fudge) + _prefixed(mac) + message[:2]
             + struct.pack("!HH", error, len(other)) + other)
    ar = struct.unpack_from("!H", message, 10)[0] + 1
    return (message[:10] + struct.pack("!H", ar) + message[12:] + key.name_wire
            + _RR_HEAD.pack(TSIG, CLASS_ANY, 0, len(rdata)) + rdata)


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Verdict:
    """What :func:`verify_request` found. ``status``:

    * ``unsigned``: no TSIG record; ``message`` is the request as received;
    * ``ok``: signed with our key and in time; ``message`` is what the responder
      should parse (TSIG removed, ARCOUNT decremented, the signer's ID), ``mac`` what
      the reply's MAC chains to (:class:`ReplySigner`);
    * ``badkey``, ``badsig``, ``badtime``, ``badtrunc``: answer :func:`error_reply`;
    * ``formerr``: a TSIG that is not the last record, two of them, or one that does
      not parse: answer :func:`error_reply` (FORMERR).
    """

    status: str
    message: bytes
    mac: bytes = b""
    time_signed: int = 0
    now: int = 0
    key: TsigKey | None = None  # ours, when the request named it
    key_name: bytes = b""  # as the request named them, canonical
    algorithm: bytes = b""
    fudge: int = FUDGE

    @property
    def signed(self) -> bool:
        return self.status != "unsigned"


def verify_request(message: bytes, key: TsigKey | None, now: int) -> Verdict:
    """Check the TSIG of a request (AXFR, IXFR, NOTIFY, ...) against ``key`` (None: we
    have none, so any signed request is ``badkey``) at ``now`` (Unix seconds).

    Only a MAC of the full length of the algorithm's digest is accepted: a shorter
    one that is right is ``badtrunc`` (RFC 8945 allows truncation as local policy; we
    have no reason to accept weaker MACs), a wrong or too short one ``badsig`` or
    ``formerr``. The checks go in the RFC's order: key, MAC, then time, so a request
    with a stale time and a wrong MAC is ``badsig`` and never learns our clock.
    """
    try:
        signed = _find_tsig(message)
    except _Malformed:
        return Verdict("formerr", message, now=now)
    if signed is None:
        return Verdict("unsigned", message, now=now)
    base = Verdict("badkey", message, signed.mac, signed.time_signed, now, None,
                   signed.key_name, signed.algorithm, signed.fudge)
    if key is None or signed.key_name != key.name_wire or signed.algorithm != key.algorithm_wire:
        return base
    full, size = key.mac_size, len(signed.mac)
    if size > full or size < max(10, full // 2):
        return _with(base, "formerr", key)
    unsigned = _unsigned(message, signed)
    expected = key.mac(unsigned + _variables(key, signed.time_signed, signed.fudge,
                                             signed.error, signed.other))
    if not hmac.compare_digest(expected[:size], signed.mac):
        return _with(base, "badsig", key)
    if size < full:
        return _with(base, "badtrunc", key)
    if abs(now - signed.time_signed) > signed.fudge:
        return _with(base, "badtime", key)
    return Verdict("ok", unsigned, signed.mac, signed.time_signed, now, key, signed.key_name,
                   signed.algorithm, signed.fudge)


def _with(v: Verdict, status: str, key: TsigKey) -> Verdict:
    return Verdict(status, v.message, v.mac, v.time_signed, v.now, key, v.key_name,
                   v.algorithm, v.fudge)


class ReplySigner:
    """Signs the replies to one verified request, in order: the first MAC chains to
    the request's, each later one to the one before (see the module's docstring).
    Every message of a transfer is signed, which every secondary accepts."""

    def __init__(self, key: TsigKey, request_mac: bytes, now: int, fudge: int = FUDGE) -> None:
        self.key = key
        self.now = now
        self.fudge = fudge
        self._prior = request_mac
        self._first = True

    def sign(self, reply: bytes) -> bytes:
        """``reply`` (its ARCOUNT not counting the TSIG) with its TSIG record added."""
        key, head = self.key, _prefixed(self._prior) + reply
        if self._first:
            mac = key.mac(head + _variables(key, self.now, self.fudge, 0, b""))
        else:
            mac = key.mac(head + _timers(self.now, self.fudge))
        self._prior, self._first = mac, False
        return _append(reply, key, self.now, self.fudge, mac)


_ERRORS = {"badsig": BADSIG, "badkey": BADKEY, "badtime": BADTIME, "badtrunc": BADTRUNC}


def error_reply(message: bytes, verdict: Verdict) -> bytes:
    """The answer to a request :func:`verify_request` turned down, ``message`` as
    received: NOTAUTH with the question and a TSIG record carrying the error. BADKEY
    and BADSIG go unsigned (MAC size 0: we cannot or must not sign with a key the
    client does not share); BADTIME and BADTRUNC are signed, BADTIME with our clock
    in Other Data so the client can see how far off it is. ``formerr``: FORMERR, no
    TSIG."""
    qend = question_end(message) if message[4:6] == b"\x00\x01" else None
    question = message[12:qend] if qend is not None else b""
    flags = 0x8000 | (message[2] << 8 & 0x7900 if len(message) > 2 else 0)  # QR, opcode, RD
    if verdict.status == "formerr" or verdict.status not in _ERRORS:
        return (message[:2].ljust(2, b"\0")
                + struct.pack("!5H", flags | FORMERR, 1 if question else 0, 0, 0, 0) + question)
    error = _ERRORS[verdict.status]
    reply = message[:2] + struct.pack("!5H", flags | NOTAUTH, 1 if question else 0, 0, 0,
                                      0) + question
    key = verdict.key
    if key is None or error in (BADKEY, BADSIG):
        echo = verdict.key_name, verdict.algorithm
        rdata = (echo[1] + _timers(verdict.now, verdict.fudge) + _prefixed(b"")
                 + message[:2] + struct.pack("!HH", error, 0))
        ar = struct.pack("!H", 1)
        return (reply[:10] + ar + reply[12:] + echo[0]
                + _RR_HEAD.pack(TSIG, CLASS_ANY, 0, len(rdata)) + rdata)
    # Signed: the request's time (BIND and NSD do so; the client checks the MAC, not the
    # time, and reads ours from Other Data), chained to the request's MAC.
    other = struct.pack("!HI", verdict.now >> 32 & 0xFFFF, verdict.now & 0xFFFFFFFF) \
        if error == BADTIME else b""
    mac = key.mac(_prefixed(verdict.mac) + reply
                  + _variables(key, verdict.time_signed, verdict.fudge, error, other))
    return _append(reply, key, verdict.time_signed, verdict.fudge, mac, error, other)


# --------------------------------------------------------------------------- queries


def sign_query(message: bytes, key: TsigKey, now: int, fudge: int = FUDGE
               ) -> tuple[bytes, bytes]:
    """``message`` (a NOTIFY, say) signed with ``key``, and its MAC, which the answer's
    MAC must chain to (:func:`verify_response`)."""
    mac = key.mac(message + _variables(key, now, fudge, 0, b""))
    return _append(message, key, now, fudge, mac), mac


def verify_response(reply: bytes, key: TsigKey, request_mac: bytes, now: int) -> bool:
    """Whether ``reply`` answers the query whose MAC was ``request_mac``, signed with
    ``key``, without a TSIG error, and in time. An unsigned reply is False."""
    try:
        signed = _find_tsig(reply)
    except _Malformed:
        return False
    if (signed is None or signed.key_name != key.name_wire
            or signed.algorithm != key.algorithm_wire or signed.error
            or len(signed.mac) != key.mac_size):
        return False
    expected = key.mac(_prefixed(request_mac) + _unsigned(reply, signed)
                       + _variables(key, signed.time_signed, signed.fudge, 0, signed.other))
    return (hmac.compare_digest(expected, signed.mac)
            and abs(now - signed.time_signed) <= signed.fudge)
