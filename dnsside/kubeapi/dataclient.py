"""The HTTP client of a linked cluster, built from a Link's :class:`Credentials` only.

kubernetes-asyncio's ``ApiClient`` is not used for a linked cluster: its configuration
comes from its kubeconfig loader (which runs commands and reads files, see
:mod:`dnsside.kubeapi.linkcreds`), and its session trusts the environment
(``trust_env``: ``$HTTPS_PROXY``, and ``~/.netrc`` passwords sent to matching hosts).
This client sends exactly what the credentials hold: a bearer token, a client
certificate, to the server they name, verifying its certificate against their CA (or
the system's) and its name (``tls-server-name`` when given), following no redirect
(a 3xx could lead to another host, or to plain http).

Python's ``ssl`` takes a CA from memory (``cadata``) but a
client certificate and key only from files. They are written into a directory of
dnsside's own, made private (0700, files 0600), loaded, and removed before the
context is used; nothing named by the Secret is ever opened.

It offers the one call :class:`~dnsside.kubeapi.client.KubeApi` makes of a client
(``call_api`` for a GET, ``configuration.host``, ``close``).
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from dnsside.kubeapi.linkcreds import Credentials, Unusable


@dataclass(frozen=True, slots=True)
class Host:
    """What :attr:`KubeApi.host` reads (``client.configuration.host``)."""

    host: str


def tls_context(creds: Credentials) -> ssl.SSLContext:
    """The TLS context of ``creds``: verification on and the server's name checked, unless
    the operator allowed ``insecure-skip-tls-verify`` for it. Unusable (naming the field)
    for a CA, certificate or key that does not load."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if creds.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif creds.ca_pem:
        try:
            ctx.load_verify_locations(cadata=creds.ca_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise Unusable(f"{creds.cluster_path}.certificate-authority-data",
                           f"not a CA certificate: {exc}") from None
    else:
        ctx.load_default_certs()
    if creds.client_cert_pem:
        _load_client_cert(ctx, creds)
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, creds: Credentials) -> None:
    """``load_cert_chain`` reads files only: write the pair into a private directory,
    load it, and remove it at once."""
    private = tempfile.mkdtemp(prefix="dnsside-client-cert-")  # mode 0700
    try:
        paths = []
        for name, data in (("cert.pem", creds.client_cert_pem),
                           ("key.pem", creds.client_key_pem)):
            path = os.path.join(private, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            paths.append(path)
        ctx.load_cert_chain(paths[0], paths[1])
    except (ssl.SSLError, ValueError) as exc:
        raise Unusable(f"{creds.user_path}.client-certificate-data",
                       f"the certificate and key do not load: {exc}") from None
    finally:
        shutil.rmtree(private, ignore_errors=True)


class DataClient:
    """GET requests to a linked cluster's API with exactly its :class:`Credentials`."""

    def __init__(self, creds: Credentials, user_agent: str, pool: int = 100) -> None:
        self.creds = creds
        self.configuration = Host(creds.server)
        self.user_agent = user_agent
        https = creds.server.startswith("https://")
        # Built before the session, so an Unusable leaves nothing to close.
        context: ssl.SSLContext | bool = tls_context(creds) if https else False
        self.session = aiohttp.ClientSession(
            # As kubernetes-asyncio's default: every watch (two per namespace) holds one.
            connector=aiohttp.TCPConnector(limit=pool, ssl=context),
            trust_env=False,  # no $HTTPS_PROXY, no ~/.netrc: the Secret's data only
            read_bufsize=2**21,  # as kubernetes-asyncio: one watch event may be large
        )

    async def call_api(self, resource_path: str, method: str, *,
                       query_params: Sequence[tuple[str, str]] = (),
                       header_params: Mapping[str, str] | None = None,
                       auth_settings: Sequence[str] = (), _preload_content: bool = False,
                       _request_timeout: aiohttp.ClientTimeout | None = None
                       ) -> aiohttp.ClientResponse:
        """The response of a GET (the caller reads and releases it); the arguments are
        those :meth:`KubeApi.request` passes to kubernetes-asyncio's ``call_api``."""
        if method != "GET":
            raise ValueError(f"dnsside only reads a linked cluster's API, not {method}")
        creds = self.creds
        headers = {"User-Agent": self.user_agent, **(header_params or {})}
        if creds.token and "BearerToken" in auth_settings:
            headers["Authorization"] = f"Bearer {creds.token}"
        url = creds.server + resource_path
        if query_params:
            url += "?" + urlencode(list(query_params))
        kwargs: dict[str, Any] = {"headers": headers, "allow_redirects": False}
        if _request_timeout is not None:
            kwargs["timeout"] = _request_timeout
        if creds.tls_server_name:
            kwargs["server_hostname"] = creds.tls_server_name
        if creds.proxy_url:
            kwargs["proxy"] = creds.proxy_url
        return await self.session.get(url, **kwargs)

    async def close(self) -> None:
        await self.session.close()


__all__ = ["DataClient", "Host", "tls_context"]
