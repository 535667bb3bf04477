"""A Link's credentials Secret written by an attacker: its kubeconfig is read as data only.

The same fake API servers as tests/sources/test_flat_serve.py: the local cluster `east` and
the linked cluster `west` (served over TLS with the test CA, testkit/testca.py), whose
good Link goes on working throughout. Next to it, one Link per hostile kubeconfig form,
each with its own Secret: an exec plugin and a gcp auth provider whose commands would
create a marker file, a tokenFile / client-certificate / client-key /
certificate-authority naming a local file that holds a secret (a token `west` would
accept, as dnsside's own service-account token would be), insecure-skip-tls-verify, a
plain http:// server and a proxy-url. The servers the hostile Secrets name are a
recording listener on loopback that must see no connection at all, and `west`, which
records every Authorization header and every request that came without TLS.

Seen from outside, as everywhere: the log, /metrics, /debug/explain, `dnsside explain`,
`dnsside check`, and DNS answers.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.clusters import REMOTE_TOKEN, REMOTE_USER, linked_cluster, local_cluster, serve_flat
from testkit.fakekube_rbac import REMOTE_ACCESS_RULES
from testkit.flatnet import link, local_objects, west_objects
from testkit.serve import Dnsside, answers, run_cli, wait_for
from testkit.testca import fake_ca, other_ca
from testkit.threadedkube import ThreadedKube

# What a local file holds: a token west accepts (as the pod's own service-account token
# would be accepted by its own cluster). It must never leave the process.
LOCAL_SECRET = "local-file-secret-5f1c0de"
NS = "linkerd-multicluster"
DB = "db.data.svc-global"
EAST_DB = {"10.42.0.10", "10.42.0.11"}
WEST_DB0 = "10.244.1.5"


class Recorder:
    """A TCP listener on 127.0.0.1 that answers nothing and keeps every byte it is sent,
    per connection: TLS or not, whatever is sent to it is seen."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytearray] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            seen = bytearray()
            with self.lock:
                self.connections.append(seen)
            threading.Thread(target=self._read, args=(conn, seen), daemon=True).start()

    def _read(self, conn: socket.socket, seen: bytearray) -> None:
        conn.settimeout(5)
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with self.lock:
                    seen.extend(data)

    def received(self) -> bytes:
        with self.lock:
            return b"".join(bytes(c) for c in self.connections)

    def close(self) -> None:
        self.sock.close()


class ConnectProxy:
    """An HTTP CONNECT proxy on 127.0.0.1 that records each tunnel's target."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.targets: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                conn.close()
                return
            head += chunk
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        self.targets.append(f"{method} {target}")
        host, _, port = target.rpartition(":")
        try:
            upstream = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            conn.close()
            return
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


def kubeconfig(cluster: dict[str, Any], user: dict[str, Any]) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "hostile",
        "clusters": [{"name": "hostile", "cluster": cluster}],
        "users": [{"name": "hostile", "user": user}],
        "contexts": [{"name": "hostile", "context": {"cluster": "hostile", "user": "hostile"}}],
    })


def secret(cluster: str, text: str) -> dict[str, Any]:
    """The Secret of the Link to ``cluster`` (flatnet.link names it)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "mirror.linkerd.io/remote-kubeconfig",
            "metadata": {"name": f"cluster-credentials-{cluster}", "namespace": NS},
            "data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def west(tmp_path: Path) -> Iterator[ThreadedKube]:
    """The good linked cluster; it accepts the remote-access token and LOCAL_SECRET."""
    k = linked_cluster(tmp_path / "west", west_objects(), tokens=(REMOTE_TOKEN, LOCAL_SECRET))
    yield k
    k.close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    r = Recorder()
    yield r
    r.close()


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    p = ConnectProxy()
    yield p
    p.close()


class Hostile:
    """The hostile forms, by cluster name: (kubeconfig, the field dnsside must name)."""

    def __init__(self, tmp_path: Path, west: ThreadedKube, recorder: Recorder) -> None:
        self.markers = {name: tmp_path / f"ran-{name}" for name in ("exec", "authprovider")}
        secret_file = tmp_path / "local-token"
        secret_file.write_text(LOCAL_SECRET)
        self.secret_file = secret_file
        ca = b64(fake_ca().ca_pem)
        good = {"server": west.kube.tls_url, "certificate-authority-data": ca}
        rec_https = {"server": f"https://127.0.0.1:{recorder.port}",
                     "certificate-authority-data": ca}
        credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                                 "kind": "ExecCredential", "status": {"token": REMOTE_TOKEN}})
        self.forms: dict[str, tuple[str, str]] = {
            # Would work if run: west accepts the token the command prints.
            "exec": (kubeconfig(good, {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/bin/sh",
                "args": ["-c", f"touch {self.markers['exec']}; echo '{credential}'"]}}),
                "users[0].user.exec"),
            "authprovider": (kubeconfig(good, {"auth-provider": {"name": "gcp", "config": {
                "cmd-path": "/bin/sh",
                "cmd-args": f"-c 'touch {self.markers['authprovider']}'"}}}),
                "users[0].user.auth-provider"),
            # Would work if read: west accepts the file's content.
            "tokenfile": (kubeconfig(good, {"tokenFile": str(secret_file)}),
                          "users[0].user.tokenFile"),
            "clientcert": (kubeconfig(good, {"client-certificate": str(secret_file),
                                             "client-key": str(secret_file)}),
                           "users[0].user.client-certificate"),
            "clientkey": (kubeconfig(good, {"token": REMOTE_TOKEN,
                                            "client-key": str(secret_file)}),
                          "users[0].user.client-key"),
            "cafile": (kubeconfig({"server": rec_https["server"],
                                   "certificate-authority": str(secret_file)},
                                  {"token": REMOTE_TOKEN}),
                       "clusters[0].cluster.certificate-authority"),
            "insecure": (kubeconfig({"server": rec_https["server"],
                                     "insecure-skip-tls-verify": True},
                                    {"token": REMOTE_TOKEN}),
                         "clusters[0].cluster.insecure-skip-tls-verify"),
            "plainhttp": (kubeconfig({"server": f"http://127.0.0.1:{recorder.port}"},
                                     {"token": REMOTE_TOKEN}),
                          "clusters[0].cluster.server"),
            "proxy": (kubeconfig({**good, "proxy-url": f"http://127.0.0.1:{recorder.port}"},
                                 {"token": REMOTE_TOKEN}),
                      "clusters[0].cluster.proxy-url"),
        }


@pytest.fixture
def hostile(tmp_path: Path, west: ThreadedKube, recorder: Recorder) -> Hostile:
    return Hostile(tmp_path, west, recorder)


def east_with(tmp_path: Path, west: ThreadedKube, extra: dict[str, str]) -> ThreadedKube:
    """east: the good Link to west, and a Link with its Secret per ``extra`` entry."""
    k = local_cluster(tmp_path / "east", local_objects(), {"west": west})
    for cluster, text in extra.items():
        k.call(k.kube.apply, link(cluster))
        k.call(k.kube.apply, secret(cluster, text))
    return k


def metric(srv: Dnsside, name: str, cluster: str) -> float | None:
    return srv.metric(name, cluster=cluster)


def addresses(srv: Dnsside, name: str = DB) -> set[str]:
    return set(answers(srv.query(name, "A"), "A"))


def refusals(srv: Dnsside, cluster: str) -> list[str]:
    return [line for line in list(srv.lines)
            if f"cannot use Secret {NS}/cluster-credentials-{cluster}:" in line]


def secret_reads(east: ThreadedKube, cluster: str) -> int:
    return east.call(lambda: east.kube.requests[
        ("GET", f"/api/v1/namespaces/{NS}/secrets/cluster-credentials-{cluster}")])


def test_each_hostile_kubeconfig_is_refused_by_name_and_nothing_runs_or_leaves(
        tmp_path: Path, west: ThreadedKube, recorder: Recorder, hostile: Hostile) -> None:
    east = east_with(tmp_path, west, {c: text for c, (text, _) in hostile.forms.items()})
    try:
        with serve_flat(east) as srv:
            wait_for(lambda: WEST_DB0 in addresses(srv), 15, "the good cluster west")
            for cluster in hostile.forms:
                wait_for(lambda c=cluster: metric(srv, "dnsside_remote_credentials_valid",
                                                  c) == 0, 15, f"{cluster} refused")
            # Retried (the Secret read again each time) and told once, naming Secret, Link
            # and field.
            wait_for(lambda: all(secret_reads(east, c) >= 3 for c in hostile.forms), 20,
                     "three reads of every hostile Secret")
            for cluster, (_, field) in hostile.forms.items():
                told = refusals(srv, cluster)
                assert len(told) == 1, (cluster, told)
                line = told[0]
                assert "WARNING" in line.upper(), line
                assert f"{field} is refused" in line, (field, line)
                assert f"Link {NS}/{cluster}" in line, line
                assert metric(srv, "dnsside_remote_synced", cluster) == 0
                assert addresses(srv, f"db-0.{cluster}.db.data.svc-global") == set()
            # Nothing ran, nothing local left, no TLS-less request, no connection at all
            # to the servers the hostile Secrets name.
            assert not [m for m in hostile.markers.values() if m.exists()]
            assert recorder.connections == []
            assert LOCAL_SECRET.encode() not in recorder.received()
            seen = west.call(lambda: dict(west.kube.authorizations))
            assert not [h for h in seen if LOCAL_SECRET in h]
            assert set(seen) == {f"Bearer {REMOTE_TOKEN}"}  # the good Link's only
            assert west.call(lambda: west.kube.plain_requests) == 0
            # explain says it, for every refused cluster.
            _, body = srv.http(f"/debug/explain?name={DB}")
            flat = json.loads(body)["flat_network"]
            for cluster, (_, field) in hostile.forms.items():
                assert flat[cluster].startswith("credentials (Secret "), flat[cluster]
                assert f"{field} is refused" in flat[cluster]
            assert flat["west"].startswith("synced")
            # The good cluster still answers, and the warnings are still one each.
            assert addresses(srv) == EAST_DB | {WEST_DB0}
            assert all(len(refusals(srv, c)) == 1 for c in hostile.forms)
            for line in sorted(line for c in hostile.forms for line in refusals(srv, c)):
                print(line)  # the report pastes them
            # Another refusal in the same Link's Secret is told again, once.
            reads = secret_reads(east, "exec")
            east.call(east.kube.apply, secret("exec", hostile.forms["tokenfile"][0]))
            wait_for(lambda: len(refusals(srv, "exec")) == 2, 15, "the new refusal told")
            wait_for(lambda: secret_reads(east, "exec") >= reads + 3, 15, "three more reads")
            assert len(refusals(srv, "exec")) == 2
            assert "users[0].user.tokenFile is refused" in refusals(srv, "exec")[1]
            fields = {c: field for c, (_, field) in hostile.forms.items()}
            fields["exec"] = "users[0].user.tokenFile"  # what its Secret holds now
        assert not [m for m in hostile.markers.values() if m.exists()]

        done = run_cli(["explain", DB, "--source", "kube", "--kubeconfig", east.kubeconfig,
                        "--cluster-name", "east", "--flat-network"])
        assert done.returncode == 0, done.stderr
        for cluster, field in fields.items():
            assert re.search(rf"Flat network: +cluster {cluster}: credentials \(Secret "
                             rf"{NS}/cluster-credentials-{cluster}\): .*{re.escape(field)} "
                             "is refused", done.stdout), (cluster, done.stdout)

        checked = run_cli(["check", "--kubeconfig", east.kubeconfig, "--flat-network"])
        for cluster, field in fields.items():
            line = f"× link {cluster}: its kubeconfig holds data only"
            assert line in checked.stdout, checked.stdout
            hint = checked.stdout.split(line, 1)[1].split("\n", 2)[1]
            assert f"{field} is refused" in hint, hint
        assert "✓ link west: the API at" in checked.stdout
        assert checked.returncode == 1
        assert not [m for m in hostile.markers.values() if m.exists()]
        assert recorder.connections == []
        assert not [h for h in west.call(lambda: list(west.kube.authorizations))
                    if LOCAL_SECRET in h]
    finally:
        east.close()


def test_insecure_remote_tls_allows_the_three_tls_forms_and_never_exec_or_a_file(
        tmp_path: Path, west: ThreadedKube, hostile: Hostile, proxy: ConnectProxy) -> None:
    token = {"token": REMOTE_TOKEN}
    allowed = {
        "insecure": kubeconfig({"server": west.kube.tls_url,
                                "insecure-skip-tls-verify": True}, token),
        "plainhttp": kubeconfig({"server": west.kube.url}, token),
        "proxy": kubeconfig({"server": west.kube.tls_url, "certificate-authority-data":
                             b64(fake_ca().ca_pem),
                             "proxy-url": f"http://127.0.0.1:{proxy.port}"}, token),
    }
    still_refused = {c: hostile.forms[c] for c in ("exec", "authprovider", "tokenfile",
                                                    "cafile")}
    east = east_with(tmp_path, west, {**allowed, **{c: text for c, (text, _)
                                                        in still_refused.items()}})
    try:
        with serve_flat(east, "--insecure-remote-tls") as srv:
            for cluster in allowed:
                wait_for(lambda c=cluster: addresses(srv, f"db-0.{c}.db.data.svc-global")
                         == {WEST_DB0}, 15, f"{cluster} synced")
                assert metric(srv, "dnsside_remote_credentials_valid", cluster) == 1
            for cluster, (_, field) in still_refused.items():
                wait_for(lambda c=cluster: len(refusals(srv, c)) == 1, 15, f"{cluster} told")
                assert f"{field} is refused" in refusals(srv, cluster)[0]
                assert metric(srv, "dnsside_remote_credentials_valid", cluster) == 0
            wait_for(lambda: all(secret_reads(east, c) >= 3 for c in still_refused), 20,
                     "three reads of every refused Secret")
            assert all(len(refusals(srv, c)) == 1 for c in still_refused)
            # What was allowed was really used, and said once per cluster.
            assert west.call(lambda: west.kube.plain_requests) > 0
            assert f"CONNECT 127.0.0.1:{west.kube.tls_port}" in proxy.targets
            for cluster, what in (("insecure", "insecure-skip-tls-verify"),
                                  ("plainhttp", "plain http:// server"),
                                  ("proxy", f"proxy-url http://127.0.0.1:{proxy.port}")):
                weak = [line for line in list(srv.lines)
                        if f"cluster {cluster}: TLS is weakened for it" in line]
                assert len(weak) == 1 and what in weak[0] and "WARNING" in weak[0], weak
                assert f"Link {NS}/{cluster}" in weak[0]
                print(weak[0])
            _, body = srv.http(f"/debug/explain?name={DB}")
            flat = json.loads(body)["flat_network"]
            for cluster in allowed:
                assert flat[cluster].startswith("synced"), flat[cluster]
                assert "; TLS weakened (--insecure-remote-tls): " in flat[cluster]
                assert metric(srv, "dnsside_remote_tls_weakened", cluster) == 1
            for cluster in ("west", *still_refused):
                assert "TLS weakened" not in flat[cluster]
                assert metric(srv, "dnsside_remote_tls_weakened", cluster) == 0
            assert WEST_DB0 in addresses(srv)
        assert not [m for m in hostile.markers.values() if m.exists()]

        checked = run_cli(["check", "--kubeconfig", east.kubeconfig, "--flat-network",
                           "--insecure-remote-tls"])
        for cluster in allowed:
            assert f"‼ link {cluster}: TLS to " in checked.stdout, checked.stdout
            assert f"✓ link {cluster}: its kubeconfig loads" in checked.stdout
        assert "link west: TLS to" not in checked.stdout
        for cluster, (_, field) in still_refused.items():
            assert f"× link {cluster}: its kubeconfig holds data only" in checked.stdout
        # Without the flag (and a ConfigMap that does not set it), check refuses them too.
        strict = run_cli(["check", "--kubeconfig", east.kubeconfig, "--flat-network"])
        for cluster in allowed:
            assert f"× link {cluster}: its kubeconfig holds data only" in strict.stdout
        assert not [m for m in hostile.markers.values() if m.exists()]
        assert not [h for h in west.call(lambda: list(west.kube.authorizations))
                    if LOCAL_SECRET in h]
    finally:
        east.close()


@pytest.mark.parametrize("form", ["other-ca", "wrong-name", "right-name"])
def test_tls_is_verified_against_the_secrets_ca_and_name(
        tmp_path: Path, west: ThreadedKube, form: str) -> None:
    """The linked cluster's certificate is checked against the Secret's CA, and its name
    against the server URL or tls-server-name; a failure is the credentials' (the Secret
    does not vouch for that server: told once, as a rejected token is), and nothing is
    sent."""
    port = west.kube.tls_port
    cluster = {"other-ca": {"server": west.kube.tls_url,
                            "certificate-authority-data": b64(other_ca())},
               "wrong-name": {"server": west.kube.tls_url, "tls-server-name": "evil.example",
                              "certificate-authority-data": b64(fake_ca().ca_pem)},
               "right-name": {"server": f"https://127.0.0.1:{port}",
                              "tls-server-name": "api.west.example",
                              "certificate-authority-data": b64(fake_ca().ca_pem)}}[form]
    token = "tlswest-token"
    west.call(west.kube.add_token, token, REMOTE_USER)
    east = east_with(tmp_path, west, {"tlswest": kubeconfig(cluster, {"token": token})})
    try:
        with serve_flat(east, "--log-level", "debug") as srv:
            wait_for(lambda: WEST_DB0 in addresses(srv), 15, "the good cluster west")
            if form == "right-name":
                wait_for(lambda: addresses(srv, "db-0.tlswest.db.data.svc-global")
                         == {WEST_DB0}, 15, "tlswest synced")
                assert west.call(lambda: west.kube.authorizations[f"Bearer {token}"]) > 0
                return
            line = srv.wait_log("cluster tlswest: flat network: cannot use Secret")
            assert "failed TLS verification against the Secret's" in line, line
            assert "(Link linkerd-multicluster/tlswest)" in line, line
            assert "certificate verify failed" in line, line
            assert " WARNING " in line, line
            wait_for(lambda: metric(srv, "dnsside_remote_credentials_valid", "tlswest") == 0,
                     10, "credentials invalid")
            assert metric(srv, "dnsside_remote_synced", "tlswest") == 0
            status, body = srv.http("/debug/explain?name=db.data.svc-global&type=A")
            assert status == 200 and "failed TLS verification" in body
            # Retried with the Secret read again each time, and told once.
            wait_for(lambda: secret_reads(east, "tlswest") >= 3, 15, "three attempts")
            assert len(refusals(srv, "tlswest")) == 1
            # The handshake failed, so nothing of a request was sent.
            assert west.call(lambda: west.kube.authorizations[f"Bearer {token}"]) == 0
    finally:
        east.close()


def test_a_client_certificate_from_the_secret_is_used_from_memory(
        tmp_path: Path, west: ThreadedKube) -> None:
    """client-certificate-data and client-key-data authenticate (west reads the verified
    certificate's CN), and the files Python's ssl needs to load them live in a private
    directory of dnsside's only as long as the loading takes."""
    user = "remote-access-west-x509"  # a CN has 64 characters at most
    west.call(west.kube.restrict, user, REMOTE_ACCESS_RULES)
    cert, key = fake_ca().client_cert(user)
    text = kubeconfig({"server": west.kube.tls_url,
                       "certificate-authority-data": b64(fake_ca().ca_pem)},
                      {"client-certificate-data": b64(cert), "client-key-data": b64(key)})
    east = east_with(tmp_path, west, {"certwest": text})
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    try:
        with serve_flat(east, env={"TMPDIR": str(private_tmp)}) as srv:
            wait_for(lambda: addresses(srv, "db-0.certwest.db.data.svc-global") == {WEST_DB0},
                     15, "certwest synced with its client certificate")
            assert metric(srv, "dnsside_remote_credentials_valid", "certwest") == 1
            # No token was sent for it: its requests carried the certificate only.
            assert west.call(lambda: west.kube.authorizations[""]) > 0
            assert list(private_tmp.iterdir()) == []
    finally:
        east.close()


def test_insecure_remote_tls_is_off_by_default_and_needs_the_flat_network() -> None:
    baked = run_cli(["install", "--cluster-name", "east", "--flat-network",
                     "--insecure-remote-tls"])
    assert baked.returncode == 0, baked.stderr
    assert "DNSSIDE_INSECURE_REMOTE_TLS: 'true'" in baked.stdout
    plain = run_cli(["install", "--cluster-name", "east", "--flat-network"])
    assert "INSECURE_REMOTE_TLS" not in plain.stdout
    for command in (["install", "--cluster-name", "east", "--insecure-remote-tls"],
                    ["explain", DB, "--source", "kube", "--insecure-remote-tls"]):
        done = run_cli(command)
        assert done.returncode != 0 and "--insecure-remote-tls" in done.stderr, done.stderr
        assert "needs --flat-network" in done.stderr or "add --flat-network" in done.stderr


TOKEN = "eyJhbGciOiJSUzI1NiJ9.s3cr3t-t0ken-0123456789abcdef"  # never in any output


def timed_probe(srv: Dnsside) -> float:
    """One /healthz and one DNS-over-TCP answer, each given 2 s; how long both took. A
    stalled event loop (a Secret's kubeconfig parsed on it) fails here."""
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/healthz", timeout=2) as r:
        assert r.status == 200
    assert addresses_tcp(srv) == EAST_DB | {WEST_DB0}
    return time.monotonic() - started


def addresses_tcp(srv: Dnsside) -> set[str]:
    return set(answers(srv.query(DB, "A", tcp=True, timeout=2.0), "A"))


def test_a_large_or_broken_secret_costs_only_its_own_cluster_and_never_shows_the_token(
        tmp_path: Path, west: ThreadedKube) -> None:
    """Secrets of a ~1 MiB kubeconfig (a list of 450,000 ones: on the event loop, 18-21 s
    of PyYAML at each read), of 100 KB (over the kubeconfig cap, within the Secret's), of
    16 MiB (read whole before it was judged), and of a real
    kubeconfig with an unclosed quote on its token line (PyYAML's message quoted the token).
    Each is refused once by what is wrong with it, read again at every retry, and the rest
    of dnsside answers throughout: /healthz and DNS over TCP within 2 s each, memory
    bounded; the token appears in no log line, explain or check."""
    good = {"server": west.kube.tls_url, "certificate-authority-data": b64(fake_ca().ca_pem)}
    broken = kubeconfig(good, {"token": "PLACEHOLDER"}).replace(
        "token: PLACEHOLDER", f'token: "{TOKEN}')
    forms = {
        "big": "x: [" + "1," * 450_000 + "1]\n",  # 900 KB: under the old 1 MiB cap
        "long": "x: [" + "1," * 50_000 + "1]\n",  # 100 KB: over 64 KiB, within the Secret cap
        "huge": "#" * (16 << 20),
        "broken": broken,
    }
    east = east_with(tmp_path, west, forms)
    try:
        with serve_flat(east) as srv:
            wait_for(lambda: WEST_DB0 in addresses(srv), 15, "the good cluster west")
            slowest = 0.0
            deadline = time.monotonic() + 40
            while not all(secret_reads(east, c) >= 4 for c in forms):
                assert time.monotonic() < deadline, {c: secret_reads(east, c) for c in forms}
                slowest = max(slowest, timed_probe(srv))
            print(f"slowest /healthz + TCP answer while the Secrets were re-read: "
                  f"{slowest * 1000:.0f} ms; peak RSS {peak_rss(srv) >> 20} MiB")
            assert peak_rss(srv) < 160 << 20, peak_rss(srv)
            for cluster in forms:
                assert metric(srv, "dnsside_remote_credentials_valid", cluster) == 0
                assert len(refusals(srv, cluster)) == 1, refusals(srv, cluster)
            for cluster in ("big", "huge"):
                assert "over 262144 bytes" in refusals(srv, cluster)[0], refusals(srv, cluster)
            assert "not a kubeconfig: over 65536 bytes" in refusals(srv, "long")[0]
            told = refusals(srv, "broken")[0]
            assert re.search(r"not YAML: line \d+, column \d+: found unexpected end of "
                             "stream", told), told
            _, body = srv.http(f"/debug/explain?name={DB}")
            assert "line " in json.loads(body)["flat_network"]["broken"]
            assert TOKEN not in body and "s3cr3t" not in body
            assert not [line for line in list(srv.lines) if "s3cr3t" in line]
        done = run_cli(["explain", DB, "--source", "kube", "--kubeconfig", east.kubeconfig,
                        "--cluster-name", "east", "--flat-network"])
        assert "cluster broken: credentials" in done.stdout, done.stdout
        checked = run_cli(["check", "--kubeconfig", east.kubeconfig, "--flat-network"])
        assert "× link broken: its kubeconfig loads" in checked.stdout, checked.stdout
        assert "× link huge: Secret" in checked.stdout, checked.stdout
        for out in (done.stdout, done.stderr, checked.stdout, checked.stderr):
            assert "s3cr3t" not in out, out
    finally:
        east.close()


def peak_rss(srv: Dnsside) -> int:
    status = Path(f"/proc/{srv.proc.pid}/status").read_text()
    m = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.M)
    assert m, status
    return int(m.group(1)) * 1024


def test_a_link_elsewhere_or_a_second_link_never_takes_a_linked_cluster(
        tmp_path: Path, west: ThreadedKube, recorder: Recorder) -> None:
    """Whoever may write a Link somewhere (`aaa/west-shadow`, target west, its Secret in aaa)
    or a second Link in the links namespace (`aaa-west`, newer, sorting first by name) names
    a server of theirs for west: dnsside never reads the first, refuses the second once,
    and never connects to that server; west stays watched with its own Link's Secret, and
    so after a restart."""
    evil = kubeconfig({"server": f"https://127.0.0.1:{recorder.port}",
                       "certificate-authority-data": b64(fake_ca().ca_pem)},
                      {"token": REMOTE_TOKEN})
    east = east_with(tmp_path, west, {})
    shadow = link("west", secret="shadow-credentials")
    shadow["metadata"] = {"name": "west-shadow", "namespace": "aaa",
                          "creationTimestamp": "2020-01-01T00:00:00Z"}
    second = link("west", secret="shadow-credentials")
    second["metadata"] = {"name": "aaa-west", "namespace": NS,
                          "creationTimestamp": "2099-01-01T00:00:00Z"}
    for ns in ("aaa", NS):
        evil_secret = secret("west", evil)
        evil_secret["metadata"] = {"name": "shadow-credentials", "namespace": ns}
        east.call(east.kube.apply, evil_secret)
    east.call(east.kube.apply, shadow)
    east.call(east.kube.apply, second)
    try:
        for _ in range(2):
            with serve_flat(east) as srv:
                wait_for(lambda: addresses(srv, "db-0.west.db.data.svc-global") == {WEST_DB0},
                         15, "west watched with its own Link's Secret")
                refused = (f"Link {NS}/aaa-west is refused: cluster west is linked by "
                           f"Link {NS}/west")
                # told as a warning of its own (the sync line, INFO, also lists the Links)
                wait_for(lambda: [x for x in list(srv.lines) if refused in x and " WARNING " in x],
                         15, f"a WARNING line {refused!r}")
                assert metric(srv, "dnsside_remote_credentials_valid", "west") == 1
                assert srv.metric("dnsside_links_refused", reason="duplicate") == 1
                _, body = srv.http(f"/debug/explain?name={DB}")
                assert f"Link {NS}/aaa-west is refused" in json.loads(body)["links"]
                assert len([line for line in list(srv.lines) if "aaa-west is refused" in line
                            and "initial sync" not in line]) == 1
        assert recorder.connections == []
        for ns in ("aaa", NS):
            assert east.call(lambda n=ns: east.kube.requests[
                ("GET", f"/api/v1/namespaces/{n}/secrets/shadow-credentials")]) == 0
        checked = run_cli(["check", "--kubeconfig", east.kubeconfig, "--flat-network"])
        assert "‼ Link aaa/west-shadow counts" in checked.stdout, checked.stdout
        assert f"‼ Link {NS}/aaa-west counts" in checked.stdout
        assert "✓ link west: the API at" in checked.stdout
        assert recorder.connections == []
    finally:
        east.close()
