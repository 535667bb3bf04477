"""The clusters a --flat-network test starts: a linked cluster's fake API server that
lets in only Linkerd's remote-access user, the local one holding the Secrets
`linkerd multicluster link` writes for each linked cluster, and `dnsside serve`
watching the local one with --flat-network.

Each is a testkit/threadedkube.py server (blocking code can drive it while it serves
watches); the caller closes it. The objects are the test's own (testkit/flatnet.py
has the usual ones), so a test that needs a hostile or an older cluster changes only
what it loads, not how the clusters are wired.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from testkit.fakekube_rbac import REMOTE_ACCESS_RULES, Rule
from testkit.serve import Dnsside
from testkit.threadedkube import ThreadedKube

# The service account `linkerd multicluster link` gives a linked cluster's mirror, and its
# token in the credentials Secret.
REMOTE_TOKEN = "remote-access-token-west"
REMOTE_USER = "system:serviceaccount:linkerd-multicluster:linkerd-service-mirror-remote-access-west"


def linked_cluster(tmp: Path, objects: Iterable[Mapping[str, Any]], *,
                   rules: Iterable[Rule] = REMOTE_ACCESS_RULES,
                   tokens: Iterable[str] = (REMOTE_TOKEN,), user: str = REMOTE_USER,
                   netns: str | None = None) -> ThreadedKube:
    """A linked cluster's API server in ``tmp`` holding ``objects``: it accepts each of
    ``tokens`` as ``user``, whom ``rules`` (Linkerd's remote-access role) bind."""
    tmp.mkdir(parents=True, exist_ok=True)
    kube = ThreadedKube(tmp, netns=netns)
    try:
        for token in tokens:
            kube.call(kube.kube.add_token, token, user)
        kube.call(kube.kube.restrict, user, tuple(rules))
        kube.call(kube.kube.load, {"kind": "List", "items": list(objects)})
    except BaseException:
        kube.close()
        raise
    return kube


def local_cluster(tmp: Path, objects: Iterable[Mapping[str, Any]],
                  linked: Mapping[str, ThreadedKube], *, token: str = REMOTE_TOKEN,
                  netns: str | None = None) -> ThreadedKube:
    """The local cluster's API server in ``tmp`` holding ``objects`` and, for each
    ``linked`` cluster (by the name its Link gives it), the credentials Secret that lets
    its mirror in with ``token``."""
    tmp.mkdir(parents=True, exist_ok=True)
    kube = ThreadedKube(tmp, netns=netns)
    try:
        kube.call(kube.kube.load, {"kind": "List", "items": list(objects)})
        for name, remote in linked.items():
            kube.call(kube.kube.apply, remote.call(remote.kube.link_credentials, name,
                                                   token=token))
    except BaseException:
        kube.close()
        raise
    return kube


def serve_flat(local: ThreadedKube, *extra: str, wait_synced: bool = True,
               env: dict[str, str] | None = None) -> Dnsside:
    """`dnsside serve --flat-network` as cluster `east` against ``local``, retrying a
    linked cluster within half a second (``extra``: more flags)."""
    return Dnsside("--source", "kube", "--kubeconfig", local.kubeconfig, "--cluster-name",
                   "east", "--flat-network", "--kube-backoff-cap", "0.5", *extra,
                   wait_synced=wait_synced, env=env)
