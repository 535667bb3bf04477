"""A certificate authority made by the test run (openssl), for the fake API servers' TLS.

A Link's kubeconfig must name an ``https`` server (dnsside/kubeapi/linkcreds.py), so
the fake API servers that play linked clusters serve TLS too, as a real one does, with
a server certificate for 127.0.0.1 and localhost signed by a CA generated here once
per process; the Secret carries that CA as ``certificate-authority-data``. A second,
unrelated CA (:func:`other_ca`) signs nothing the fakes serve: a kubeconfig holding it
must fail verification.
"""

from __future__ import annotations

import functools
import ssl
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SERVER_NAMES = ("127.0.0.1", "localhost", "api.west.example")


@dataclass(frozen=True)
class FakeCA:
    ca_pem: str  # the CA certificate, PEM
    cert_file: Path  # the server's certificate chain (server, then CA)
    key_file: Path

    where: Path

    def server_context(self) -> ssl.SSLContext:
        """The fakes' TLS: their certificate; a client certificate the CA signed is
        asked for and verified, not required (a real API server's x509 authentication)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(cadata=self.ca_pem)
        return ctx

    def client_cert(self, user: str) -> tuple[str, str]:
        """A client certificate for ``user`` (its CN, as Kubernetes reads it) and its key,
        PEM."""
        name = "".join(c if c.isalnum() else "-" for c in user)
        (self.where / "client.cnf").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=clientAuth\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={user}",
                 cwd=self.where)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile",
                 "client.cnf", cwd=self.where)
        return (self.where / f"{name}.pem").read_text(), (self.where / f"{name}.key").read_text()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(where: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN=dnsside test CA {name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=where)


@functools.cache
def fake_ca() -> FakeCA:
    """The run's CA and the fakes' server certificate (made on first use)."""
    where = Path(tempfile.mkdtemp(prefix="dnsside-test-ca-"))
    _make_ca(where, "ca")
    sans = ",".join(f"IP:{n}" if n[0].isdigit() else f"DNS:{n}" for n in SERVER_NAMES)
    (where / "ext.cnf").write_text(
        f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=fake-kube",
             cwd=where)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
             cwd=where)
    ca = (where / "ca.pem").read_text()
    (where / "chain.pem").write_text((where / "server.pem").read_text() + ca)
    return FakeCA(ca, where / "chain.pem", where / "server.key", where)


@functools.cache
def other_ca() -> str:
    """A CA that signed nothing the fakes serve, PEM."""
    where = Path(tempfile.mkdtemp(prefix="dnsside-test-other-ca-"))
    _make_ca(where, "other")
    return (where / "other.pem").read_text()
