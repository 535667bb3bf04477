"""TSIG against BIND's and Knot's own tools: tsig-keygen's key files parse, dig and kdig
verify what we sign and sign what we verify (tests/dns/test_tsig.py has the same rules
against dnspython, in the quick tier)."""

from __future__ import annotations

import base64
import re
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dnsside.dns import tsig
from dnsside.dns.tsig import ReplySigner, TsigKey
from tests.dns.test_tsig import B64, our_key, transfer_replies

# --------------------------------------------------------------------------- key files


@pytest.mark.parametrize("algorithm,size", [("hmac-sha256", 32), ("hmac-sha384", 48),
                                            ("hmac-sha512", 64)])
def test_tsig_keygen_files_parse(tmp_path: Path, algorithm: str, size: int) -> None:
    text = subprocess.run(["tsig-keygen", "-a", algorithm, "Transfer-Key"], check=True,
                          capture_output=True, text=True).stdout
    path = tmp_path / "key"
    path.write_text(text)
    key = tsig.load_key_file(str(path))
    assert key.name == "transfer-key." and key.algorithm == algorithm + "."
    assert key.name_wire == b"\x0ctransfer-key\x00"
    assert len(key.secret) == size and key.digest == algorithm[5:]
    assert base64.b64encode(key.secret).decode() in text
    assert base64.b64encode(key.secret).decode() not in repr(key)
    assert repr(key.secret) not in repr(key) and repr(key.secret) not in f"{key}"


# --------------------------------------------------------------------------- dig


@pytest.fixture
def udp_peer() -> Iterator[tuple[socket.socket, int]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(10)
    yield sock, sock.getsockname()[1]
    sock.close()


def _dig_against(sock: socket.socket, port: int, key_args: list[str], key: TsigKey,
                 spoil: bool = False) -> tuple[tsig.Verdict, subprocess.CompletedProcess[str]]:
    """dig asks ``sock`` with ``key_args``; we verify the query and answer it signed
    (one MAC byte changed when ``spoil``); dig's verdict on our reply is its output."""
    got: list[tsig.Verdict] = []

    def answer() -> None:
        query, peer = sock.recvfrom(65535)
        v = tsig.verify_request(query, key, int(time.time()))
        got.append(v)
        if v.status != "ok":
            return
        reply = bytearray(v.message)
        reply[2] |= 0x84  # QR, AA
        signed = bytearray(ReplySigner(key, v.mac, v.now).sign(bytes(reply)))
        if spoil:
            signed[-10] ^= 1  # inside the MAC (before Original ID, error, other length)
        sock.sendto(bytes(signed), peer)

    thread = threading.Thread(target=answer)
    thread.start()
    out = subprocess.run(["dig", "+tries=1", "+time=2", "-p", str(port), *key_args,
                          "@127.0.0.1", "svc-global.", "SOA"],
                         capture_output=True, text=True, timeout=20)
    thread.join(timeout=15)
    assert got, out.stdout + out.stderr
    return got[0], out


def test_dig_y_query_verifies_and_dig_accepts_our_signed_reply(
        udp_peer: tuple[socket.socket, int]) -> None:
    sock, port = udp_peer
    key = our_key()
    v, out = _dig_against(sock, port, ["-y", f"hmac-sha256:xfr-key:{B64}"], key)
    assert v.status == "ok"
    assert out.returncode == 0, out.stdout + out.stderr
    assert "status: NOERROR" in out.stdout
    assert "xfr-key.\t\t0\tANY\tTSIG\thmac-sha256." in out.stdout
    assert "verify" not in out.stdout + out.stderr


def test_dig_rejects_a_reply_with_a_changed_mac(udp_peer: tuple[socket.socket, int]) -> None:
    sock, port = udp_peer
    v, out = _dig_against(sock, port, ["-y", f"hmac-sha256:xfr-key:{B64}"], our_key(),
                          spoil=True)
    assert v.status == "ok"
    assert "tsig verify failure" in out.stdout + out.stderr


def test_dig_k_with_a_tsig_keygen_file(tmp_path: Path,
                                      udp_peer: tuple[socket.socket, int]) -> None:
    sock, port = udp_peer
    path = tmp_path / "key"
    path.write_text(subprocess.run(["tsig-keygen", "-a", "hmac-sha512", "dig-key"], check=True,
                                   capture_output=True, text=True).stdout)
    key = tsig.load_key_file(str(path))
    v, out = _dig_against(sock, port, ["-k", str(path)], key)
    assert v.status == "ok" and v.key is key
    assert out.returncode == 0 and "verify" not in out.stdout + out.stderr
    wrong = our_key(name="dig-key.", algorithm="hmac-sha512", secret=b"w" * 64)
    v, _ = _dig_against(sock, port, ["-k", str(path)], wrong)
    assert v.status == "badsig"



@pytest.fixture
def tcp_peer() -> Iterator[tuple[socket.socket, int]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    sock.settimeout(10)
    yield sock, sock.getsockname()[1]
    sock.close()


def _read_exactly(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


@pytest.mark.parametrize("client,spoil", [
    ("dig", None), ("dig", 0), ("dig", 2),
    # kdig checks the first message's TSIG only (Knot's secondary checks them all).
    ("kdig", None), ("kdig", 0)])
def test_bind_and_knot_accept_a_transfer_we_sign(tcp_peer: tuple[socket.socket, int],
                                                 client: str, spoil: int | None) -> None:
    """dig (BIND) and kdig (Knot) take an AXFR of three messages, each signed, and check
    its MACs; one byte changed in the MAC of message ``spoil`` fails them."""
    sock, port = tcp_peer
    key = our_key()
    got: list[tsig.Verdict] = []

    def serve() -> None:
        conn, _ = sock.accept()
        with conn:
            size = struct.unpack("!H", _read_exactly(conn, 2))[0]
            query = _read_exactly(conn, size)
            v = tsig.verify_request(query, key, int(time.time()))
            got.append(v)
            signer = ReplySigner(key, v.mac, v.now)
            signed = [signer.sign(r) for r in transfer_replies(v.message, 10, 4)]
            if spoil is not None:
                changed = bytearray(signed[spoil])
                changed[-10] ^= 1  # inside the MAC (before Original ID, error, other length)
                signed[spoil] = bytes(changed)
            conn.sendall(b"".join(struct.pack("!H", len(m)) + m for m in signed))

    thread = threading.Thread(target=serve)
    thread.start()
    tries = ["+time=3", "+tries=1"] if client == "dig" else ["+timeout=3", "+retry=0"]
    out = subprocess.run([client, *tries, "-p", str(port), "-y",
                          f"hmac-sha256:xfr-key:{B64}", "@127.0.0.1", "svc-global.", "AXFR"],
                         capture_output=True, text=True, timeout=30)
    thread.join(timeout=15)
    text = out.stdout + out.stderr
    assert got and got[0].status == "ok", text
    records = [line for line in out.stdout.splitlines()
               if line and not line.startswith(";") and "\tTSIG\t" not in line]
    if spoil is None:
        assert len(records) == 12, text
        assert not re.search(r"fail|BADSIG|verify", text, re.I), text
    else:
        assert re.search(r"tsig verify failure|failed.*TSIG|TSIG.*fail|BADSIG", text,
                         re.I), text
