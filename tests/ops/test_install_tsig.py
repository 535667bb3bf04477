"""`--tsig-key-file FILE`: `dnsside install` puts the key in a Secret mounted read-only into
the dnsside container, never in the ConfigMap; install and `dnsside serve` refuse a file
that does not parse, in one line."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import dns.rcode
import pytest
import yaml

from dnsside.dns import tsig
from dnsside.ops import manifests
from testkit.serve import DEMO, demo_server, run_cli
from testkit.tsigkeys import write_key_file
from tests.ops.test_install import cli, container, install, one, validate_strict

CONTAINER_KEY = "/etc/dnsside/tsig/key"


def keygen(tmp_path: Path, name: str = "xfr-key", algorithm: str = "hmac-sha256") -> Path:
    """A key file as tsig-keygen writes it, written in Python (the quick tier needs no
    BIND; test_serve_starts_with_a_tsig_keygen_file uses tsig-keygen itself)."""
    return write_key_file(tmp_path / f"{name}.key", name, algorithm)


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objs, "Deployment")["spec"]["template"]["spec"]
    return spec


def _grants(objs: list[dict[str, Any]]) -> list[Any]:
    return sorted(yaml.safe_dump(o) for o in objs
                  if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"))


@pytest.mark.quick
@pytest.mark.parametrize("mode", manifests.MODES)
def test_the_key_goes_into_a_secret_mounted_read_only(tmp_path: Path, mode: str) -> None:
    path = keygen(tmp_path)
    text = path.read_text()
    secret_b64 = base64.b64encode(tsig.load_key_file(str(path)).secret).decode()
    plain = install("--cluster-name", "east", "--mode", mode)
    objs = install("--cluster-name", "east", "--mode", mode, "--tsig-key-file", str(path))
    ns = one(plain, "ConfigMap")["metadata"]["namespace"]

    secret = one(objs, "Secret")
    assert secret["metadata"]["name"] == "dnsside-tsig"
    assert secret["metadata"]["namespace"] == ns
    assert base64.b64decode(secret["data"]["key"]).decode() == text
    # The ConfigMap names the file in the container; the key is nowhere but the Secret.
    sidecar = {"DNSSIDE_TCP_MAX_CONNECTIONS_PER_CLIENT": "512"} if mode == "sidecar" else {}
    assert one(objs, "ConfigMap")["data"] == {"DNSSIDE_CLUSTER_NAME": "east",
                                              "DNSSIDE_TSIG_KEY_FILE": CONTAINER_KEY, **sidecar}
    others = yaml.safe_dump_all([o for o in objs if o["kind"] != "Secret"])
    assert secret_b64 not in others and secret["data"]["key"] not in others
    assert str(path) not in others

    spec, c = pod_spec(objs), container(objs)
    assert {"name": "dnsside-tsig", "secret": {"secretName": "dnsside-tsig",
                                               "defaultMode": 0o444}} in spec["volumes"]
    assert {"name": "dnsside-tsig", "mountPath": "/etc/dnsside/tsig",
            "readOnly": True} in c["volumeMounts"]
    assert c["envFrom"] == [{"configMapRef": {"name": "dnsside"}}]
    if mode == "sidecar":  # only the dnsside container of CoreDNS's pods sees it
        assert [x["name"] for x in spec["containers"]] == ["dnsside"]
    # Nothing else changes: RBAC (the pod reads a file, not the API), the other objects.
    assert _grants(objs) == _grants(plain)
    assert sorted(o["kind"] for o in objs) == sorted([*(o["kind"] for o in plain), "Secret"])
    # The Secret is applied before the pods that mount it.
    kinds = [o["kind"] for o in objs]
    assert kinds.index("Secret") < kinds.index("Deployment")


@pytest.mark.quick
def test_a_new_key_rolls_the_pods(tmp_path: Path) -> None:
    def annotations(path: Path) -> dict[str, str]:
        objs = install("--cluster-name", "east", "--tsig-key-file", str(path))
        found: dict[str, str] = one(objs, "Deployment")["spec"]["template"]["metadata"][
            "annotations"]
        return found

    first, second = keygen(tmp_path, "xfr-key"), keygen(tmp_path, "other-key")
    a, again, b = annotations(first), annotations(first), annotations(second)
    assert a[manifests.TSIG_HASH] == again[manifests.TSIG_HASH]
    assert a[manifests.TSIG_HASH] != b[manifests.TSIG_HASH]
    assert a[manifests.CONFIG_HASH] == b[manifests.CONFIG_HASH]  # same ConfigMap
    assert manifests.TSIG_HASH not in one(install("--cluster-name", "east"), "Deployment")[
        "spec"]["template"]["metadata"]["annotations"]


@pytest.mark.quick
def test_a_key_file_that_does_not_parse_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text('key "x" {\n\talgorithm hmac-sha1;\n\tsecret "AAAA";\n};\n')
    code, out, err = cli("install", "--cluster-name", "east", "--tsig-key-file", str(bad))
    assert code == 2 and out == ""
    assert err == (f"dnsside: --tsig-key-file: {bad}:2: key 'x': algorithm hmac-sha1: too weak; "
                   "use hmac-sha256, hmac-sha384 or hmac-sha512 (tsig-keygen -a hmac-sha256 "
                   "NAME)\n")
    code, out, err = cli("install", "--cluster-name", "east", "--tsig-key-file",
                         str(tmp_path / "missing"))
    assert code == 2 and out == ""
    assert err == (f"dnsside: --tsig-key-file: {tmp_path / 'missing'}: cannot read the TSIG "
                   "key file: No such file or directory\n")


@pytest.mark.parametrize("mode", manifests.MODES)
def test_output_with_a_key_passes_kubernetes_validate(tmp_path: Path, mode: str) -> None:
    out = validate_strict(install("--cluster-name", "east", "--mode", mode,
                                  "--tsig-key-file", str(keygen(tmp_path))), tmp_path)
    assert "passed for resource secret/dnsside-tsig" in out


# --------------------------------------------------------------------------- serve


def test_serve_refuses_a_key_file_that_does_not_parse(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text('key "xfr" {\n\talgorithm hmac-sha256;\n\tsecret "AAECAwQF-GcI";\n};\n')
    out = run_cli(["serve", "--source", str(DEMO), "--listen", "127.0.0.1:0",
                   "--http-listen", "127.0.0.1:0", "--tsig-key-file", str(bad)])
    assert out.returncode == 2
    assert out.stderr == (f"dnsside: --tsig-key-file: {bad}:3: the secret of key 'xfr' is "
                          "not valid base64\n")


def test_serve_starts_with_a_tsig_keygen_file(tmp_path: Path) -> None:
    path = tmp_path / "xfr.key"
    path.write_text(subprocess.run(["tsig-keygen", "xfr"], check=True, capture_output=True,
                                   text=True).stdout)
    with demo_server("--tsig-key-file", str(path)) as srv:
        assert srv.query("svc-global", "SOA").rcode() == dns.rcode.NOERROR
