"""dnsside/kubeapi/linkcreds.py: what a Link's kubeconfig may hold, decided on the text
alone (the end-to-end view is tests/security/test_hostile_credentials.py)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from dnsside.kubeapi.linkcreds import (
    ALWAYS_REFUSED,
    Refused,
    Unusable,
    parse,
)
from testkit.testca import fake_ca

pytestmark = pytest.mark.quick

CA = base64.b64encode(fake_ca().ca_pem.encode()).decode()
SERVER = "https://api.west.example:6443"


def config(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None,
           **top: Any) -> str:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "west",
           "clusters": [{"name": "other", "cluster": {"server": "http://x", "exec": 1}},
                        {"name": "west", "cluster": {"server": SERVER,
                                                     "certificate-authority-data": CA,
                                                     **(cluster or {})}}],
           "users": [{"name": "west", "user": {"token": "t0k", **(user or {})}}],
           "contexts": [{"name": "west", "context": {"cluster": "west", "user": "west",
                                                     "namespace": "default"}}],
           **top}
    return yaml.safe_dump(doc)


def test_what_linkerd_writes_is_data() -> None:
    creds = parse(config(user={"extensions": [{"name": "x", "extension": {}}]},
                         preferences={}))
    assert (creds.server, creds.token, creds.weakened) == (SERVER, "t0k", ())
    assert creds.ca_pem == fake_ca().ca_pem
    # Only the selected cluster is judged: clusters[0] (http, exec) is never used.
    assert creds.cluster_path == "clusters[1].cluster"


@pytest.mark.parametrize("field", sorted(ALWAYS_REFUSED))
def test_code_files_basic_auth_and_impersonation_are_refused_whatever_the_flag(
        field: str) -> None:
    where = ("cluster" if field == "certificate-authority" else "user")
    value: Any = {"command": "/bin/sh"} if field in ("exec", "auth-provider") else "/etc/x"
    text = config(**{where: {field: value}})  # type: ignore[arg-type]
    path = "clusters[1].cluster" if where == "cluster" else "users[0].user"
    for insecure in (False, True):
        with pytest.raises(Refused) as refused:
            parse(text, allow_insecure_tls=insecure)
        assert refused.value.field == f"{path}.{field}"
        assert str(refused.value).startswith(f"{path}.{field} is refused: ")


@pytest.mark.parametrize("cluster, field", [
    ({"insecure-skip-tls-verify": True}, "insecure-skip-tls-verify"),
    ({"server": "http://api.west.example"}, "server"),
    ({"proxy-url": "http://proxy:3128"}, "proxy-url"),
])
def test_weakened_tls_needs_the_flag(cluster: dict[str, Any], field: str) -> None:
    with pytest.raises(Refused, match="--insecure-remote-tls") as refused:
        parse(config(cluster))
    assert refused.value.field == f"clusters[1].cluster.{field}"
    assert len(parse(config(cluster), allow_insecure_tls=True).weakened) == 1


def test_unknown_fields_of_the_cluster_or_user_are_refused_others_ignored() -> None:
    with pytest.raises(Refused, match="unknown field") as refused:
        parse(config(user={"token-from-vault": "x"}))
    assert refused.value.field == "users[0].user.token-from-vault"
    parse(config({"disable-compression": True}, whatever={"a": 1}))


@pytest.mark.parametrize("text, field", [
    ("- a\n- list\n", ""),
    ("{{{", ""),
    (config(**{"current-context": "nope"}), "contexts"),
    (config({"server": "https://user:pw@api.west.example"}), "clusters[1].cluster.server"),
    (config({"server": "ftp://api.west.example"}), "clusters[1].cluster.server"),
    (config({"certificate-authority-data": "bm90IGEgY2VydA=="}),
     "clusters[1].cluster.certificate-authority-data"),
    (config(user={"token": "a\r\nX-Injected: 1"}), "users[0].user.token"),
    (config(user={"client-certificate-data": CA}), "users[0].user.client-key-data"),
])
def test_malformed_is_unusable_and_says_where(text: str, field: str) -> None:
    with pytest.raises(Unusable) as bad:
        parse(text)
    assert bad.value.field == field, bad.value


def test_every_refused_field_is_named_the_first_as_the_field() -> None:
    with pytest.raises(Refused) as refused:
        parse(config({"insecure-skip-tls-verify": True}, {"exec": {}, "tokenFile": "/t"}))
    text = str(refused.value)
    assert refused.value.field == "clusters[1].cluster.insecure-skip-tls-verify"
    assert "users[0].user.exec is refused" in text
    assert "users[0].user.tokenFile is refused" in text


def test_hostile_yaml_is_unusable_quickly() -> None:
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
        for i in range(8))
    doc = laughs + "current-context: w\ncontexts: [{name: w, context: {cluster: w}}]\n" \
        "clusters: [{name: w, cluster: {server: *i}}]\n"
    with pytest.raises(Unusable, match="not a URL: a list"):
        parse(doc)  # 10**9 leaves if walked: never walked, never printed
    with pytest.raises(Unusable, match="nested too deeply"):
        parse("[" * 100_000)
    with pytest.raises(Unusable, match="over"):
        parse("#" * (2 << 20))
