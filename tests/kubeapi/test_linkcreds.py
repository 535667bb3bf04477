"""dnsside/kubeapi/linkcreds.py: what a Link's kubeconfig may hold, decided on the text
alone (the end-to-end view is tests/security/test_hostile_credentials.py)."""

from __future__ import annotations

import base64
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from dnsside.kubeapi.linkcreds import (
    ALWAYS_REFUSED,
    MAX_KUBECONFIG,
    MAX_SECRET_BYTES,
    Refused,
    Unusable,
    parse_credentials,
    yaml_problem,
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
    creds = parse_credentials(config(user={"extensions": [{"name": "x", "extension": {}}]},
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
            parse_credentials(text, allow_insecure_tls=insecure)
        assert refused.value.field == f"{path}.{field}"
        assert str(refused.value).startswith(f"{path}.{field} is refused: ")


@pytest.mark.parametrize("cluster, field", [
    ({"insecure-skip-tls-verify": True}, "insecure-skip-tls-verify"),
    ({"server": "http://api.west.example"}, "server"),
    ({"proxy-url": "http://proxy:3128"}, "proxy-url"),
])
def test_weakened_tls_needs_the_flag(cluster: dict[str, Any], field: str) -> None:
    with pytest.raises(Refused, match="--insecure-remote-tls") as refused:
        parse_credentials(config(cluster))
    assert refused.value.field == f"clusters[1].cluster.{field}"
    assert len(parse_credentials(config(cluster), allow_insecure_tls=True).weakened) == 1


def test_unknown_fields_of_the_cluster_or_user_are_refused_others_ignored() -> None:
    with pytest.raises(Refused, match="unknown field") as refused:
        parse_credentials(config(user={"token-from-vault": "x"}))
    assert refused.value.field == "users[0].user.token-from-vault"
    parse_credentials(config({"disable-compression": True}, whatever={"a": 1}))


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
        parse_credentials(text)
    assert bad.value.field == field, bad.value


def test_every_refused_field_is_named_the_first_as_the_field() -> None:
    with pytest.raises(Refused) as refused:
        parse_credentials(config({"insecure-skip-tls-verify": True},
                                 {"exec": {}, "tokenFile": "/t"}))
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
    with pytest.raises(Refused, match=r"an anchor \(&\) at line 1, column 4"):
        parse_credentials(doc)  # 10**9 leaves if built: refused before one node is
    with pytest.raises(Unusable, match="nest"):
        parse_credentials("[" * 60_000)
    with pytest.raises(Unusable, match="nested deeper than 16 at line 17, column 33"):
        parse_credentials("".join(f"{'  ' * i}k{i}:\n" for i in range(40)) + config())
    with pytest.raises(Unusable, match="over"):
        parse_credentials("#" * (2 << 20))


def merge_bomb(levels: int) -> str:
    """Each level merges the one before twice: 2**levels keys once expanded (PyYAML before
    6.0.4 does: 22 levels, 796 bytes, 10 s and 222 MiB with 6.0.3)."""
    lines = ["l0: &l0 {k0: 0}"] + [f"l{i}: &l{i} {{<<: [*l{i - 1}, *l{i - 1}], k{i}: {i}}}"
                                   for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n" + config()


@pytest.mark.parametrize("text, what, line, column", [
    (config().replace("current-context: west", "current-context: &c west"),
     "an anchor (&)", None, None),
    ("x: &a [1]\ny: *a\n" + config(), "an anchor (&)", 1, 4),
    ("y: *a\n" + config(), "an alias (*)", 1, 4),
    ("base: {q: 1}\nx: {<<: {q: 2}}\n" + config(), "a merge key (<<)", 2, 5),
    ("x: !!merge {q: 2}\n" + config(), "an explicit tag (!)", 1, 4),
    ("x: !!binary aGk=\n" + config(), "an explicit tag (!)", 1, 4),
    ("x: !custom {q: 2}\n" + config(), "an explicit tag (!)", 1, 4),
    (merge_bomb(40), "an anchor (&)", 1, 5),
])
def test_anchors_aliases_merge_keys_and_tags_are_refused_before_anything_is_built(
        text: str, what: str, line: int | None, column: int | None) -> None:
    with pytest.raises(Refused) as refused:
        parse_credentials(text)
    message = str(refused.value)
    assert message.startswith(what), message
    if line is not None:
        assert f" at line {line}, column {column}:" in message, message


TOKEN = "eyJhbGciOiJSUzI1NiJ9.s3cr3t-t0ken-0123456789abcdef"


@pytest.mark.parametrize("broken", [
    f'  user:\n    token: "{TOKEN}\n',  # an unclosed quote on the token line
    f"  user:\n    token: '{TOKEN}\n",
    f"  user:\n    token: {TOKEN}\n\tx: 1\n",  # a tab
    f"  user:\n    token: {TOKEN}\n   - [\n",
    f'  user:\n    token: "{TOKEN}\\q"\n',  # an unknown escape
])
def test_a_syntax_error_names_line_column_and_problem_never_the_text(broken: str) -> None:
    text = "apiVersion: v1\nusers:\n- name: west\n" + broken
    with pytest.raises(Unusable) as bad:
        parse_credentials(text)
    message = str(bad.value)
    assert TOKEN not in message and "s3cr3t" not in message, message
    assert re.fullmatch(r"not YAML: line \d+, column \d+: [^\n]+", message), message
    # PyYAML's own loader (where libyaml is missing) quotes the lines around the error:
    # that text never reaches the message either.
    with pytest.raises(yaml.YAMLError) as raw:
        yaml.load(text, Loader=yaml.SafeLoader)
    assert "s3cr3t" not in yaml_problem(raw.value)
    assert re.fullmatch(r"line \d+, column \d+: [^\n]+", yaml_problem(raw.value))


def test_a_kubeconfig_over_64_kib_is_refused_and_a_real_one_fits() -> None:
    real = config(user={"client-certificate-data": CA, "client-key-data": base64.b64encode(
        b"-----BEGIN PRIVATE KEY-----\n" + b"k" * 2000 + b"\n-----END PRIVATE KEY-----\n"
    ).decode()})
    assert 3000 < len(real) < MAX_KUBECONFIG
    parse_credentials(real)
    padded = real + "#" * (MAX_KUBECONFIG + 1 - len(real))
    assert MAX_KUBECONFIG == 64 * 1024
    with pytest.raises(Unusable, match=f"over {MAX_KUBECONFIG} bytes"):
        parse_credentials(padded)
    # The Secret around it: base64 (4/3) twice (kubectl's last-applied annotation) and
    # metadata fit under the byte cap the Secret is read with.
    assert MAX_SECRET_BYTES > 2 * 4 * MAX_KUBECONFIG // 3 + 16 * 1024


def test_pyyaml_floor_is_a_version_without_the_merge_key_expansion() -> None:
    """PyYAML 6.0-6.0.3 expand merge keys exponentially (yaml/pyyaml#937, fixed in 6.0.4);
    Debian 12 ships 6.0 and Ubuntu 24.04 6.0.1, so the floor must say it."""
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    spec = next(Requirement(r) for r in project["project"]["dependencies"]
                if Requirement(r).name.lower() == "pyyaml")
    assert not any(spec.specifier.contains(v) for v in ("6.0", "6.0.1", "6.0.2", "6.0.3"))
    assert spec.specifier.contains("6.0.4")
