"""A Link's kubeconfig, read as data only: what may reach a linked cluster, decided first.

A Link's credentials Secret is written by whoever may write Secrets in the links
namespace, and dnsside reads it with its own service account, the one that may read
every Link's credentials. A kubeconfig is more than data: kubernetes-asyncio's loader
runs an ``exec`` plugin's command, reads ``tokenFile`` and the certificate and key
files named in it and sends their contents, runs a ``gcp`` auth provider's
``cmd-path``, and honours ``insecure-skip-tls-verify``, ``proxy-url`` and plain
``http://``. So a Secret's kubeconfig never goes near that loader: :func:`parse_credentials` reads
it with ``yaml.safe_load``, selects the current context's cluster and user by name,
and allows only inline data: the server URL (``https``), ``certificate-authority-data``,
``tls-server-name``, a ``token``, ``client-certificate-data`` with ``client-key-data``.
Everything else in that cluster or user is refused with a :class:`Refused` naming the
field as a path (``users[0].user.exec``); a malformed one is :class:`Unusable`.
Nothing here runs, opens or connects to anything: the caller builds a client from the
:class:`Credentials` only after the decision, and only from them
(:mod:`dnsside.kubeapi.dataclient`).

The YAML itself is hostile too, and the subtle point is that PyYAML builds a document
before anything here can judge it. So the text is bounded first (:data:`MAX_KUBECONFIG`,
64 KiB: what ``linkerd multicluster link`` writes is 3-5 KB), then its parse events are
scanned, and an anchor, an alias, a merge key (``<<``), an explicit tag or nesting deeper
than a kubeconfig's is refused before one node is built: aliases are how a few hundred
bytes become gigabytes (PyYAML before 6.0.4 expands merge keys exponentially: 796 bytes,
10 s and 222 MiB with 6.0.3), and no kubeconfig needs them. A syntax error is told by
its line, column and problem only: PyYAML's own message quotes the lines around the
error, which on a token line is the token (:func:`yaml_problem`). The caller parses off
the event loop (:meth:`dnsside.kubeapi.client.KubeApi.from_kubeconfig_text`): the cap
is what makes that thread's work bounded.

The choices, and why:

* ``exec`` is refused whatever the flags. An exec plugin is a command line on
  *dnsside's* machine, chosen by whoever writes the Secret: with any interpreter in the
  image it is arbitrary code running as dnsside, next to dnsside's own token. Linkerd's
  ``link`` command writes a static token, so nothing legitimate needs it, and no flag
  makes running a Secret's command safe. ``auth-provider`` is refused for the same
  reason (gcp runs ``cmd-path``; oidc calls an issuer the Secret names).
* Every field naming a file (``tokenFile``, ``client-certificate``, ``client-key``,
  ``certificate-authority``) is refused: a path is read on dnsside's machine, and the
  file's content (the pod's own service-account token, say) is sent to a server the
  Secret also chooses.
* ``username``/``password`` are refused: basic authentication left Kubernetes in 1.19,
  so a password can only be meant for something that is not an API server.
  Impersonation (``as``, ``as-uid``, ``as-groups``, ``as-user-extra``) is refused too:
  dnsside acts as the Secret's identity, never as another one.
* ``insecure-skip-tls-verify: true``, a plain ``http://`` server and ``proxy-url`` weaken
  or drop TLS: refused unless the operator passes ``--insecure-remote-tls``, and then
  :attr:`Credentials.weakened` says what is weakened, for a warning.
* An unknown field in the selected cluster or user is refused, not ignored: that is
  where every field that decides what is sent, and where, lives (``tokenFile`` was one
  such addition), and a field dnsside cannot judge is one it cannot vouch for. Fields
  that never change what is sent (``extensions``, ``disable-compression``, a context's
  ``namespace``, ``preferences``) are ignored, and so are the clusters and users the
  current context does not select: they are never used.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

import yaml

# What a Link's kubeconfig may weigh: `linkerd multicluster link` writes 3-5 KB (a CA, a
# token, a server), so 64 KiB leaves room for a long CA chain and a client certificate.
MAX_KUBECONFIG = 64 * 1024
# What the Secret that holds it may weigh, read off the API with this cap: the kubeconfig
# in base64 (4/3), the same again in `kubectl apply`'s last-applied annotation, managed
# fields and labels.
MAX_SECRET_BYTES = 4 * MAX_KUBECONFIG
MAX_DEPTH = 16  # a kubeconfig nests 5 deep (users[0].user.exec.env[0])
# The loader: libyaml's when PyYAML was built with it (20 times faster), else PyYAML's own.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"
PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"
PEM_KEY = "PRIVATE KEY-----"

INSECURE_FLAG = "--insecure-remote-tls"

# Why each field is refused. The file fields and the code fields are refused always;
# the TLS ones unless --insecure-remote-tls.
_FILE = "names a file on dnsside's machine, whose content would be sent to the linked " \
        "cluster; a Link's Secret may hold inline data only ({data})"
ALWAYS_REFUSED: Mapping[str, str] = {
    "exec": "an exec plugin runs a command on dnsside's machine; dnsside never runs one "
            "for a Link's Secret, whatever the flags",
    "auth-provider": "an auth provider runs a command (gcp cmd-path) or calls a server "
                     "(oidc) the Secret names; use a token",
    "tokenFile": _FILE.format(data="token"),
    "client-certificate": _FILE.format(data="client-certificate-data"),
    "client-key": _FILE.format(data="client-key-data"),
    "certificate-authority": _FILE.format(data="certificate-authority-data"),
    "username": "basic authentication left Kubernetes in 1.19; use a token",
    "password": "basic authentication left Kubernetes in 1.19; use a token",
    "as": "impersonation: dnsside acts as the Secret's identity, never another",
    "as-uid": "impersonation: dnsside acts as the Secret's identity, never another",
    "as-groups": "impersonation: dnsside acts as the Secret's identity, never another",
    "as-user-extra": "impersonation: dnsside acts as the Secret's identity, never another",
}
WEAKENING: Mapping[str, str] = {
    "insecure-skip-tls-verify": "the linked cluster's certificate would not be checked",
    "proxy-url": "requests would go through a proxy the Secret names",
    "http": "a plain http:// server: the token would travel without TLS",
}
IGNORED = frozenset({"extensions", "disable-compression"})
CLUSTER_FIELDS = frozenset({"server", "certificate-authority-data", "tls-server-name",
                            "insecure-skip-tls-verify", "proxy-url"})
USER_FIELDS = frozenset({"token", "client-certificate-data", "client-key-data"})


class Unusable(ValueError):
    """The kubeconfig cannot be used: not a kubeconfig, or a field malformed; ``field`` is
    where (``clusters[0].cluster.server``), "" for the document itself."""

    verb = ": "

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        self.why = why
        super().__init__(f"{field}{self.verb}{why}" if field else why)


class Refused(Unusable):
    """The kubeconfig holds what a Link's Secret may not (``users[0].user.exec``)."""

    verb = " is refused: "


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a Link's kubeconfig allows dnsside to send, and where: data only."""

    server: str  # https://host[:port][/path], without a trailing slash
    token: str = ""
    ca_pem: str = ""  # certificate-authority-data, decoded; "" = the system's CAs
    tls_server_name: str = ""
    client_cert_pem: bytes = b""
    client_key_pem: bytes = b""
    insecure_skip_verify: bool = False  # only with --insecure-remote-tls
    proxy_url: str = ""  # only with --insecure-remote-tls
    cluster_path: str = "clusters[0].cluster"  # where each field came from, for errors
    user_path: str = "users[0].user"

    @property
    def weakened(self) -> tuple[str, ...]:
        """How TLS is weakened for this cluster (``--insecure-remote-tls``), one phrase
        per way; () when it is not."""
        out = []
        if self.server.startswith("http://"):
            out.append("a plain http:// server: the token travels without TLS")
        if self.insecure_skip_verify:
            out.append("insecure-skip-tls-verify: its certificate is not checked")
        if self.proxy_url:
            out.append(f"proxy-url {self.proxy_url}: requests go through that proxy")
        return tuple(out)


def parse_credentials(text: str | bytes, allow_insecure_tls: bool = False) -> Credentials:
    """The credentials of ``text``'s current context, or :class:`Refused`: every field
    that may not be used is named (the first as ``field``). Pure: reads, runs and opens
    nothing."""
    doc = load_yaml(text)
    if not isinstance(doc, Mapping):
        raise Unusable("", "not a kubeconfig (expected a mapping)")
    current = doc.get("current-context")
    if not isinstance(current, str) or not current:
        raise Unusable("current-context", "not set: dnsside uses the current context only")
    ctx_path, context = _named(doc, "contexts", "context", current)
    cluster_name = context.get("cluster")
    if not isinstance(cluster_name, str) or not cluster_name:
        raise Unusable(f"{ctx_path}.cluster", "names no cluster")
    cluster_path, cluster = _named(doc, "clusters", "cluster", cluster_name)
    user_name = context.get("user")
    user_path = ""  # no user: anonymous (the remote decides what it may read)
    user: Mapping[str, Any] = {}
    if user_name not in (None, ""):
        if not isinstance(user_name, str):
            raise Unusable(f"{ctx_path}.user", "not a name")
        user_path, user = _named(doc, "users", "user", user_name)
    problems: list[Unusable] = []
    creds = _judge_cluster(cluster, cluster_path, allow_insecure_tls, problems)
    values = _judge_user(user, user_path, problems)
    if problems:  # a refusal first: it is what the operator must hear about
        problems.sort(key=lambda p: not isinstance(p, Refused))
        first = problems[0]
        more = "; ".join(str(p) for p in problems[1:])
        raise type(first)(first.field, first.why + (f" (and {more})" if more else ""))
    return Credentials(**creds, **values, cluster_path=cluster_path,
                       user_path=user_path or "users[?].user")


def load_yaml(text: str | bytes) -> Any:
    """The document ``text`` holds, built only once it is known to be plain data of a
    bounded size: :class:`Unusable` for text over :data:`MAX_KUBECONFIG`, for an anchor,
    alias, merge key, explicit tag or deep nesting (named with its line and column), and
    for YAML that does not parse (its line, column and problem, never its text)."""
    if len(text) > MAX_KUBECONFIG:
        raise Unusable("", f"not a kubeconfig: over {MAX_KUBECONFIG} bytes (a Link's "
                       "kubeconfig is 3-5 KB)")
    try:
        _plain_data(text)
        return yaml.load(text, Loader=_LOADER)  # a safe loader (SafeConstructor)
    except yaml.YAMLError as exc:
        raise Unusable("", f"not YAML: {yaml_problem(exc)}") from None
    except RecursionError:  # _plain_data bounds the depth; kept as the last guard
        raise Unusable("", "not a kubeconfig: nested too deeply") from None


def _plain_data(text: str | bytes) -> None:
    """Refuse, from the parse events alone (nothing is built), what makes YAML more than
    a tree of plain data: anchors and aliases (a small text, a huge document), merge keys
    (exponential in PyYAML before 6.0.4), explicit tags, nesting deeper than MAX_DEPTH."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        mark = event.start_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        if isinstance(event, yaml.AliasEvent):
            what = "an alias (*)"
        elif getattr(event, "anchor", None) is not None:
            what = "an anchor (&)"
        elif isinstance(event, yaml.ScalarEvent) and (
                event.tag == _MERGE_TAG or (event.value == "<<" and event.implicit[0])):
            what = "a merge key (<<)"
        elif isinstance(event, yaml.NodeEvent) and getattr(event, "tag", None) is not None \
                and not (isinstance(event, yaml.CollectionStartEvent) and event.implicit):
            what = "an explicit tag (!)"
        else:
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise Unusable("", f"not a kubeconfig: nested deeper than {MAX_DEPTH} "
                                   f"at {at}")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            continue
        raise Refused("", f"{what} at {at}: a Link's kubeconfig is plain data; anchors, "
                      "aliases, merge keys and tags are refused before anything is built")


# A quoted piece of the input in a problem: kept when it is one character (PyYAML names
# the character it stumbled on), else cut: a tag or an escape can carry any text.
_QUOTED = re.compile(r"'[^']{5,}'|\"[^\"]{5,}\"")


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what a YAML error is, never the text around it: PyYAML's own message
    quotes the offending lines (a token's, when the error is on the token line)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = _QUOTED.sub("'...'", exc.problem or exc.context or "malformed")
        if mark is None:
            return problem
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if isinstance(exc, yaml.reader.ReaderError):
        return f"position {exc.position}: a character YAML does not allow"
    return type(exc).__name__


def _named(doc: Mapping[str, Any], plural: str, inner: str, name: str
           ) -> tuple[str, Mapping[str, Any]]:
    """The ``inner`` mapping of the first entry of ``doc[plural]`` called ``name``, and
    its path."""
    entries = doc.get(plural)
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise Unusable(plural, f"no list of {plural}, so no {inner} {name!r}")
    for i, entry in enumerate(entries):
        if isinstance(entry, Mapping) and entry.get("name") == name:
            body = entry.get(inner)
            path = f"{plural}[{i}].{inner}"
            if body is None:
                return path, {}
            if not isinstance(body, Mapping):
                raise Unusable(path, "not a mapping")
            return path, body
    raise Unusable(plural, f"no {inner} named {name!r} (the current context's)")


def _refusal(key: str, where: str, known: frozenset[str]) -> Refused | None:
    """Why a field of the selected cluster or user is refused whatever its value: it runs
    or reads something, or dnsside does not know it."""
    if key in ALWAYS_REFUSED:
        return Refused(where, ALWAYS_REFUSED[key])
    if key not in known:
        return Refused(where, "an unknown field: dnsside cannot tell what it would do, so "
                       "it does not use the kubeconfig")
    return None


def _judge_cluster(cluster: Mapping[str, Any], path: str, allow_insecure: bool,
                   problems: list[Unusable]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in cluster.items():
        where = f"{path}.{key}"
        if key in IGNORED:
            continue
        refused = _refusal(key, where, CLUSTER_FIELDS)
        if refused is not None:
            problems.append(refused)
        elif key == "server":
            server = _server(value, where, allow_insecure, problems)
            if server:
                out["server"] = server
        elif key == "certificate-authority-data":
            pem = _pem(value, where, PEM_CERTIFICATE, problems)
            if pem:
                out["ca_pem"] = pem.decode("ascii", "replace")
        elif key == "tls-server-name":
            if not isinstance(value, str) or not value or not value.isascii() or any(
                    c in value for c in "/:@ \t\r\n"):
                problems.append(Unusable(where, "not a host name"))
            else:
                out["tls_server_name"] = value
        elif key == "insecure-skip-tls-verify":
            if not isinstance(value, bool):
                problems.append(Unusable(where, "not true or false"))
            elif value and not allow_insecure:
                problems.append(Refused(where, f"{WEAKENING[key]} (allowed only with "
                                        f"{INSECURE_FLAG})"))
            elif value:
                out["insecure_skip_verify"] = True
        elif key == "proxy-url":
            proxy = _proxy(value, where, allow_insecure, problems)
            if proxy:
                out["proxy_url"] = proxy
    if "server" not in cluster:
        problems.append(Unusable(f"{path}.server", "missing: the cluster has no server URL"))
    return out


def _judge_user(user: Mapping[str, Any], path: str, problems: list[Unusable]
                ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in user.items():
        where = f"{path}.{key}"
        if key in IGNORED:
            continue
        refused = _refusal(key, where, USER_FIELDS)
        if refused is not None:
            problems.append(refused)
        elif key == "token":
            if not isinstance(value, str) or not value.isascii() or not value.isprintable() \
                    or value != value.strip():
                problems.append(Unusable(where, "not a token (printable ASCII, no spaces "
                                        "around it)"))
            elif value:
                out["token"] = value
        elif key == "client-certificate-data":
            out["client_cert_pem"] = _pem(value, where, PEM_CERTIFICATE, problems)
        else:  # client-key-data
            out["client_key_pem"] = _pem(value, where, PEM_KEY, problems)
    if bool(out.get("client_cert_pem")) != bool(out.get("client_key_pem")):
        missing = "client-key-data" if out.get("client_cert_pem") else "client-certificate-data"
        problems.append(Unusable(f"{path}.{missing}", "missing: a client certificate needs "
                                "its key, and a key its certificate"))
    return out


def _pem(value: Any, where: str, marker: str, problems: list[Unusable]) -> bytes:
    """The PEM text a ``*-data`` field holds as base64, or b"" with a problem noted."""
    try:
        pem = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
    except binascii.Error:
        pem = b""
    if marker.encode() not in pem:
        problems.append(Unusable(where, f"not base64 of PEM text ({marker.strip('-')})"))
        return b""
    return pem


def _url(value: Any, where: str, problems: list[Unusable]) -> SplitResult | None:
    try:
        url = urlsplit(value) if isinstance(value, str) else None
        port_ok = url is not None and (url.port is None or url.port > 0)
    except ValueError:
        url, port_ok = None, False
    if url is None or not port_ok or not url.hostname or not value.isascii() or any(
            c.isspace() for c in value):
        # Never str() of what is not a string: YAML aliases make small text a huge value.
        shown = repr(value[:100]) if isinstance(value, str) else f"a {type(value).__name__}"
        problems.append(Unusable(where, f"not a URL: {shown}"))
        return None
    if url.username is not None or url.password is not None:
        problems.append(Refused(where, "a user name or password in the URL"))
        return None
    return url


def _server(value: Any, where: str, allow_insecure: bool, problems: list[Unusable]) -> str:
    url = _url(value, where, problems)
    if url is None:
        return ""
    if url.query or url.fragment:
        problems.append(Unusable(where, "a query or fragment in the server URL"))
        return ""
    if url.scheme == "http" and not allow_insecure:
        problems.append(Refused(where, f"{WEAKENING['http']} (allowed only with "
                                f"{INSECURE_FLAG})"))
        return ""
    if url.scheme not in ("https", "http"):
        problems.append(Unusable(where, f"the scheme {url.scheme!r}: https only"))
        return ""
    return url.geturl().rstrip("/")


def _proxy(value: Any, where: str, allow_insecure: bool, problems: list[Unusable]) -> str:
    if not allow_insecure:
        problems.append(Refused(where, f"{WEAKENING['proxy-url']} (allowed only with "
                                f"{INSECURE_FLAG})"))
        return ""
    url = _url(value, where, problems)
    if url is None:
        return ""
    if url.scheme not in ("http", "https"):
        problems.append(Unusable(where, f"the scheme {url.scheme!r}: dnsside speaks to "
                                "http and https proxies only"))
        return ""
    return url.geturl()


__all__ = ["ALWAYS_REFUSED", "INSECURE_FLAG", "MAX_KUBECONFIG", "MAX_SECRET_BYTES", "Credentials",
           "Refused", "Unusable", "load_yaml", "parse_credentials", "yaml_problem"]
