"""A certificate authority made by the test run, for the fake API servers' TLS.

A Link's kubeconfig must name an ``https`` server (dnsside/kubeapi/linkcreds.py), so
the fake API servers that play linked clusters serve TLS too, as a real one does, with
a server certificate for 127.0.0.1 and localhost signed by a CA generated here once
per process; the Secret carries that CA as ``certificate-authority-data``. A second,
unrelated CA (:func:`other_ca`) signs nothing the fakes serve: a kubeconfig holding it
must fail verification.

The certificates are made in Python (the ``cryptography`` package of the test extra),
not by the ``openssl`` program: the quick tier, which starts every fake API server,
needs only Python and the venv (tests/test_layers.py::test_the_quick_tier_needs_only_the_venv).
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("127.0.0.1", "localhost", "api.west.example")
VALID = datetime.timedelta(days=2)  # a run's certificates outlive the run, nothing more


@dataclass(frozen=True)
class _Issuer:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: _Issuer | None,
                 *, ca: bool, usage: x509.ObjectIdentifier | None = None,
                 sans: tuple[str, ...] = ()) -> x509.Certificate:
    """A P-256 certificate for ``subject``, signed by ``issuer`` (self-signed when None):
    a CA (keyCertSign, cRLSign) or a leaf for ``usage`` (serverAuth, clientAuth)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(name)
               .issuer_name(issuer.cert.subject if issuer else name)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + VALID)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(
                   digital_signature=not ca, content_commitment=False, key_encipherment=False,
                   data_encipherment=False, key_agreement=False, key_cert_sign=ca,
                   crl_sign=ca, encipher_only=False, decipher_only=False), critical=True))
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n)
            for n in sans]), critical=False)
    return builder.sign(issuer.key if issuer else key, hashes.SHA256())


def _make_ca(name: str) -> _Issuer:
    key = ec.generate_private_key(ec.SECP256R1())
    return _Issuer(_certificate(f"dnsside test CA {name}", key, None, ca=True), key)


@dataclass(frozen=True)
class FakeCA:
    ca_pem: str  # the CA certificate, PEM
    cert_file: Path  # the server's certificate chain (server, then CA)
    key_file: Path

    where: Path
    issuer: _Issuer

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
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(user, key, self.issuer, ca=False,
                            usage=ExtendedKeyUsageOID.CLIENT_AUTH)
        return _pem(cert), _key_pem(key)


@functools.cache
def fake_ca() -> FakeCA:
    """The run's CA and the fakes' server certificate (made on first use)."""
    where = Path(tempfile.mkdtemp(prefix="dnsside-test-ca-"))
    issuer = _make_ca("ca")
    key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate("fake-kube", key, issuer, ca=False,
                          usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=SERVER_NAMES)
    ca = _pem(issuer.cert)
    (where / "chain.pem").write_text(_pem(server) + ca)
    (where / "server.key").write_text(_key_pem(key))
    (where / "server.key").chmod(0o600)
    return FakeCA(ca, where / "chain.pem", where / "server.key", where, issuer)


@functools.cache
def other_ca() -> str:
    """A CA that signed nothing the fakes serve, PEM."""
    return _pem(_make_ca("other").cert)
