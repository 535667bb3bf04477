"""An in-process fake Kubernetes API server (aiohttp) for tests.

It serves core/v1 Services, Endpoints, ConfigMaps, Secrets and Pods, discovery.k8s.io/v1
EndpointSlices, apps/v1 Deployments and Linkerd's ``links.multicluster.linkerd.io``
(a CRD served at v1alpha1-3, or not installed: :meth:`FakeKube.set_link_crd`) the
way a real API server does, as far as a list/watch client can tell:

* one global, monotonically increasing ``resourceVersion`` (an etcd revision),
  bumped by every write and stamped on the object written;
* multi-version storage, so a paged list (``limit`` + ``continue``) reads one
  consistent snapshot, and a ``continue`` token whose snapshot was compacted
  away answers ``410 Expired``;
* lists shaped ``{kind: ServiceList, apiVersion, metadata: {resourceVersion,
  continue?, remainingItemCount?}, items}`` with items *without* ``kind`` /
  ``apiVersion``, like the real thing;
* ``labelSelector`` (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``,
  ``k notin (a,b)``, comma = AND);
* watches (``watch=1|true``) as chunked newline-delimited JSON events, resumed
  from ``resourceVersion`` out of a kept event history, with
  ``allowWatchBookmarks`` (periodic BOOKMARK events carrying only
  ``metadata.resourceVersion``), ``timeoutSeconds`` (clean close), an ERROR
  event with a 410 ``Expired`` Status when the version was compacted, and the
  selector transitions of the real watch (an object leaving the selector is
  DELETED, one entering it is ADDED);
* bearer-token auth (401 without a known token): :attr:`FakeKube.token` is user
  ``admin``, :meth:`FakeKube.add_token` adds more users, and an unrestricted user may
  act as another with the ``Impersonate-User`` header; on the TLS listener
  (:attr:`FakeKube.tls_url`, testkit/testca.py) a request without a token may present a
  client certificate the test CA signed, and is its CN;
* RBAC: :meth:`FakeKube.forbid` denies a resource to a user (or everyone), and
  :meth:`FakeKube.restrict` limits a user to an allow-list of :class:`Rule` s
  (testkit/fakekube_rbac.py; :data:`REMOTE_ACCESS_RULES` is what a Linkerd Link's
  service account may read), both 403 with the real message;
* discovery (``/version``, ``/api``, ``/apis``, ``/apis/<group>``, ...), open to
  every authenticated user.

Two fakes make a local and a remote (linked) cluster: :meth:`FakeKube.link_credentials`
builds the Secret ``linkerd multicluster link`` writes into the local cluster, holding a
kubeconfig for the remote one.

Writes happen through Python methods, never HTTP (the fake answers 405 to
anything but GET): :meth:`FakeKube.load`, :meth:`~FakeKube.apply`,
:meth:`~FakeKube.delete`, and fault injection with :meth:`~FakeKube.drop_streams`,
:meth:`~FakeKube.end_streams`,
:meth:`~FakeKube.fail_next`, :meth:`~FakeKube.compact`,
:meth:`~FakeKube.set_unreachable`, :attr:`FakeKube.latency` (seconds every request
waits) and :attr:`FakeKube.failing_status` (every request fails with it). Every request
is counted in :attr:`FakeKube.requests` by ``(method, path)``.

A linked cluster's API server may be hostile: :attr:`FakeKube.hostile`, when set, sees
every authenticated request first and may answer it any way it likes (malformed JSON, an
endless line, a trickle: tests/security/test_hostile_api.py); returning None lets the fake answer
as the API server does.

Use :func:`running_fake_kube` (or the ``fake_kube`` fixture in conftest.py)::

    async with running_fake_kube(tmp_path) as kube:
        kube.load("examples/demo-east.yaml")
        source = KubeSource(kubeconfig=kube.kubeconfig, namespaces=[])

All control methods must be called from the event loop the server runs on.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import collections
import contextlib
import copy
import json
import os
import re
import socket
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from testkit.fakekube_rbac import REMOTE_ACCESS_RULES as REMOTE_ACCESS_RULES  # re-exported
from testkit.fakekube_rbac import REMOTE_ACCESS_RULES_PRE_214 as REMOTE_ACCESS_RULES_PRE_214
from testkit.fakekube_rbac import Access, Users, forbidden_message, impersonation_message
from testkit.fakekube_rbac import Rule as Rule
from testkit.testca import fake_ca

# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    api_version: str  # "v1" or "group/version"
    prefix: str  # URL prefix of the group version


SERVICES = Resource("services", "Service", "v1", "/api/v1")
ENDPOINTSLICES = Resource(
    "endpointslices", "EndpointSlice", "discovery.k8s.io/v1", "/apis/discovery.k8s.io/v1"
)
# Linkerd's Link CRD: one stored object, served at every version the CRD lists (the fields
# dnsside reads are the same in all of them, so conversion is the identity here).
LINK_GROUP = "multicluster.linkerd.io"
LINK_VERSIONS = ("v1alpha3", "v1alpha2", "v1alpha1")  # the first is the storage version
LINK_ROUTES = {
    v: Resource("links", "Link", f"{LINK_GROUP}/{v}", f"/apis/{LINK_GROUP}/{v}")
    for v in LINK_VERSIONS
}
LINKS = LINK_ROUTES[LINK_VERSIONS[0]]
# What `dnsside check` reads besides: its ConfigMap, its Deployment (or CoreDNS's) and the
# pods behind it. Stored and served like the rest, read-only over HTTP.
CONFIGMAPS = Resource("configmaps", "ConfigMap", "v1", "/api/v1")
PODS = Resource("pods", "Pod", "v1", "/api/v1")
DEPLOYMENTS = Resource("deployments", "Deployment", "apps/v1", "/apis/apps/v1")
# What --flat-network reads: a Link's credentials Secret (local cluster) and, on a remote
# older than Linkerd 2.14 (whose service account may not read EndpointSlices), v1 Endpoints.
SECRETS = Resource("secrets", "Secret", "v1", "/api/v1")
ENDPOINTS = Resource("endpoints", "Endpoints", "v1", "/api/v1")
_STORED = (SERVICES, ENDPOINTSLICES, LINKS, CONFIGMAPS, PODS, DEPLOYMENTS, SECRETS, ENDPOINTS)
RESOURCES = {r.plural: r for r in _STORED}
BY_KIND = {r.kind: r for r in _STORED}
ROUTES = (SERVICES, CONFIGMAPS, PODS, ENDPOINTS, SECRETS, ENDPOINTSLICES, DEPLOYMENTS,
          *LINK_ROUTES.values())
# The type and data key of the Secret `linkerd multicluster link` writes (k8s.MirrorSecretType,
# k8s.ConfigKeyName in linkerd2).
LINK_SECRET_TYPE = "mirror.linkerd.io/remote-kubeconfig"
LINK_SECRET_KEY = "kubeconfig"
# Built-in API groups (discovery): name -> version.
_GROUPS = {"discovery.k8s.io": "v1", "apps": "v1"}

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(code: int, message: str, reason: str | None = None) -> dict[str, Any]:
    """A meta/v1 Status, as the API server sends with errors."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or _REASONS.get(code, "Unknown"),
        "code": code,
    }


def _status_response(code: int, message: str, reason: str | None = None) -> web.Response:
    return web.json_response(status_body(code, message, reason), status=code)


# --------------------------------------------------------------------------- selectors


class SelectorError(ValueError):
    pass


_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SET_REQ = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")

Labels = Mapping[str, str]
Selector = Callable[[Labels], bool]


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _check_key(key: str) -> str:
    if not _KEY.match(key):
        raise SelectorError(f"invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if not _VALUE.match(value):
        raise SelectorError(f"invalid label value {value!r}")
    return value


def parse_selector(text: str | None) -> Selector:
    """Compile a Kubernetes label selector; raises SelectorError when it is invalid."""
    if not text or not text.strip():
        return lambda labels: True
    reqs: list[Selector] = []
    for raw in _split_top_level(text):
        req = raw.strip()
        if not req:
            raise SelectorError(f"empty requirement in {text!r}")
        m = _SET_REQ.match(req)
        if m:
            key, op = _check_key(m.group(1)), m.group(2)
            values = frozenset(_check_value(v.strip()) for v in m.group(3).split(","))
            if op == "in":
                reqs.append(lambda lb, k=key, vs=values: k in lb and lb[k] in vs)
            else:
                reqs.append(lambda lb, k=key, vs=values: k not in lb or lb[k] not in vs)
        elif req.startswith("!"):
            key = _check_key(req[1:].strip())
            reqs.append(lambda lb, k=key: k not in lb)
        elif "!=" in req:
            k_, v_ = req.split("!=", 1)
            key, value = _check_key(k_.strip()), _check_value(v_.strip())
            reqs.append(lambda lb, k=key, v=value: lb.get(k) != v)
        elif "=" in req:
            k_, v_ = req.split("==", 1) if "==" in req else req.split("=", 1)
            key, value = _check_key(k_.strip()), _check_value(v_.strip())
            reqs.append(lambda lb, k=key, v=value: lb.get(k) == v)
        else:
            key = _check_key(req)
            reqs.append(lambda lb, k=key: k in lb)
    return lambda labels: all(r(labels) for r in reqs)


def _labels(obj: Mapping[str, Any] | None) -> Labels:
    if obj is None:
        return {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def _parse_bool(value: str | None) -> bool:
    # Go's strconv.ParseBool, which the API server uses for query parameters.
    return value in ("1", "t", "T", "true", "TRUE", "True")


# --------------------------------------------------------------------------- storage


Key = tuple[str, str, str]  # (plural, namespace, name)


@dataclass
class _Event:
    rv: int
    plural: str
    namespace: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    prev: dict[str, Any] | None  # the object before this write, for selector transitions


@dataclass(eq=False)
class _Watcher:
    plural: str
    namespace: str | None
    selector: Selector
    queue: asyncio.Queue[_Event | None]
    request: web.Request
    aborted: bool = False
    user: str = "admin"  # who opened it, so restrict() can end what the user may no longer do
    group: str = ""

    def offer(self, ev: _Event) -> None:
        """Queue the event as this watcher sees it (type rewritten for selector moves)."""
        if self.aborted or ev.plural != self.plural:
            return
        if self.namespace is not None and ev.namespace != self.namespace:
            return
        translated = _translate(ev, self.selector)
        if translated is not None:
            self.queue.put_nowait(translated)

    def end(self) -> None:
        """End the stream cleanly (the resource stopped being served)."""
        if not self.aborted:
            self.queue.put_nowait(None)

    def abort(self) -> None:
        if self.aborted:
            return
        self.aborted = True
        if self.request.transport is not None:
            self.request.transport.abort()
        self.queue.put_nowait(None)


def _translate(ev: _Event, selector: Selector) -> _Event | None:
    now = ev.type != "DELETED" and selector(_labels(ev.obj))
    before = ev.prev is not None and selector(_labels(ev.prev))
    if ev.type == "DELETED":
        return ev if before else None
    if now and before:
        return ev
    if now:
        return _Event(ev.rv, ev.plural, ev.namespace, "ADDED", ev.obj, ev.prev)
    if before:
        return _Event(ev.rv, ev.plural, ev.namespace, "DELETED", ev.obj, ev.prev)
    return None


def _encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        rv, start = int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SelectorError(f"invalid continue token: {exc}") from None
    return rv, start.rstrip("\x00")


def _sort_key(key: Key) -> str:
    return f"{key[1]}/{key[2]}"


# --------------------------------------------------------------------------- the server


@dataclass
class _Failure:
    status: int
    message: str
    match: Callable[[web.Request], bool] | None


@dataclass
class FakeKube:
    """The fake API server. Start it with :meth:`start` or :func:`running_fake_kube`."""

    bookmark_interval: float = 0.5
    token: str | None = "fake-token"  # None: accept unauthenticated requests
    requests: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    request_log: list[tuple[str, str]] = field(default_factory=list)  # (method, path?query)
    # Requests that came without TLS (on :attr:`url`, not :attr:`tls_url`), and every
    # Authorization header value seen: what a client sent, and how.
    plain_requests: int = 0
    authorizations: collections.Counter[str] = field(default_factory=collections.Counter)

    _rv: int = 0
    _compacted: int = 0
    _versions: dict[Key, list[tuple[int, dict[str, Any] | None]]] = field(default_factory=dict)
    _log: list[_Event] = field(default_factory=list)
    _watchers: set[_Watcher] = field(default_factory=set)
    _failures: collections.deque[_Failure] = field(default_factory=collections.deque)
    _unreachable: bool = False
    # Seconds every request waits before it is answered (a slow, overloaded API server:
    # bench/soak.py's "slow API" fault). Open watch streams keep streaming at full speed.
    latency: float = 0.0
    # When non-zero, every request (those failing_match accepts, when set) is answered with
    # this status (an API server failing for a while, e.g. 500 while etcd is unavailable),
    # until it is set back to 0.
    failing_status: int = 0
    failing_match: Callable[[web.Request], bool] | None = None
    # A hostile API server: answers what it wants to (None: the fake answers as usual).
    hostile: Callable[[web.Request], Awaitable[web.StreamResponse | None]] | None = None
    _key_indexes: dict[str, tuple[tuple[int, int], list[str], list[Key]]] = field(
        default_factory=dict)
    # The Link CRD's served versions; () = the CRD is not installed (404, not in discovery).
    link_versions: tuple[str, ...] = LINK_VERSIONS
    # (plural, user) pairs RBAC denies; user None = everyone. The user of a request is its
    # Impersonate-User header, else "admin" (the kubeconfig's token).
    _forbidden: set[tuple[str, str | None]] = field(default_factory=set)
    # More bearer tokens than ``token``, and the allow-lists of restricted users.
    users: Users = field(default_factory=Users)
    # A stored object's JSON as a list item, by id(object) (the object is kept with it, so
    # the id cannot be reused): stored versions never change, and a real API server does
    # not spend 10 ms of Python per 500-item page either, which was most of a 100k-member
    # list (bench/kube_scale.py measures dnsside, not this fake).
    _item_json: dict[int, tuple[dict[str, Any], bytes]] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    _site: web.SockSite | None = None
    _tls_site: web.SockSite | None = None
    host: str = "127.0.0.1"
    port: int = 0
    # The same API over TLS (testkit/testca.py), as a linked cluster's is reached: a Link's
    # kubeconfig must name an https server with its CA (dnsside/kubeapi/linkcreds.py).
    tls_port: int = 0
    kubeconfig: str = ""

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def tls_url(self) -> str:
        return f"https://{self.host}:{self.tls_port}"

    async def start(self, kubeconfig_dir: str | os.PathLike[str] | None = None) -> None:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await self._listen()
        if kubeconfig_dir is not None:
            self.kubeconfig = self.write_kubeconfig(Path(kubeconfig_dir) / "kubeconfig")

    async def stop(self) -> None:
        self.drop_streams()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None
            self._tls_site = None

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site, self.port = await self._bind(self.port, None)
        self._tls_site, self.tls_port = await self._bind(self.tls_port,
                                                         fake_ca().server_context())

    async def _bind(self, port: int, tls: ssl.SSLContext | None) -> tuple[web.SockSite, int]:
        assert self._runner is not None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, port))
        site = web.SockSite(self._runner, sock, ssl_context=tls)
        await site.start()
        return site, sock.getsockname()[1]

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> str:
        Path(path).write_text(self.kubeconfig_text())
        return str(path)

    def kubeconfig_text(self, token: str | None = None, name: str = "fake",
                        tls: bool = False) -> str:
        """A kubeconfig (YAML) for this server with one cluster, user and context, all
        called ``name``, the current one; its user sends ``token`` (default :attr:`token`;
        none at all when both are None). ``tls``: the https listener, with the test CA as
        certificate-authority-data."""
        token = token if token is not None else self.token
        user: dict[str, Any] = {"token": token} if token else {}
        cluster: dict[str, Any] = {"server": self.url}
        if tls:
            cluster = {"server": self.tls_url, "certificate-authority-data":
                       base64.b64encode(fake_ca().ca_pem.encode()).decode()}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }
        return yaml.safe_dump(config)

    def link_credentials(self, name: str, namespace: str = "linkerd-multicluster",
                         token: str | None = None) -> dict[str, Any]:
        """The Secret ``linkerd multicluster link --cluster-name <name>`` writes into the
        *local* cluster for this (remote) fake: ``cluster-credentials-<name>`` of type
        ``mirror.linkerd.io/remote-kubeconfig``, data ``kubeconfig`` = a kubeconfig for
        this server's https listener (with the test CA) authenticating with ``token``
        (default :attr:`token`). Pass it to the local fake's :meth:`apply`; a Link's
        ``spec.clusterCredentialsSecret`` names it."""
        text = self.kubeconfig_text(token, name, tls=True)
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": LINK_SECRET_TYPE,
            "metadata": {"name": f"cluster-credentials-{name}", "namespace": namespace},
            "data": {LINK_SECRET_KEY: base64.b64encode(text.encode()).decode()},
        }

    # ------------------------------------------------------------------ test control

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (that of the last write)."""
        return self._rv

    def load(self, objects: Any) -> list[dict[str, Any]]:
        """Apply many objects: a path to a YAML/JSON file, a ``kind: List`` dict, or an iterable."""
        if isinstance(objects, (str, os.PathLike)):
            docs = [d for d in yaml.safe_load_all(Path(objects).read_text()) if d]
            items: list[Any] = []
            for d in docs:
                items.extend((d.get("items") or []) if d.get("kind") == "List" else [d])
        elif isinstance(objects, Mapping):
            items = list(objects.get("items") or []) if objects.get("kind") == "List" else [objects]
        else:
            items = list(objects)
        return [self.apply(o) for o in items if o.get("kind") in BY_KIND]

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace an object (→ ADDED or MODIFIED); returns the stored copy."""
        res = BY_KIND.get(obj.get("kind", ""))
        if res is None:
            kind = obj.get("kind")
            raise ValueError(f"the fake serves {', '.join(BY_KIND)}, not {kind!r}")
        new = copy.deepcopy(dict(obj))
        new["apiVersion"] = res.api_version
        if res is SECRETS and "stringData" in new:
            # The API server merges write-only stringData into data (base64) on write.
            data = new.setdefault("data", {})
            for k, v in (new.pop("stringData") or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        meta = new.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        if not meta.get("name"):
            raise ValueError("metadata.name is required")
        key = (res.plural, meta["namespace"], meta["name"])
        prev = self._current(key)
        if prev is not None:
            meta["uid"] = prev["metadata"].get("uid")
            meta.setdefault("creationTimestamp", prev["metadata"].get("creationTimestamp"))
        else:
            meta["uid"] = meta.get("uid") or str(uuid.uuid4())
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        self._write(key, new, "MODIFIED" if prev is not None else "ADDED", prev)
        return copy.deepcopy(new)

    def delete(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """Delete an object (→ DELETED, carrying its last state at the deletion version)."""
        res = BY_KIND.get(kind) or RESOURCES.get(kind)
        if res is None:
            raise ValueError(f"unknown kind {kind!r}")
        key = (res.plural, namespace, name)
        prev = self._current(key)
        if prev is None:
            raise KeyError(f"{kind} {namespace}/{name} does not exist")
        self._rv += 1
        gone = copy.deepcopy(prev)
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._write(key, None, "DELETED", prev, event_obj=gone)
        return gone

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        res = BY_KIND.get(kind) or RESOURCES[kind]
        obj = self._current((res.plural, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, kind: str) -> list[dict[str, Any]]:
        res = BY_KIND.get(kind) or RESOURCES[kind]
        return [
            copy.deepcopy(obj)
            for key in sorted(self._versions, key=_sort_key)
            if key[0] == res.plural and (obj := self._current(key)) is not None
        ]

    def forbid(self, plural: str, user: str | None = None) -> None:
        """Deny get/list/watch of ``plural`` (403, as RBAC does) to ``user`` (None: everyone)."""
        self._forbidden.add((plural, user))
        for w in list(self._watchers):
            if w.plural == plural:
                w.abort()

    def allow(self, plural: str, user: str | None = None) -> None:
        self._forbidden.discard((plural, user))

    def add_token(self, token: str, user: str) -> None:
        """Accept bearer ``token`` too, authenticating as ``user`` (unrestricted until
        :meth:`restrict`); :attr:`token` stays user ``admin``."""
        self.users.add_token(token, user)

    def restrict(self, user: str, rules: Iterable[Rule]) -> None:
        """From now on ``user`` may only get/list/watch what ``rules`` grant (403 with the
        real message otherwise) and may not impersonate. Open watches the rules no longer
        allow are ended (TCP reset, as :meth:`forbid` does), so a client meets the rules
        on its next list instead of streaming on."""
        self.users.restrict(user, rules)
        for w in list(self._watchers):
            if w.user == user and not self.users.allows(
                    user, Access("watch", w.group, w.plural, w.namespace)):
                w.abort()

    def unrestrict(self, user: str) -> None:
        """Lift :meth:`restrict`: ``user`` may do everything again."""
        self.users.unrestrict(user)

    def set_link_crd(self, versions: Iterable[str] | None) -> None:
        """Serve the Link CRD at ``versions`` (None or empty: uninstall it; objects stay
        stored, as etcd keeps them, but every Link request is a 404)."""
        self.link_versions = tuple(v for v in LINK_VERSIONS if v in set(versions or ()))
        if not self.link_versions:
            for w in list(self._watchers):
                if w.plural == LINKS.plural:
                    w.end()

    def _served(self, res: Resource) -> bool:
        return res.plural != LINKS.plural or res.api_version.split("/")[1] in self.link_versions

    def _user(self, request: web.Request) -> str:
        """The user an authenticated request acts as: its Impersonate-User header (the
        middleware refused it to restricted users), else its token's user. Derived again
        rather than kept on the request, which aiohttp < 3.12 has no typed keys for."""
        user = self.users.authenticate(request.headers.get("Authorization"), self.token, "admin")
        if user is None and "Authorization" not in request.headers:
            user = _certificate_user(request)  # x509: the verified client certificate's CN
        return request.headers.get("Impersonate-User") or user or "admin"

    def _denied(self, request: web.Request, res: Resource, namespace: str | None,
                name: str | None) -> web.Response | None:
        """RBAC's answer to this request: None if allowed, else the 403."""
        user = self._user(request)
        verb = "get" if name is not None else (
            "watch" if _parse_bool(request.query.get("watch")) else "list")
        access = Access(verb, res.api_version.rpartition("/")[0], res.plural, namespace, name)
        if ((res.plural, None) in self._forbidden or (res.plural, user) in self._forbidden
                or not self.users.allows(user, access)):
            return _status_response(403, forbidden_message(user, access), "Forbidden")
        return None

    def compact(self) -> None:
        """Forget history up to now: older resourceVersions (watch, continue) get 410 Expired."""
        self._compacted = self._rv
        self._log.clear()
        self._item_json.clear()
        for key in list(self._versions):
            versions = self._versions[key]
            i = bisect.bisect_right(versions, self._compacted, key=lambda v: v[0])
            kept = versions[max(i - 1, 0):]
            if len(kept) == 1 and kept[0][1] is None:
                del self._versions[key]
            else:
                self._versions[key] = kept

    def drop_streams(self) -> int:
        """Abort every open watch connection (TCP reset); returns how many."""
        watchers = list(self._watchers)
        for w in watchers:
            w.abort()
        self._watchers.clear()
        return len(watchers)

    def end_streams(self) -> int:
        """End every open watch cleanly, as the API server does at ``timeoutSeconds``;
        returns how many."""
        watchers = list(self._watchers)
        for w in watchers:
            w.end()
        return len(watchers)

    @property
    def open_streams(self) -> int:
        return len(self._watchers)

    def fail_next(
        self,
        n: int,
        status: int = 500,
        *,
        message: str = "injected failure",
        match: Callable[[web.Request], bool] | None = None,
    ) -> None:
        """Answer the next ``n`` requests (those ``match`` accepts) with ``status`` and a Status."""
        for _ in range(n):
            self._failures.append(_Failure(status, message, match))

    @property
    def pending_failures(self) -> int:
        return len(self._failures)

    def clear_failures(self) -> None:
        """Answer every request normally again."""
        self._failures.clear()

    async def set_unreachable(self, unreachable: bool) -> None:
        """Stop listening and reset every connection (True), or listen again (False)."""
        if unreachable == self._unreachable:
            return
        self._unreachable = unreachable
        if unreachable:
            self.drop_streams()
            for site in (self._site, self._tls_site):
                if site is not None:
                    await site.stop()
            self._site = self._tls_site = None
        else:
            await self._listen()

    def verbs(self) -> set[str]:
        """The HTTP methods seen so far."""
        return {method for method, _ in self.requests}

    def count(self, path: str, method: str = "GET") -> int:
        return self.requests[(method, path)]

    # ------------------------------------------------------------------ storage internals

    def _key_index(self, plural: str) -> tuple[list[str], list[Key]]:
        """Sort keys and keys of ``plural``, in list order; rebuilt only when keys come or go
        (a new key changes the count; only compact() removes keys)."""
        stamp = (len(self._versions), self._compacted)
        cached = self._key_indexes.get(plural)
        if cached is None or cached[0] != stamp:
            ordered = sorted((_sort_key(k), k) for k in self._versions if k[0] == plural)
            cached = (stamp, [sk for sk, _ in ordered], [k for _, k in ordered])
            self._key_indexes[plural] = cached
        return cached[1], cached[2]

    def _current(self, key: Key) -> dict[str, Any] | None:
        versions = self._versions.get(key)
        return versions[-1][1] if versions else None

    def _at(self, key: Key, rv: int) -> dict[str, Any] | None:
        versions = self._versions.get(key) or []
        i = bisect.bisect_right(versions, rv, key=lambda v: v[0])
        return versions[i - 1][1] if i else None

    def _write(
        self,
        key: Key,
        obj: dict[str, Any] | None,
        type_: str,
        prev: dict[str, Any] | None,
        event_obj: dict[str, Any] | None = None,
    ) -> None:
        self._versions.setdefault(key, []).append((self._rv, obj))
        ev_obj = event_obj if event_obj is not None else obj
        assert ev_obj is not None
        ev = _Event(self._rv, key[0], key[1], type_, ev_obj, prev)
        self._log.append(ev)
        for w in list(self._watchers):
            w.offer(ev)

    # ------------------------------------------------------------------ HTTP

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        self.requests[(request.method, request.path)] += 1
        self.request_log.append((request.method, request.path_qs))
        self.plain_requests += not request.secure
        self.authorizations[request.headers.get("Authorization", "")] += 1
        if self._unreachable:
            if request.transport is not None:
                request.transport.abort()
            return _status_response(503, "unreachable")
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        if self.failing_status and (self.failing_match is None or self.failing_match(request)):
            return _status_response(self.failing_status, "injected failure (failing_status)")
        for i, failure in enumerate(self._failures):
            if failure.match is None or failure.match(request):
                del self._failures[i]
                return _status_response(failure.status, failure.message)
        user = self.users.authenticate(request.headers.get("Authorization"), self.token, "admin")
        if user is None and "Authorization" not in request.headers:
            user = _certificate_user(request)  # x509: the verified client certificate's CN
        if user is None:
            return _status_response(401, "Unauthorized")
        target = request.headers.get("Impersonate-User")
        if target and self.users.restricted(user):
            return _status_response(403, impersonation_message(user, target), "Forbidden")
        if request.method != "GET":
            return _status_response(405, f"the fake API server is read-only: {request.method}")
        if self.hostile is not None:
            answer = await self.hostile(request)
            if answer is not None:
                return answer
        result: web.StreamResponse = await handler(request)
        return result

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        static = self._discovery(path)
        if static is not None:
            return web.json_response(static)
        for res in ROUTES:
            if not path.startswith(res.prefix + "/") or not self._served(res):
                continue
            parts = path[len(res.prefix) + 1:].split("/")
            if res.plural not in (parts[0], parts[2] if len(parts) >= 3 else None):
                continue  # another resource of this group version
            collection = parts == [res.plural] or (
                len(parts) == 3 and parts[0] == "namespaces" and parts[2] == res.plural)
            one = len(parts) == 4 and parts[0] == "namespaces" and parts[2] == res.plural
            if not (collection or one):
                continue
            namespace = parts[1] if len(parts) >= 3 else None
            denied = self._denied(request, res, namespace, parts[3] if one else None)
            if denied is not None:
                return denied
            if collection:
                return await self._collection(request, res, namespace)
            if one:
                obj = self._current((res.plural, parts[1], parts[3]))
                if obj is None:
                    return _status_response(
                        404, f'{res.plural} "{parts[3]}" not found', "NotFound"
                    )
                return web.json_response(dict(obj, apiVersion=res.api_version))
        return _status_response(404, f"the server could not find the requested resource {path}")

    def _discovery(self, path: str) -> dict[str, Any] | None:
        if path == "/version":
            return {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake", "platform": "fake"}
        if path in ("/healthz", "/readyz", "/livez"):
            return {"status": "ok"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups = [_group(name, [version]) for name, version in _GROUPS.items()]
            if self.link_versions:
                groups.append(self._link_group())
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if path == f"/apis/{LINK_GROUP}" and self.link_versions:
            return {"kind": "APIGroup", "apiVersion": "v1", **self._link_group()}
        if path.startswith("/apis/") and path[len("/apis/"):] in _GROUPS:
            name = path[len("/apis/"):]
            return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, [_GROUPS[name]])}
        served = [res for res in ROUTES if path == res.prefix and self._served(res)]
        if served:
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": served[0].api_version,
                "resources": [
                    {
                        "name": res.plural,
                        "singularName": res.kind.lower(),
                        "namespaced": True,
                        "kind": res.kind,
                        "verbs": ["get", "list", "watch"],
                    }
                    for res in served
                ],
            }
        return None

    def _link_group(self) -> dict[str, Any]:
        return _group(LINK_GROUP, self.link_versions)

    async def _collection(
        self, request: web.Request, res: Resource, namespace: str | None
    ) -> web.StreamResponse:
        q = request.query
        try:
            selector = parse_selector(q.get("labelSelector"))
        except SelectorError as exc:
            return _status_response(400, f"unable to parse requirement: {exc}", "BadRequest")
        if _parse_bool(q.get("watch")):
            return await self._watch(request, res, namespace, selector)
        return self._list(res, namespace, selector, q)

    def _list(
        self, res: Resource, namespace: str | None, selector: Selector, q: Mapping[str, str]
    ) -> web.Response:
        start = ""
        snapshot = self._rv
        if q.get("continue"):
            try:
                snapshot, start = _decode_continue(q["continue"])
            except SelectorError as exc:
                return _status_response(400, str(exc), "BadRequest")
            if snapshot < self._compacted:
                return _status_response(
                    410,
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                    "Expired",
                )
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            return _status_response(400, f"invalid limit {q.get('limit')!r}", "BadRequest")
        # Walk the ordered key index from the continue point, as etcd's range read does:
        # a page costs its own size, not the size of the collection.
        sort_keys, keys = self._key_index(res.plural)
        i = bisect.bisect_right(sort_keys, start) if start else 0
        page: list[tuple[str, dict[str, Any]]] = []
        more = False
        for j in range(i, len(keys)):
            key = keys[j]
            if namespace is not None and key[1] != namespace:
                continue
            obj = self._at(key, snapshot)
            if obj is None or not selector(_labels(obj)):
                continue
            if 0 < limit == len(page):
                more = True
                break
            page.append((sort_keys[j], obj))
        meta: dict[str, Any] = {"resourceVersion": str(snapshot)}
        if more:
            meta["continue"] = _encode_continue(snapshot, page[-1][0])
            if not q.get("labelSelector"):
                # An estimate, as the API allows: keys of objects deleted at the
                # snapshot are counted too.
                meta["remainingItemCount"] = len(keys) - bisect.bisect_right(
                    sort_keys, page[-1][0])
        items = []
        for _, obj in page:
            cached = self._item_json.get(id(obj))
            if cached is None:
                item = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
                cached = self._item_json[id(obj)] = (obj, _line(item)[:-1])
            items.append(cached[1])
        head = json.dumps({"kind": res.kind + "List", "apiVersion": res.api_version,
                           "metadata": meta}, separators=(",", ":"))
        body = head[:-1].encode() + b',"items":[' + b",".join(items) + b"]}"
        return web.Response(body=body, content_type="application/json")

    async def _watch(
        self, request: web.Request, res: Resource, namespace: str | None, selector: Selector
    ) -> web.StreamResponse:
        q = request.query
        rv_param = q.get("resourceVersion") or ""
        bookmarks = _parse_bool(q.get("allowWatchBookmarks"))
        try:
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
            from_rv = int(rv_param) if rv_param not in ("", "0") else None
        except ValueError:
            return _status_response(400, "invalid resourceVersion or timeoutSeconds", "BadRequest")

        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()

        if from_rv is not None and from_rv < self._compacted:
            await resp.prepare(request)
            status = status_body(
                410, f"too old resource version: {from_rv} ({self._compacted})", "Expired"
            )
            await resp.write(_line({"type": "ERROR", "object": status}))
            await resp.write_eof()
            return resp

        # Synchronously (no await in between): backlog from history, then registration,
        # so no write can fall between the two.
        backlog: list[_Event] = []
        if from_rv is None:  # "start at most recent": synthetic ADDED for the current state
            for key in sorted(self._versions, key=_sort_key):
                obj = self._current(key)
                if key[0] != res.plural or obj is None:
                    continue
                if (namespace is None or key[1] == namespace) and selector(_labels(obj)):
                    backlog.append(_Event(self._rv, key[0], key[1], "ADDED", obj, None))
        else:
            for ev in self._log[bisect.bisect_right(self._log, from_rv, key=lambda e: e.rv):]:
                if ev.plural == res.plural and (namespace is None or ev.namespace == namespace):
                    translated = _translate(ev, selector)
                    if translated is not None:
                        backlog.append(translated)
        watcher = _Watcher(res.plural, namespace, selector, asyncio.Queue(), request,
                           user=self._user(request), group=res.api_version.rpartition("/")[0])
        for ev in backlog:
            watcher.queue.put_nowait(ev)
        self._watchers.add(watcher)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        try:
            await resp.prepare(request)
            next_bookmark = loop.time() + self.bookmark_interval
            while True:
                now = loop.time()
                waits = [deadline - now] if deadline is not None else []
                if bookmarks:
                    waits.append(next_bookmark - now)
                wait = max(min(waits), 0) if waits else None
                try:
                    ev = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    if deadline is not None and loop.time() >= deadline:
                        await resp.write_eof()
                        return resp
                    # The queue is empty: every event up to now was written, so the
                    # current revision is a safe bookmark.
                    bookmark = {
                        "kind": res.kind,
                        "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(self._rv)},
                    }
                    await resp.write(_line({"type": "BOOKMARK", "object": bookmark}))
                    next_bookmark = loop.time() + self.bookmark_interval
                    continue
                if ev is None and not watcher.aborted:
                    await resp.write_eof()
                    return resp
                if ev is None or watcher.aborted:
                    raise _Aborted
                obj = dict(ev.obj, kind=res.kind, apiVersion=res.api_version)
                await resp.write(_line({"type": ev.type, "object": obj}))
        except (_Aborted, ConnectionError):
            # The connection is gone; aiohttp's write_eof raises ConnectionError, which it
            # expects from clients that went away.
            return resp
        finally:
            self._watchers.discard(watcher)


def _certificate_user(request: web.Request) -> str | None:
    """The CN of the client certificate a TLS request presented (verified against the
    test CA by the handshake), as a real API server's x509 authenticator reads it."""
    peer = request.transport.get_extra_info("peercert") if request.transport else None
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _group(name: str, versions: Iterable[str]) -> dict[str, Any]:
    """An APIGroup discovery entry; the first version is the preferred one."""
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


class _Aborted(Exception):
    pass




def _line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


# --------------------------------------------------------------------------- helpers


@contextlib.asynccontextmanager
async def running_fake_kube(
    kubeconfig_dir: str | os.PathLike[str], **kwargs: Any
) -> AsyncIterator[FakeKube]:
    """Start a FakeKube on 127.0.0.1:<free port>, write ``<dir>/kubeconfig``, stop on exit."""
    kube = FakeKube(**kwargs)
    await kube.start(kubeconfig_dir)
    try:
        yield kube
    finally:
        await kube.stop()


def list_items(objects: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]
