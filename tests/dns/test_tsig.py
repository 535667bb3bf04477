"""TSIG (dnsside.dns.tsig) checked against other implementations: dnspython signs the
requests and reads the replies (also a multi-message transfer, as dns.query.xfr does).
BIND's tsig-keygen, dig and kdig check the same against BIND and Knot in
tests/interop/test_tsig_tools.py (the full tier: this file is in the quick one)."""

from __future__ import annotations

import base64
import struct
import time
from pathlib import Path

import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.tsig
import dns.tsigkeyring
import pytest

from dnsside.dns import tsig
from dnsside.dns.tsig import KeyFileError, ReplySigner, TsigKey

pytestmark = pytest.mark.quick

SECRET = bytes(range(32))
B64 = base64.b64encode(SECRET).decode()


def our_key(name: str = "xfr-key.", algorithm: str = "hmac-sha256",
            secret: bytes = SECRET) -> TsigKey:
    return tsig.parse_key_file(f'key "{name}" {{ algorithm {algorithm}; secret '
                               f'"{base64.b64encode(secret).decode()}"; }};', "test")


def their_key(name: str = "xfr-key.", algorithm: str = "hmac-sha256",
              secret: bytes = SECRET) -> dns.tsig.Key:
    return dns.tsig.Key(name, secret, algorithm)


def signed_axfr(key: dns.tsig.Key, zone: str = "svc-global.", **kw: object
                ) -> dns.message.QueryMessage:
    q = dns.message.make_query(zone, "AXFR")
    q.use_tsig(key, **kw)  # type: ignore[arg-type]
    return q


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize("algorithm", ["hmac-sha256", "hmac-sha384", "hmac-sha512"])
def test_a_request_dnspython_signed_verifies(algorithm: str) -> None:
    q = signed_axfr(their_key(algorithm=algorithm))
    wire = q.to_wire()
    v = tsig.verify_request(wire, our_key(algorithm=algorithm), int(time.time()))
    assert v.status == "ok"
    assert v.mac == q.mac
    # What the responder parses: no TSIG, ARCOUNT back to 0, the same question.
    assert struct.unpack_from("!H", v.message, 10)[0] == 0
    parsed = dns.message.from_wire(v.message)
    assert parsed.question == q.question and parsed.id == q.id and not parsed.had_tsig


def test_the_original_id_is_put_back() -> None:
    """A forwarder rewrote the header's ID: the MAC covers the signer's, which the
    verifier restores from the TSIG record."""
    q = signed_axfr(their_key())
    wire = bytearray(q.to_wire())
    wire[0:2] = struct.pack("!H", (q.id + 1) & 0xFFFF)
    v = tsig.verify_request(bytes(wire), our_key(), int(time.time()))
    assert v.status == "ok"
    assert struct.unpack_from("!H", v.message)[0] == q.id


def test_a_flipped_byte_is_badsig() -> None:
    wire = bytearray(signed_axfr(their_key()).to_wire())
    wire[14] ^= 0x20  # a letter of the question name: another case, another MAC
    assert tsig.verify_request(bytes(wire), our_key(), int(time.time())).status == "badsig"


def test_a_wrong_secret_is_badsig() -> None:
    wire = signed_axfr(their_key(secret=b"x" * 32)).to_wire()
    assert tsig.verify_request(wire, our_key(), int(time.time())).status == "badsig"


def test_an_unknown_key_name_or_algorithm_is_badkey() -> None:
    now = int(time.time())
    other_name = signed_axfr(their_key(name="other-key.")).to_wire()
    assert tsig.verify_request(other_name, our_key(), now).status == "badkey"
    other_alg = signed_axfr(their_key(algorithm="hmac-sha512")).to_wire()
    assert tsig.verify_request(other_alg, our_key(), now).status == "badkey"
    assert tsig.verify_request(other_name, None, now).status == "badkey"


def test_the_key_name_is_compared_in_any_case() -> None:
    wire = signed_axfr(their_key(name="XFR-Key.")).to_wire()
    assert tsig.verify_request(wire, our_key(), int(time.time())).status == "ok"


def test_a_time_outside_the_fudge_is_badtime() -> None:
    q = signed_axfr(their_key(), fudge=300)
    wire = q.to_wire()
    now = int(time.time())
    assert tsig.verify_request(wire, our_key(), now + 290).status == "ok"
    assert tsig.verify_request(wire, our_key(), now + 1000).status == "badtime"
    assert tsig.verify_request(wire, our_key(), now - 1000).status == "badtime"


def test_unsigned_and_malformed() -> None:
    now = int(time.time())
    plain = dns.message.make_query("svc-global.", "AXFR").to_wire()
    v = tsig.verify_request(plain, our_key(), now)
    assert v.status == "unsigned" and v.message == plain
    signed = signed_axfr(their_key()).to_wire()
    assert tsig.verify_request(signed[:-3], our_key(), now).status == "formerr"
    assert tsig.verify_request(signed + b"\0", our_key(), now).status == "formerr"


def test_a_tsig_that_is_not_last_or_twice_is_formerr() -> None:
    """The MAC covers what precedes the TSIG only: a record after it would ride along
    unsigned, so such a message is refused whatever its MAC."""
    now = int(time.time())
    q = dns.message.make_query("svc-global.", "AXFR")
    question_end = len(q.to_wire())
    q.additional.append(dns.rrset.from_text("x.svc-global.", 0, "IN", "A", "192.0.2.1"))
    a_end = len(q.to_wire())
    q.use_tsig(their_key())
    signed = q.to_wire()
    assert tsig.verify_request(signed, our_key(), now).status == "ok"
    # Move the A record after the TSIG.
    a_rr, tsig_rr = signed[question_end:a_end], signed[a_end:]
    moved = signed[:question_end] + tsig_rr + a_rr
    assert tsig.verify_request(moved, our_key(), now).status == "formerr"
    # Two TSIGs: the whole record once more, ARCOUNT bumped.
    twice = bytearray(signed + tsig_rr)
    twice[10:12] = struct.pack("!H", 3)
    assert tsig.verify_request(bytes(twice), our_key(), now).status == "formerr"


def test_a_compressed_key_name_verifies() -> None:
    """A key named like the zone: dnspython writes the TSIG's owner as a pointer to the
    question name; the MAC still covers it spelled out."""
    key_name = "svc-global."
    wire = signed_axfr(their_key(name=key_name)).to_wire()
    assert b"\xc0\x0c\x00\xfa\x00\xff" in wire  # owner: pointer; TYPE TSIG, CLASS ANY
    v = tsig.verify_request(wire, our_key(name=key_name), int(time.time()))
    assert v.status == "ok"


def test_a_truncated_mac_is_not_accepted() -> None:
    """A right MAC cut to half its length: badtrunc; cut below half: formerr."""
    key = our_key()
    q = dns.message.make_query("svc-global.", "AXFR")
    unsigned = q.to_wire()
    now = int(time.time())
    signed, mac = tsig.sign_query(unsigned, key, now)
    assert tsig.verify_request(signed, key, now).status == "ok"

    def cut(size: int) -> bytes:
        rr_start = len(unsigned)
        head = signed[:rr_start]
        rest = signed[rr_start:]
        i = len(key.name_wire) + 10 + len(key.algorithm_wire) + 8
        rdata = rest[len(key.name_wire) + 10:]
        rdata = rdata[: i - len(key.name_wire) - 10] + struct.pack("!H", size) + mac[:size] \
            + rdata[i - len(key.name_wire) - 10 + 2 + len(mac):]
        return head + rest[: len(key.name_wire) + 8] + struct.pack("!H", len(rdata)) + rdata

    assert tsig.verify_request(cut(32), key, now).status == "ok"
    assert tsig.verify_request(cut(16), key, now).status == "badtrunc"
    assert tsig.verify_request(cut(8), key, now).status == "formerr"


def test_no_damage_to_a_signed_request_crashes_anything() -> None:
    """Every byte changed and every truncation: a verdict and an error reply, never an
    exception, and never "ok" for a changed byte covered by the MAC."""
    key = our_key()
    q = dns.message.make_query("svc-global.", "AXFR")
    q.use_tsig(their_key(name="svc-global."))  # the owner compressed: pointers to damage
    wire = q.to_wire()
    now = int(time.time())
    cases = [wire[:n] for n in range(len(wire))]
    cases += [wire[:i] + bytes([wire[i] ^ x]) + wire[i + 1:] for i in range(len(wire))
              for x in (0x01, 0x40, 0xC0, 0xFF)]
    for damaged in cases:
        v = tsig.verify_request(damaged, our_key(name="svc-global."), now)
        if v.status != "unsigned":
            tsig.error_reply(damaged, v)
        assert not tsig.verify_response(damaged, key, b"", now)
    # Not covered: the header's ID (Original ID is) and the TSIG record's TTL (the MAC
    # covers a TTL of 0 whatever the record says).
    ttl = wire.index(b"\xc0\x0c\x00\xfa\x00\xff") + 6
    uncovered = {0, 1, ttl, ttl + 1, ttl + 2, ttl + 3}
    oks = [i for i in range(len(wire)) if i not in uncovered
           for x in (0x01, 0x40, 0xC0, 0xFF)
           if tsig.verify_request(wire[:i] + bytes([wire[i] ^ x]) + wire[i + 1:],
                                  our_key(name="svc-global."), now).status == "ok"]
    assert oks == []


# --------------------------------------------------------------------------- replies


def transfer_replies(request: bytes, records: int, per_message: int) -> list[bytes]:
    """The unsigned messages of an AXFR answer: the SOA, ``records`` A records, the SOA."""
    query = dns.message.from_wire(request)
    soa = dns.rrset.from_text("svc-global.", 5, "IN", "SOA",
                              "ns.svc-global. hostmaster.svc-global. 7 60 30 600 5")
    rrs = [soa] + [dns.rrset.from_text(f"h{i}.svc-global.", 5, "IN", "A", f"192.0.2.{i}")
                   for i in range(records)] + [soa]
    out = []
    for at in range(0, len(rrs), per_message):
        r = dns.message.make_response(query)
        r.flags |= 0x0400
        r.answer = rrs[at : at + per_message]
        out.append(r.to_wire())
    return out


def _read_as_xfr(q: dns.message.QueryMessage, signed: list[bytes],
                 key: dns.tsig.Key) -> list[dns.message.Message]:
    """What dns.query.xfr does with each message of a transfer over TCP."""
    ctx = None
    out = []
    for wire in signed:
        m = dns.message.from_wire(wire, keyring=key, request_mac=q.mac, xfr=True,
                                  origin=dns.name.from_text("svc-global."), tsig_ctx=ctx,
                                  multi=True)
        ctx = m.tsig_ctx
        assert m.had_tsig
        out.append(m)
    return out


@pytest.mark.parametrize("algorithm", ["hmac-sha256", "hmac-sha512"])
def test_a_multi_message_transfer_we_sign_dnspython_accepts(algorithm: str) -> None:
    client = their_key(algorithm=algorithm)
    key = our_key(algorithm=algorithm)
    q = signed_axfr(client)
    v = tsig.verify_request(q.to_wire(), key, int(time.time()))
    assert v.status == "ok" and v.key is key
    signer = ReplySigner(key, v.mac, v.now)
    replies = transfer_replies(v.message, 10, 4)
    assert len(replies) == 3
    signed = [signer.sign(r) for r in replies]
    for plain, s in zip(replies, signed, strict=True):
        assert len(s) - len(plain) == tsig.overhead(key)
    got = _read_as_xfr(q, signed, client)
    assert sum(len(m.answer) for m in got) == 12
    assert got[0].answer[0].rdtype == dns.rdatatype.SOA


def test_a_transfer_with_a_message_changed_dropped_or_swapped_fails() -> None:
    """The chain: every later MAC covers the one before it."""
    client, key = their_key(), our_key()
    q = signed_axfr(client)
    v = tsig.verify_request(q.to_wire(), key, int(time.time()))
    replies = transfer_replies(v.message, 10, 4)
    signer = ReplySigner(key, v.mac, v.now)
    signed = [signer.sign(r) for r in replies]
    changed = bytearray(signed[1])
    changed[40] ^= 1
    for broken in ([signed[0], bytes(changed), signed[2]], [signed[0], signed[2]],
                   [signed[1], signed[0], signed[2]]):
        with pytest.raises(dns.tsig.BadSignature):
            _read_as_xfr(q, broken, client)
    # Signed for another request: the first MAC chains to the wrong request MAC.
    other = signed_axfr(client)
    with pytest.raises(dns.tsig.BadSignature):
        _read_as_xfr(other, signed, client)


def _tsig_of(reply: bytes) -> tuple[dns.message.Message, int]:
    """The reply read without checking its TSIG, and where its TSIG record starts."""
    m = dns.message.from_wire(reply, keyring=False)
    assert m.tsig is not None
    rd = m.tsig[0].to_wire()
    return m, len(reply) - len(rd) - 10 - len(m.tsig.name.to_wire() or b"")


@pytest.mark.parametrize("status,error,peer_error", [
    ("badsig", dns.rcode.BADSIG, dns.tsig.PeerBadSignature),
    ("badkey", dns.rcode.BADKEY, dns.tsig.PeerBadKey),
    ("badtime", dns.rcode.BADTIME, dns.tsig.PeerBadTime),
])
def test_error_replies_read_by_dnspython(status: str, error: int,
                                         peer_error: type[Exception]) -> None:
    now = int(time.time())
    if status == "badsig":
        client = their_key(secret=b"y" * 32)
    elif status == "badkey":
        client = their_key(name="unknown-key.")
    else:
        client = their_key()
    q = signed_axfr(client)
    wire = q.to_wire()
    v = tsig.verify_request(wire, our_key(), now + (1000 if status == "badtime" else 0))
    assert v.status == status
    reply = tsig.error_reply(wire, v)
    with pytest.raises(peer_error):
        dns.message.from_wire(reply, keyring=client, request_mac=q.mac)
    m, start = _tsig_of(reply)
    assert m.id == q.id and m.rcode() == dns.rcode.NOTAUTH
    assert m.question == q.question
    assert m.tsig_error == error
    rd = m.tsig[0]
    assert m.tsig.name == client.name and rd.algorithm == client.algorithm
    if status == "badtime":
        # Signed, chained to the request, and our clock in Other Data.
        assert rd.other == struct.pack("!HI", 0, now + 1000)
        new_wire = reply[:10] + struct.pack("!H", 0) + reply[12:start]
        expected, _ = dns.tsig.sign(new_wire, client, rd, time=rd.time_signed,
                                    request_mac=q.mac)
        assert rd.mac == expected.mac and len(rd.mac) == 32
    else:
        assert rd.mac == b""


def test_a_malformed_signed_request_gets_formerr() -> None:
    q = signed_axfr(their_key())
    wire = q.to_wire() + b"\0"
    v = tsig.verify_request(wire, our_key(), int(time.time()))
    reply = dns.message.from_wire(tsig.error_reply(wire, v))
    assert reply.rcode() == dns.rcode.FORMERR and reply.id == q.id
    assert reply.question == q.question and not reply.had_tsig


# --------------------------------------------------------------------------- NOTIFY


def _notify() -> dns.message.Message:
    m = dns.message.Message()
    m.set_opcode(dns.opcode.NOTIFY)
    m.flags |= 0x0400
    m.question.append(dns.rrset.RRset(dns.name.from_text("svc-global."), dns.rdataclass.IN,
                                      dns.rdatatype.SOA))
    return m


def test_a_notify_we_sign_dnspython_verifies_and_its_signed_answer_we_verify() -> None:
    key, client = our_key(), their_key()
    now = int(time.time())
    signed, mac = tsig.sign_query(_notify().to_wire(), key, now)
    got = dns.message.from_wire(signed, keyring=client)
    assert got.had_tsig and got.opcode() == dns.opcode.NOTIFY and got.mac == mac
    answer = dns.message.make_response(got)
    answer_wire = answer.to_wire()
    assert tsig.verify_response(answer_wire, key, mac, now)
    bad = bytearray(answer_wire)
    bad[-20] ^= 1
    assert not tsig.verify_response(bytes(bad), key, mac, now)
    assert not tsig.verify_response(answer_wire, key, b"\0" * 32, now)  # another query
    assert not tsig.verify_response(answer_wire, key, mac, now + 1000)
    answer.use_tsig(their_key(secret=b"z" * 32))
    assert not tsig.verify_response(answer.to_wire(), key, mac, now)
    unsigned = dns.message.Message(id=got.id)
    unsigned.flags = answer.flags
    unsigned.question = answer.question
    assert not tsig.verify_response(unsigned.to_wire(), key, mac, now)


# --------------------------------------------------------------------------- key files


def test_comments_and_whitespace_anywhere() -> None:
    text = (f'# a comment\n// another\n/* and\n one */ key\n"k1"{{algorithm\nHMAC-SHA512 ;'
            f'secret "{B64[:10]} {B64[10:]}";/* x */}}\n;\n')
    key = tsig.parse_key_file(text, "f")
    assert key.name == "k1." and key.algorithm == "hmac-sha512." and key.secret == SECRET


@pytest.mark.parametrize("text,message", [
    ("", "f:1: 0 keys; the file must hold exactly one (`tsig-keygen -a hmac-sha256 NAME` "
         "writes one)"),
    (f'key "a" {{ algorithm hmac-sha256; secret "{B64}"; }};\n'
     f'key "b" {{ algorithm hmac-sha256; secret "{B64}"; }};\n',
     "f:3: 2 keys; the file must hold exactly one (`tsig-keygen -a hmac-sha256 NAME` "
     "writes one)"),
    ('key "a" {\n algorithm hmac-sha256;\n secret "not base64!";\n};\n',
     "f:3: the secret of key 'a' is not valid base64"),
    ('key "a" {\n algorithm hmac-sha256;\n};\n', "f:1: key 'a' has no secret"),
    (f'key "a" {{\n secret "{B64}";\n}};\n', "f:1: key 'a' has no algorithm"),
    (f'key "a" {{\n algorithm hmac-md5;\n secret "{B64}";\n}};\n',
     "f:2: key 'a': algorithm hmac-md5: too weak; use hmac-sha256, hmac-sha384 or hmac-sha512 "
     "(tsig-keygen -a hmac-sha256 NAME)"),
    (f'key "a" {{\n algorithm hmac-sha1;\n secret "{B64}";\n}};\n',
     "f:2: key 'a': algorithm hmac-sha1: too weak; use hmac-sha256, hmac-sha384 or "
     "hmac-sha512 (tsig-keygen -a hmac-sha256 NAME)"),
    (f'key "a" {{\n algorithm hmac-foo;\n secret "{B64}";\n}};\n',
     "f:2: key 'a': algorithm hmac-foo: unsupported; use hmac-sha256, hmac-sha384 or "
     "hmac-sha512"),
    (f'key "a" {{\n algorithm hmac-sha256;\n secret "{B64}";\n}}\n',
     "f:4: the file ends where ';' (after the key's closing brace) should come"),
    (f'key "a" {{\n algorithm hmac-sha256;\n secret "{B64}"\n}};\n',
     "f:4: expected ';' (after secret), found '}'"),
    ('key "a" {\n algorithm hmac-sha256;\n secret "abc\n', "f:3: an unterminated string"),
    ('/* no end\nkey "a" {};', "f:1: an unterminated comment"),
    ('options { };', "f:1: expected `key \"NAME\" { ... };`, found 'options'"),
    (f'key "a" {{\n algorithm hmac-sha256;\n secret "{B64}";\n server 1.2.3.4;\n}};\n',
     "f:4: unknown statement 'server' in key 'a': a key has algorithm and secret"),
    (f'key "a" {{\n algorithm hmac-sha256;\n secret "{B64}";\n algorithm hmac-sha512;\n}};',
     "f:4: key 'a' has a second algorithm"),
    (f'key "a..b" {{ algorithm hmac-sha256; secret "{B64}"; }};',
     "f:1: key name 'a..b': the label '' has 0 octets; a label has 1 to 63"),
])
def test_malformed_key_files_say_what_and_where(text: str, message: str) -> None:
    with pytest.raises(KeyFileError) as exc:
        tsig.parse_key_file(text, "f")
    assert str(exc.value) == message
    assert B64 not in str(exc.value)


def test_an_unreadable_key_file(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError) as exc:
        tsig.load_key_file(str(tmp_path / "missing"))
    assert str(exc.value) == f"{tmp_path / 'missing'}: cannot read the TSIG key file: " \
        "No such file or directory"
