"""`dnsside install`, `install coredns` and `install monitoring`, checked with real tools.

* kubernetes-validate (strict) on what `dnsside install` prints, both modes, for every
  Kubernetes version from 1.29 to 1.33, through the real pipe a user types;
* `kubectl kustomize deploy/base` (and the sidecar overlay) against `dnsside install`,
  and deploy/ against scripts/gen-deploy.py (drift fails);
* every `serve` flag baked into the ConfigMap and read back by the serve parser;
* each CoreDNS flavor's object: schema-valid, and its Corefile parsed by
  testkit/corefile.py (a parser of its own, not dnsside's) with the zones and the
  forward address checked;
* the PrometheusRule: a schema of our own, `promtool check rules`, and `promtool test
  rules` firing each alert on series that should fire it and not on healthy ones.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from dnsside import __version__
from dnsside.config import flag
from dnsside.flagvalues import flag_values
from dnsside.ops import commands as ops_commands
from dnsside.ops import deploy, manifests, monitoring
from dnsside.ops.corefile import upstream
from testkit.corefile import CorefileError, block_for, forward_to, parse
from testkit.serve import ROOT, parser_options, run_cli
from testkit.threadedkube import ThreadedKube

K8S_VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33"]
DNSSIDE = [sys.executable, "-m", "dnsside"]
BIN = Path(sys.executable).parent


def cli(*args: str) -> tuple[int, str, str]:
    """`dnsside ARGS` in this process (install only prints): (exit status, stdout, stderr)."""
    from dnsside.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def install(*args: str) -> list[dict[str, Any]]:
    code, out, err = cli("install", *args)
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind]
    return found


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    dep = one(objs, "Deployment")
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "dnsside"]
    return c


# --------------------------------------------------------------------------- validity


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("mode", manifests.MODES)
def test_install_output_passes_kubernetes_validate(mode: str, version: str) -> None:
    """`dnsside install --cluster-name east [--mode sidecar] | kubernetes-validate`."""
    validate = BIN / "kubernetes-validate"
    pipe = (f"{' '.join(DNSSIDE)} install --cluster-name east --mode {mode} | "
            f"{validate} --strict -k {version} -")
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", pipe], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    objs = install("--cluster-name", "east", "--mode", mode)
    passed = re.findall(r"passed for resource (\S+) against version " + re.escape(version),
                        proc.stdout + proc.stderr)
    assert len(passed) == len(objs), proc.stdout + proc.stderr
    assert "WARN" not in proc.stdout + proc.stderr  # no object without a schema


def test_kubernetes_validate_catches_a_broken_object(tmp_path: Path) -> None:
    # Guards the guard: the same pipe fails on a typo in the Deployment.
    objs = install("--cluster-name", "east")
    container(objs)["readinesProbe"] = {}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    proc = subprocess.run([str(BIN / "kubernetes-validate"), "--strict", "-k", "1.33",
                           str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "readinesProbe" in proc.stdout + proc.stderr


def _sorted(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(objs, key=lambda o: (o["kind"], o["metadata"].get("namespace", ""),
                                       o["metadata"]["name"]))


@pytest.mark.parametrize("folder,mode", [("deploy/base", "standalone"),
                                         ("deploy/overlays/sidecar", "sidecar")])
def test_kubectl_kustomize_equals_install(folder: str, mode: str) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not installed (apt-get install kubernetes-client)"
    proc = subprocess.run([kubectl, "kustomize", str(ROOT / folder)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    built = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert _sorted(built) == _sorted(install("--cluster-name", "local", "--mode", mode))


def test_deploy_files_are_generated_from_install() -> None:
    files = deploy.deploy_files()
    for rel, text in files.items():
        path = ROOT / rel
        assert path.exists(), f"{rel} is missing: run scripts/gen-deploy.py"
        assert path.read_text() == text, f"{rel} drifted from dnsside install: run " \
                                         "scripts/gen-deploy.py"
    # Nothing generated earlier and since dropped lingers.
    marker = "Generated by scripts/gen-deploy.py"
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "deploy").rglob("*")
               if p.is_file() and marker in p.read_text(errors="replace")}
    assert on_disk == set(files)


def test_drift_is_detected(tmp_path: Path) -> None:
    # Guards the guard: an edited generated file differs from what the generator writes.
    rel = "deploy/base/deployment.yaml"
    edited = (ROOT / rel).read_text().replace(f"memory: {manifests.MEMORY_LIMIT}", "memory: 1Mi")
    assert edited != deploy.deploy_files()[rel]


# --------------------------------------------------------------------------- contents


@pytest.mark.parametrize("mode", manifests.MODES)
def test_rbac_is_read_only_on_the_three_resources(mode: str) -> None:
    objs = install("--cluster-name", "east", "--mode", mode)
    role = one(objs, "ClusterRole")
    grants = {(g, r, tuple(rule["verbs"])) for rule in role["rules"]
              for g in rule["apiGroups"] for r in rule["resources"]}
    assert grants == {("", "services", ("get", "list", "watch")),
                      ("discovery.k8s.io", "endpointslices", ("get", "list", "watch"))}
    # Links only in the links namespace: a Link written elsewhere is not even readable.
    assert _grants(objs) - {("ClusterRole", "", *g) for g in grants} == {
        ("Role", "linkerd-multicluster", "multicluster.linkerd.io", "links",
         ("get", "list", "watch"))}
    assert one(objs, "RoleBinding")["subjects"] == one(objs, "ClusterRoleBinding")["subjects"]
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    (subject,) = binding["subjects"]
    if mode == "standalone":
        assert subject == {"kind": "ServiceAccount", "name": "dnsside", "namespace": "dnsside"}
    else:
        assert subject == {"kind": "ServiceAccount", "name": "coredns",
                           "namespace": "kube-system"}
    assert not {o["kind"] for o in objs} & {"Secret"}


def _grants(objs: list[dict[str, Any]]) -> set[tuple[str, str, str, str, tuple[str, ...]]]:
    """Every (kind, namespace, API group, resource, verbs) any Role or ClusterRole grants."""
    return {(o["kind"], o["metadata"].get("namespace", ""), g, r, tuple(rule["verbs"]))
            for o in objs if o["kind"] in ("Role", "ClusterRole")
            for rule in o["rules"] for g in rule["apiGroups"] for r in rule["resources"]}


# A sidecar's one DNS client is CoreDNS: its per-client TCP cap is the global one.
SIDECAR_DATA = {"sidecar": {"DNSSIDE_TCP_MAX_CONNECTIONS_PER_CLIENT": "512"}}


@pytest.mark.parametrize("mode", manifests.MODES)
def test_a_sidecars_per_client_tcp_cap_is_the_global_one(mode: str) -> None:
    """Issue 33's per-client TCP cap is for a listener many clients reach; the sidecar's
    only client is its CoreDNS over loopback, which carries every node's TCP."""
    data = one(install("--cluster-name", "east", "--mode", mode, "--tcp-max-connections",
                       "300"), "ConfigMap")["data"]
    wanted = "300" if mode == "sidecar" else None
    assert data.get("DNSSIDE_TCP_MAX_CONNECTIONS_PER_CLIENT") == wanted
    chosen = one(install("--cluster-name", "east", "--mode", mode,
                         "--tcp-max-connections-per-client", "20"), "ConfigMap")["data"]
    assert chosen["DNSSIDE_TCP_MAX_CONNECTIONS_PER_CLIENT"] == "20"


@pytest.mark.parametrize("mode", manifests.MODES)
def test_flat_network_reads_secrets_in_the_links_namespace_only(mode: str) -> None:
    plain = install("--cluster-name", "east", "--mode", mode)
    objs = install("--cluster-name", "east", "--mode", mode, "--flat-network")
    assert one(objs, "ConfigMap")["data"] == {"DNSSIDE_CLUSTER_NAME": "east",
                                              "DNSSIDE_FLAT_NETWORK": "true",
                                              **SIDECAR_DATA.get(mode, {})}
    # What the ClusterRole grants is unchanged; only a namespaced Role is added, get only
    # (dnsside reads each Link's Secret by name and never lists the others there).
    assert _grants(objs) - _grants(plain) == {
        ("Role", "linkerd-multicluster", "", "secrets", ("get",))}
    role, binding = one(objs, "Role"), one(objs, "RoleBinding")
    assert binding["metadata"]["namespace"] == "linkerd-multicluster"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    # Bound to the identity the dnsside container runs as, as the ClusterRole is.
    assert binding["subjects"] == one(objs, "ClusterRoleBinding")["subjects"]
    elsewhere = install("--cluster-name", "east", "--mode", mode, "--flat-network",
                        "--links-namespace", "mc")
    assert {o["metadata"]["namespace"] for o in elsewhere
            if o["kind"] in ("Role", "RoleBinding")} == {"mc"}


def validate_strict(objs: list[dict[str, Any]], tmp_path: Path) -> str:
    """kubernetes-validate --strict on ``objs`` at the newest version: every object
    passes; its output."""
    path = tmp_path / "out.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    proc = subprocess.run([str(BIN / "kubernetes-validate"), "--strict", "-k",
                           K8S_VERSIONS[-1], str(path)], capture_output=True, text=True,
                          timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert len(re.findall(r"passed for resource (\S+)", out)) == len(objs), out
    return out


@pytest.mark.parametrize("mode", manifests.MODES)
def test_flat_network_output_passes_kubernetes_validate(mode: str, tmp_path: Path) -> None:
    out = validate_strict(install("--cluster-name", "east", "--mode", mode, "--flat-network"),
                          tmp_path)
    assert "passed for resource role/" in out and "passed for resource rolebinding/" in out


def test_without_flat_network_no_secret_is_readable_anywhere() -> None:
    outputs = [install("--cluster-name", "east", "--mode", mode) for mode in manifests.MODES]
    outputs += [[d for d in yaml.safe_load_all(text) if d]
                for rel, text in deploy.deploy_files().items() if rel.endswith(".yaml")]
    for objs in outputs:
        assert not {g for g in _grants(objs) if g[3] in ("secrets", "*")}
        assert {g[3] for g in _grants(objs) if g[0] == "Role"} <= {"links"}
    assert "DNSSIDE_FLAT_NETWORK" not in (ROOT / "deploy/base/configmap.yaml").read_text()
    objs = install("--cluster-name", "east", "--links-namespace", "mc")
    assert {o["metadata"]["namespace"] for o in objs if o["kind"] in ("Role", "RoleBinding")
            } == {"mc"}
    assert one(objs, "ConfigMap")["data"]["DNSSIDE_LINKS_NAMESPACE"] == "mc"
    code, _, err = cli("install", "--cluster-name", "east", "--flat-network",
                       "--links-namespace", "Not_A_Namespace")
    assert code == 2 and "--links-namespace 'Not_A_Namespace'" in err


def test_options_land_where_they_belong() -> None:
    objs = install("--cluster-name", "west", "--namespace", "dns", "--image", "reg/x:1",
                   "--replicas", "3", "--memory-limit", "1Gi")
    assert one(objs, "Namespace")["metadata"]["name"] == "dns"
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] not in
            ("Namespace", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
            } == {"dns"}
    assert one(objs, "ClusterRoleBinding")["subjects"][0]["namespace"] == "dns"
    assert one(objs, "ConfigMap")["data"] == {"DNSSIDE_CLUSTER_NAME": "west"}
    dep = one(objs, "Deployment")
    assert dep["spec"]["replicas"] == 3
    assert container(objs)["image"] == "reg/x:1"
    assert container(objs)["resources"]["limits"]["memory"] == "1Gi"
    single = install("--cluster-name", "east", "--replicas", "1")
    assert "PodDisruptionBudget" not in {o["kind"] for o in single}  # would block drains
    system = install("--cluster-name", "east", "--namespace", "kube-system")
    assert "Namespace" not in {o["kind"] for o in system}  # never relabel kube-system


def test_install_errors_name_the_option() -> None:
    code, _, err = cli("install")
    assert code == 2 and "--cluster-name is required" in err
    code, _, err = cli("install", "--cluster-name", "not a label")
    assert code == 2 and "--cluster-name" in err
    code, _, err = cli("install", "--cluster-name", "east", "--ttl", "soon")
    assert code == 2 and "--ttl" in err
    code, _, err = cli("install", "--cluster-name", "local")
    assert code == 0 and "warning" in err


# Values install checks as serve does (dnsside.flagvalues): a name where a name will do.
SAMPLE_TEXTS = {"--explain-from": ("10.0.0.0/8", "192.0.2.0/24"),
                "--allow-transfer": ("10.0.0.0/8", "192.0.2.0/24"),
                "--notify": ("10.0.0.9:53", "192.0.2.9:53"),
                "--ns-address": ("10.0.0.5", "192.0.2.5"),
                "--watch-namespace": ("default", "shared"),
                "--flat-network-namespaces": ("default", "shared"),
                "--flat-network-index-share": ("0.25",)}  # a fraction: at most 1


def _sample(option: str, action: argparse.Action) -> tuple[list[str], Any]:
    """Install command-line words for one serve flag, and the value serve reads back."""
    if isinstance(action, argparse._StoreTrueAction):
        return [option], True
    convert = action.type if callable(action.type) else str
    if action.choices:
        texts = [str(c) for c in action.choices][-1:]
    elif convert is int:
        texts = ["7"]
    elif option in SAMPLE_TEXTS:
        texts = list(SAMPLE_TEXTS[option])
    elif convert is float:
        texts = ["2.5"]
    else:
        texts = list(SAMPLE_TEXTS.get(option, ("x.example.", "second")))
    if isinstance(action, argparse._AppendAction):
        texts = [texts[0], "3" if convert in (int, float) else texts[-1]]
        words = [w for t in texts for w in (option, t)]
        return words, [convert(t) for t in texts]
    return [option, texts[0]], convert(texts[0])


def test_every_serve_flag_is_baked_and_read_back(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """Generic over `dnsside serve`'s parser: a flag added there works here unchanged."""
    from dnsside.cli import build_parser, serve_parser

    flags = ops_commands.bakeable_flags()
    serve_actions = parser_options(serve_parser())
    assert {f.serve_flag for f in flags} >= {"--ttl", "--zone", "--namespace", "--lameduck",
                                             "--publish-not-ready", "--srv-priority"}
    key_file = tmp_path / "tsig.key"
    key_file.write_text(subprocess.run(["tsig-keygen", "xfr"], check=True, capture_output=True,
                                       text=True).stdout)
    for f in flags:
        action = serve_actions[f.serve_flag]
        words, expected = _sample(f.option, action)
        if f.serve_flag == "--tsig-key-file":  # a file read at install; the pod reads a copy
            words, expected = [f.option, str(key_file)], manifests.TSIG_KEY_PATH
        if f.serve_flag == "--links-namespace":  # a namespace name: no dot
            words, expected = [f.option, "mc"], "mc"
        # What a linked cluster's connection takes means something only with --flat-network.
        needs = (["--flat-network"] if f.serve_flag.startswith(("--flat-network-",
                                                                 "--insecure-remote-"))
                 else [])
        objs = install("--cluster-name", "east", *needs, *words)
        data = one(objs, "ConfigMap")["data"]
        assert set(data) == {"DNSSIDE_CLUSTER_NAME", f.env,
                             *(flag(n).env for n in needs)}, f.option
        for key in list(os.environ):
            if key.startswith("DNSSIDE_"):
                monkeypatch.delenv(key)
        for key, value in data.items():
            monkeypatch.setenv(key, value)
        args = build_parser().parse_args(container(objs)["args"])
        values = flag_values(args.command, vars(args), data)
        assert values[action.dest] == expected, f.option
        assert values["cluster_name"] == "east"


@pytest.mark.parametrize("mode", manifests.MODES)
def test_grace_period_covers_the_lame_duck(mode: str) -> None:
    for lameduck in (None, 20.0, 40.0):
        extra = ["--lameduck", str(lameduck)] if lameduck is not None else []
        objs = install("--cluster-name", "east", "--mode", mode, *extra)
        pod = one(objs, "Deployment")["spec"]["template"]["spec"]
        grace = pod.get("terminationGracePeriodSeconds", manifests.COREDNS_DEFAULT_GRACE)
        needed = (lameduck if lameduck is not None else 5.0) + manifests.TCP_CLOSE_GRACE
        assert grace >= needed + 1, (mode, lameduck, grace)
        if mode == "standalone":
            assert grace <= needed + 5  # sized, not a blanket 30 s
        else:
            # CoreDNS's own value is never shortened.
            assert "terminationGracePeriodSeconds" not in pod or grace > 30


def test_standalone_listens_on_both_families_and_publishes_pod_ip() -> None:
    objs = install("--cluster-name", "east")
    args = container(objs)["args"]
    assert args[args.index("--listen") + 1] == "[::]:53"
    assert args[args.index("--http-listen") + 1] == "[::]:9153"
    assert one(objs, "Service")["spec"]["ipFamilyPolicy"] == "PreferDualStack"
    for mode in manifests.MODES:
        env = container(install("--cluster-name", "east", "--mode", mode))["env"]
        assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} \
            in env


def test_memory_limit_matches_the_docs_sizing_table() -> None:
    text = (ROOT / "docs" / "operating.md").read_text()
    section = text[text.index("## Sizing"):]
    rows = re.findall(r"^\| ([\d,]+) \| (\d+) MB \| (\d+) MB \| (\d+)Mi \|", section, re.M)
    assert len(rows) >= 3, "docs/operating.md's sizing table has a row per size"
    by_members = {int(m.replace(",", "")): (int(rss), int(peak), int(limit))
                  for m, rss, peak, limit in rows}
    assert 100_000 in by_members
    for _rss, peak, limit in by_members.values():
        assert limit * 2**20 >= peak * 10**6 * 1.2, "each suggested limit leaves 20% headroom"
    # ... with --mcs-zone too, when the table has that column.
    for limit, mcs_peak in re.findall(r"^\| [\d,]+ \| \d+ MB \| \d+ MB \| (\d+)Mi \| "
                                      r"\d+ MB, (\d+) MB \|", section, re.M):
        assert int(limit) * 2**20 >= int(mcs_peak) * 10**6 * 1.2
    default = container(install("--cluster-name", "east"))["resources"]["limits"]["memory"]
    assert default == f"{by_members[100_000][2]}Mi"


def test_config_hash_rolls_pods_when_settings_change() -> None:
    a = one(install("--cluster-name", "east"), "Deployment")
    b = one(install("--cluster-name", "east", "--ttl", "9"), "Deployment")
    key = manifests.CONFIG_HASH
    assert a["spec"]["template"]["metadata"]["annotations"][key] != \
        b["spec"]["template"]["metadata"]["annotations"][key]


# --------------------------------------------------------------------------- CoreDNS


def coredns(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DNSSIDE, "install", "coredns", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, input=stdin)


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def valid(obj: dict[str, Any]) -> None:
    for version in ("1.29", "1.33"):
        assert kubernetes_validate.validate(obj, version, strict=True) == version


CASES = [
    # flavor, mode, address given, expected upstream
    ("kubeadm", "standalone", "10.96.0.53", "10.96.0.53:53"),
    ("kubeadm", "sidecar", None, "127.0.0.1:5353"),
    ("k3s", "standalone", "10.43.0.53:5353", "10.43.0.53:5353"),
    ("k3s", "sidecar", None, "127.0.0.1:5353"),
    ("aks", "standalone", "fd00::53", "[fd00::53]:53"),
    ("eks", "standalone", "172.20.0.53", "172.20.0.53:53"),
    ("eks", "sidecar", None, "127.0.0.1:5353"),
    ("nodelocaldns", "standalone", "10.96.0.53", "10.96.0.53:53"),
    ("nodelocaldns", "sidecar", None, "__PILLAR__CLUSTER__DNS__"),
]


def live_nodelocaldns(local: str = "169.254.20.10", server: str = "10.96.0.10") -> str:
    """node-local-dns's ConfigMap as the upstream install leaves it: the template with
    its install-time words replaced by sed (kubernetes.io's nodelocaldns task)."""
    text = upstream("nodelocaldns", "cluster.local").replace(
        "__PILLAR__LOCAL__DNS__", local).replace("__PILLAR__DNS__SERVER__", server)
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "node-local-dns", "namespace": "kube-system"},
                           "data": {"Corefile": text}})


def corefile_of(flavor: str, out: str) -> tuple[str, dict[str, Any] | None]:
    if flavor == "eks":
        values = json.loads(out)
        assert set(values) == {"corefile"}
        return values["corefile"], None
    (cm,) = docs(out)
    valid(cm)
    if flavor in ("k3s", "aks"):
        assert cm["metadata"]["name"] == "coredns-custom"
        assert list(cm["data"]) == ["dnsside.server"]  # k3s/AKS import *.server only
        return cm["data"]["dnsside.server"], cm
    assert cm["metadata"]["name"] == ("node-local-dns" if flavor == "nodelocaldns"
                                      else "coredns")
    return cm["data"]["Corefile"], cm


@pytest.mark.parametrize("flavor,mode,address,upstream", CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_corefile_flavors_parse_and_forward(flavor: str, mode: str, address: str | None,
                                           upstream: str) -> None:
    args = ["--flavor", flavor, "--mode", mode, "--mcs-zone", "clusterset.local."]
    if address:
        args += ["--address", address]
    if flavor == "nodelocaldns":  # needs the live object
        args += ["--from", "-"]
    out = coredns(*args, stdin=live_nodelocaldns() if flavor == "nodelocaldns" else None)
    assert out.returncode == 0, out.stderr
    text, _ = corefile_of(flavor, out.stdout)
    blocks = parse(text)
    ours = block_for(blocks, "svc-global.")
    assert block_for(blocks, "clusterset.local.") is ours  # the MCS zone goes there too
    assert sorted(ours.zones) == [("clusterset.local.", 53), ("svc-global.", 53)]
    assert forward_to(ours) == [upstream]
    assert ours.directive("bufsize")[0].args == ["1232"]
    assert ours.directive("prometheus")[0].args == [
        ":9253" if flavor == "nodelocaldns" else ":9153"]
    assert ours.directive("cache")[0].args == ["5"]
    if flavor in ("kubeadm", "eks", "nodelocaldns"):
        assert len(blocks) >= 2  # the distribution's own blocks are kept
        cluster = block_for(blocks, "cluster.local." if flavor == "nodelocaldns" else ".")
        assert cluster.directive("forward")
    if flavor == "nodelocaldns":
        # Listens where node-local-dns's other blocks do.
        assert ours.directive("bind")[0].args == ["169.254.20.10", "10.96.0.10"]
        if mode == "sidecar":
            (fwd,) = ours.directive("forward")
            assert [d.name for d in fwd.block] == ["force_tcp"]


def test_corefile_parser_rejects_broken_text() -> None:
    for bad in ("svc-global:53 {\n forward . 1.2.3.4\n", "}\n", "svc-global:53\n",
                "{ errors }\n"):
        with pytest.raises(CorefileError):
            parse(bad)


def test_gke_stub_domains() -> None:
    out = coredns("--flavor", "gke", "--address", "10.0.0.53", "--mcs-zone", "clusterset.local")
    assert out.returncode == 0, out.stderr
    (cm,) = docs(out.stdout)
    valid(cm)
    assert cm["metadata"] == {"name": "kube-dns", "namespace": "kube-system"}
    stubs = json.loads(cm["data"]["stubDomains"])
    # kube-dns's format: domain without trailing dot -> ["IP:port"] (IPv4 only).
    assert stubs == {"svc-global": ["10.0.0.53:53"], "clusterset.local": ["10.0.0.53:53"]}
    existing = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                               "data": {"stubDomains": '{"acme.local": ["1.2.3.4"]}',
                                        "upstreamNameservers": '["8.8.8.8"]'}})
    merged = coredns("--flavor", "gke", "--address", "10.0.0.53", "--from", "-", stdin=existing)
    (cm,) = docs(merged.stdout)
    assert json.loads(cm["data"]["stubDomains"])["acme.local"] == ["1.2.3.4"]
    assert cm["data"]["upstreamNameservers"] == '["8.8.8.8"]'
    v6 = coredns("--flavor", "gke", "--address", "fd00::53")
    assert v6.returncode == 2 and "IPv4" in v6.stderr


OPENSHIFT_DNS_SCHEMA = {  # operator.openshift.io/v1 DNS, the parts written here
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "operator.openshift.io/v1"},
        "kind": {"const": "DNS"},
        "metadata": {"type": "object", "properties": {"name": {"const": "default"}}},
        "spec": {"type": "object", "properties": {"servers": {"type": "array", "items": {
            "type": "object", "required": ["name", "zones", "forwardPlugin"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$"},
                "zones": {"type": "array", "minItems": 1, "items": {
                    "type": "string", "pattern": r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"}},
                "forwardPlugin": {"type": "object", "additionalProperties": False,
                                  "required": ["upstreams"], "properties": {
                                      "policy": {"enum": ["Random", "RoundRobin",
                                                          "Sequential"]},
                                      "upstreams": {"type": "array", "maxItems": 15,
                                                    "minItems": 1,
                                                    "items": {"type": "string"}}}},
            }}}}},
    },
}


def test_openshift_dns_operator_servers() -> None:
    existing = yaml.safe_dump({"apiVersion": "operator.openshift.io/v1", "kind": "DNS",
                               "metadata": {"name": "default"},
                               "spec": {"logLevel": "Normal", "servers": [
                                   {"name": "corp", "zones": ["corp.example"],
                                    "forwardPlugin": {"upstreams": ["10.1.1.1"]}}]}})
    out = coredns("--flavor", "openshift", "--address", "172.30.0.53", "--from", "-",
                  stdin=existing)
    assert out.returncode == 0, out.stderr
    (dns,) = docs(out.stdout)
    jsonschema.validate(dns, OPENSHIFT_DNS_SCHEMA)
    # Only the atomic list is applied: the rest of spec stays its owners'.
    assert set(dns["spec"]) == {"servers"}
    names = [s["name"] for s in dns["spec"]["servers"]]
    assert names == ["corp", "dnsside"]
    ours = dns["spec"]["servers"][1]
    assert ours["zones"] == ["svc-global"]
    assert ours["forwardPlugin"]["upstreams"] == ["172.30.0.53:53"]
    again = coredns("--flavor", "openshift", "--address", "172.30.0.53", "--from", "-",
                    stdin=out.stdout)
    assert docs(again.stdout) == [dns]  # idempotent


def test_patching_a_live_corefile_keeps_it_and_is_idempotent() -> None:
    live = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": "kube-system",
                         "labels": {"k8s-app": "kube-dns"}},
            "data": {"Corefile": ".:53 {\n    errors\n    kubernetes cluster.local\n"
                                 "    forward . /etc/resolv.conf\n}\n"
                                 "corp.example:53 {\n    forward . 10.1.1.1\n}\n"}}
    first = coredns("--flavor", "kubeadm", "--address", "10.96.0.53", "--from", "-",
                    stdin=yaml.safe_dump(live))
    assert first.returncode == 0, first.stderr
    (cm,) = docs(first.stdout)
    assert cm["metadata"]["labels"] == {"k8s-app": "kube-dns"}
    blocks = parse(cm["data"]["Corefile"])
    assert [b.keys for b in blocks] == [[".:53"], ["corp.example:53"], ["svc-global:53"]]
    assert forward_to(block_for(blocks, "corp.example.")) == ["10.1.1.1"]
    # Re-running with another address replaces dnsside's block, never adds a second.
    second = coredns("--flavor", "kubeadm", "--address", "10.96.0.54", "--from", "-",
                     stdin=first.stdout)
    (cm2,) = docs(second.stdout)
    blocks2 = parse(cm2["data"]["Corefile"])
    assert len(blocks2) == 3
    assert forward_to(block_for(blocks2, "svc-global.")) == ["10.96.0.54:53"]
    third = coredns("--flavor", "kubeadm", "--address", "10.96.0.54", "--from", "-",
                    stdin=second.stdout)
    assert third.stdout == second.stdout


def test_nodelocaldns_copies_the_live_bind_line() -> None:
    out = coredns("--flavor", "nodelocaldns", "--address", "10.96.0.53", "--from", "-",
                  stdin=live_nodelocaldns())
    assert out.returncode == 0, out.stderr
    (patched,) = docs(out.stdout)
    blocks = parse(patched["data"]["Corefile"])
    assert len(blocks) == 5
    ours = block_for(blocks, "svc-global.")
    assert ours.directive("bind")[0].args == ["169.254.20.10", "10.96.0.10"]
    assert forward_to(ours) == ["10.96.0.53:53"]


def test_flavor_errors() -> None:
    for flavor in ("gke", "openshift", "aks"):
        out = coredns("--flavor", flavor, "--mode", "sidecar")
        assert out.returncode == 2 and "standalone" in out.stderr, flavor
    name = coredns("--flavor", "k3s", "--address", "dnsside.dnsside.svc")
    assert name.returncode == 2 and "IP addresses" in name.stderr
    wrong = coredns("--flavor", "kubeadm", "--address", "10.0.0.1", "--from", "-",
                    stdin="kind: Secret\n")
    assert wrong.returncode == 2 and "ConfigMap" in wrong.stderr


def test_block_only_and_the_snippets_in_deploy() -> None:
    out = coredns("--flavor", "kubeadm", "--mode", "sidecar", "--block-only")
    assert out.returncode == 0, out.stderr
    (block,) = parse(out.stdout)
    assert forward_to(block) == ["127.0.0.1:5353"]
    (service,) = parse((ROOT / "deploy/coredns/Corefile.service.snippet").read_text())
    assert forward_to(service) == ["<dnsside-service-ClusterIP>:53"]


def test_standalone_address_is_read_from_the_cluster(tmp_path: Path) -> None:
    kube = ThreadedKube(tmp_path)
    try:
        # An install with --dns-port 5353: the Service's own port is used.
        kube.call(kube.kube.apply, {
            "kind": "Service", "metadata": {"name": "dnsside", "namespace": "dnsside"},
            "spec": {"clusterIP": "10.96.7.7", "clusterIPs": ["10.96.7.7", "fd00::7"],
                     "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}]}})
        out = coredns("--flavor", "k3s", "--kubeconfig", kube.kubeconfig)
        assert out.returncode == 0, out.stderr
        text, _ = corefile_of("k3s", out.stdout)
        assert forward_to(block_for(parse(text), "svc-global.")) == ["10.96.7.7:5353"]
        missing = coredns("--flavor", "k3s", "--kubeconfig", kube.kubeconfig,
                          "--namespace", "elsewhere")
        assert missing.returncode == 2 and "--address" in missing.stderr
    finally:
        kube.close()


# --------------------------------------------------------------------------- monitoring

PROMETHEUS_RULE_SCHEMA = {  # monitoring.coreos.com/v1 PrometheusRule, as prometheus-operator
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {"type": "object", "additionalProperties": False, "properties": {
            "groups": {"type": "array", "items": {
                "type": "object", "required": ["name", "rules"], "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string"},
                    "rules": {"type": "array", "items": {
                        "type": "object", "required": ["alert", "expr"],
                        "additionalProperties": False,
                        "properties": {
                            "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                            "expr": {"type": "string", "minLength": 1},
                            "for": {"type": "string",
                                    "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?"
                                               "(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?)$"},
                            "labels": {"type": "object",
                                       "additionalProperties": {"type": "string"}},
                            "annotations": {"type": "object",
                                            "additionalProperties": {"type": "string"}},
                        }}},
                }}}}},
    },
}
POD_MONITOR_SCHEMA = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PodMonitor"},
        "spec": {"type": "object", "required": ["selector", "podMetricsEndpoints"],
                 "additionalProperties": False, "properties": {
                     "selector": {"type": "object", "required": ["matchLabels"]},
                     "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": {
                         "type": "object", "additionalProperties": False,
                         "required": ["port"],
                         "properties": {"port": {"type": "string"},
                                        "path": {"type": "string"}}}}}},
    },
}


def monitoring_objects(*args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    code, out, err = cli("install", "monitoring", *args)
    assert code == 0, err
    objs = docs(out)
    return one(objs, "PodMonitor"), one(objs, "PrometheusRule")


def test_monitoring_objects_match_their_schemas_and_the_pods() -> None:
    for mode in manifests.MODES:
        pm, rule = monitoring_objects("--mode", mode, "--label", "release=prom")
        jsonschema.validate(pm, POD_MONITOR_SCHEMA)
        jsonschema.validate(rule, PROMETHEUS_RULE_SCHEMA)
        assert rule["metadata"]["labels"]["release"] == "prom"
        objs = install("--cluster-name", "east", "--mode", mode)
        c = container(objs)
        port = pm["spec"]["podMetricsEndpoints"][0]["port"]
        assert port in {p["name"] for p in c["ports"]}
        if mode == "standalone":
            labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
            assert pm["metadata"]["namespace"] == "dnsside"
        else:
            labels = {"k8s-app": "kube-dns"}  # CoreDNS's pods
            assert pm["metadata"]["namespace"] == "kube-system"
        assert all(labels.get(k) == v for k, v in pm["spec"]["selector"]["matchLabels"].items())


def test_schema_catches_a_broken_rule() -> None:
    _, rule = monitoring_objects()
    rule["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rule, PROMETHEUS_RULE_SCHEMA)


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is not installed (apt-get install prometheus)"
    return path


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    _, rule = monitoring_objects()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    proc = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(monitoring.ALERTS)} rules found" in proc.stdout
    broken = tmp_path / "broken.yaml"
    spec = rule["spec"]
    spec["groups"][0]["rules"][0]["expr"] = "max by (pod (dnsside_source_synced)"
    broken.write_text(yaml.safe_dump(spec))
    bad = subprocess.run([promtool(), "check", "rules", str(broken)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0  # the guard works: PromQL syntax is really checked


# Per alert: series that must fire it by eval_time, labels it fires with, and healthy series
# that must not fire it.
L = 'namespace="dnsside",pod="dnsside-0"'
FIRING = {
    "DnssideNotSynced": ([(f'dnsside_source_synced{{{L},source="kube"}}', "0x20")], "7m", {}),
    "DnssideWatchRestartsClimbing": (
        [(f'dnsside_watch_restarts_total{{{L},resource="services",reason="timeout"}}',
          "0+1x60")], "35m", {"resource": "services"}),
    "DnssideGatewayProbeFailing": (
        [(f'dnsside_gateway_probe_state{{{L},cluster="north",state="failing"}}', "1x20"),
         (f'dnsside_gateway_probe_state{{{L},cluster="north",state="alive"}}', "0x20")],
        "3m", {"cluster": "north"}),
    "DnssideOrphanedMirrors": ([(f'dnsside_orphaned_mirrors{{{L},cluster="old"}}', "4x60")],
                               "35m", {"cluster": "old"}),
    "DnssideLinkWatchDown": ([(f"dnsside_links_readable{{{L}}}", "1x30"),
                              (f"dnsside_links_watch_up{{{L}}}", "1x5 0x25")], "20m", {}),
    "DnssideServfail": ([
        (f'dnsside_queries_total{{{L},qtype="A",rcode="SERVFAIL",transport="udp"}}', "0+10x30"),
        (f'dnsside_queries_total{{{L},qtype="A",rcode="NOERROR",transport="udp"}}', "0+100x30"),
    ], "15m", {}),
    "DnssideLocalitySpilled": (
        [(f'dnsside_locality_spilled_services{{{L},reason="no-ready-local-member"}}',
          "0x3 1x20"),
         (f'dnsside_locality_spilled_services{{{L},reason="no-local-service"}}', "2x23")],
        "12m", {}),
    "DnssideLocalityAnnotationUnknown": (
        [(f"dnsside_locality_unknown_annotations{{{L}}}", "0x3 1x20")], "20m", {}),
    "DnssideRemoteCredentialsInvalid": (
        [(f'dnsside_remote_credentials_valid{{{L},cluster="west"}}', "1x5 0x20"),
         (f'dnsside_remote_synced{{{L},cluster="west"}}', "1x5 0x20")],
        "10m", {"cluster": "west"}),
    "DnssideRemoteNotSynced": (
        [(f'dnsside_remote_credentials_valid{{{L},cluster="west"}}', "1x30"),
         (f'dnsside_remote_synced{{{L},cluster="west"}}', "1x5 0x25")],
        "20m", {"cluster": "west"}),
    "DnssideRemoteThrottled": (
        [(f'dnsside_remote_throttled{{{L},cluster="north"}}', "0x5 1x25")], "25m",
        {"cluster": "north"}),
}
# Series on which one alert fires and another, which would say the same twice, must not:
# (series, eval_time, the alert that fires with its extra labels, the alert that stays silent).
EXCLUSIVE = [
    # Rejected credentials also leave the cluster unsynced: only the credentials alert.
    ([(f'dnsside_remote_credentials_valid{{{L},cluster="west"}}', "0x60"),
      (f'dnsside_remote_synced{{{L},cluster="west"}}', "0x60")],
     "59m", ("DnssideRemoteCredentialsInvalid", {"cluster": "west"}),
     "DnssideRemoteNotSynced"),
]
HEALTHY = [
    (f'dnsside_source_synced{{{L},source="kube"}}', "1x60"),
    (f'dnsside_watch_restarts_total{{{L},resource="services",reason="closed"}}', "0+1x60"),
    (f'dnsside_gateway_probe_state{{{L},cluster="north",state="alive"}}', "1x60"),
    (f'dnsside_gateway_probe_state{{{L},cluster="north",state="failing"}}', "0x60"),
    (f'dnsside_gateway_probe_state{{{L},cluster="west",state="never-answered"}}', "1x60"),
    (f'dnsside_orphaned_mirrors{{{L},cluster="old"}}', "0x60"),
    (f"dnsside_links_readable{{{L}}}", "1x60"),
    (f"dnsside_links_watch_up{{{L}}}", "1x20 0x5 1x35"),  # a short outage: no alert
    (f'dnsside_queries_total{{{L},qtype="A",rcode="NOERROR",transport="udp"}}', "0+100x60"),
    (f'dnsside_queries_total{{{L},qtype="A",rcode="SERVFAIL",transport="udp"}}', "0x60"),
    # --locality local-first: services that run elsewhere only, and a local rollout that
    # left no member ready for two minutes: no alert.
    (f'dnsside_locality_spilled_services{{{L},reason="no-local-service"}}', "3x60"),
    (f'dnsside_locality_spilled_services{{{L},reason="no-ready-local-member"}}',
     "0x20 1x2 0x38"),
    (f"dnsside_locality_unknown_annotations{{{L}}}", "0x60"),
    # --flat-network: unsynced until the first list, then a short outage of the remote API;
    # and a one-minute credentials failure (a Secret being rotated) on another cluster.
    (f'dnsside_remote_credentials_valid{{{L},cluster="west"}}', "1x60"),
    (f'dnsside_remote_synced{{{L},cluster="west"}}', "0x2 1x20 0x5 1x32"),
    (f'dnsside_remote_credentials_valid{{{L},cluster="north"}}', "1x20 0x1 1x38"),
    (f'dnsside_remote_synced{{{L},cluster="north"}}', "1x20 0x1 1x38"),
    # A burst of churn throttled for a few minutes: no alert.
    (f'dnsside_remote_throttled{{{L},cluster="north"}}', "0x20 1x5 0x35"),
]


def _render(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)


def test_promtool_fires_each_alert_on_its_symptom_only(tmp_path: Path) -> None:
    _, rule = monitoring_objects()
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert set(rules) == set(FIRING) == {a.name for a in monitoring.ALERTS}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    tests = []
    for name, (series, at, extra) in FIRING.items():
        labels = {"namespace": "dnsside", "pod": "dnsside-0", **extra}
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "alert_rule_test": [{
                "eval_time": at, "alertname": name,
                "exp_alerts": [{
                    "exp_labels": {**labels, "severity": rules[name]["labels"]["severity"]},
                    "exp_annotations": {k: _render(v, labels)
                                        for k, v in rules[name]["annotations"].items()},
                }],
            }],
        })
    for series, at, (name, extra), silent in EXCLUSIVE:
        labels = {"namespace": "dnsside", "pod": "dnsside-0", **extra}
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "alert_rule_test": [
                {"eval_time": at, "alertname": name, "exp_alerts": [{
                    "exp_labels": {**labels, "severity": rules[name]["labels"]["severity"]},
                    "exp_annotations": {k: _render(v, labels)
                                        for k, v in rules[name]["annotations"].items()}}]},
                {"eval_time": at, "alertname": silent, "exp_alerts": []},
            ],
        })
    tests.append({
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in HEALTHY],
        "alert_rule_test": [{"eval_time": "59m", "alertname": name, "exp_alerts": []}
                            for name in FIRING],
    })
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}))
    proc = subprocess.run([promtool(), "test", "rules", "tests.yaml"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_each_alert_has_a_runbook_line_in_deploy_readme() -> None:
    text = (ROOT / "deploy" / "README.md").read_text()
    section = text[text.index("## Alerts"):]
    for alert in monitoring.ALERTS:
        m = re.search(rf"^\| `{alert.name}` \| ([^|]+) \| (.+) \|$", section, re.M)
        assert m, f"deploy/README.md has no runbook row for {alert.name}"
        assert len(m.group(2).strip()) > 20


# --------------------------------------------------------------------------- packaging


def test_version_flag() -> None:
    out = run_cli(["--version"])
    assert out.returncode == 0 and out.stdout.strip() == f"dnsside {__version__}"
    assert importlib.metadata.version("dnsside") == __version__


def test_license_is_an_spdx_expression() -> None:
    # The installed metadata comes from pyproject.toml through setuptools >= 77 (PEP 639):
    # no deprecated `license = {text = ...}` table, so no warning at install.
    meta = importlib.metadata.metadata("dnsside")
    assert meta["License-Expression"] == "Apache-2.0"
    text = (ROOT / "pyproject.toml").read_text()
    assert 'license = "Apache-2.0"' in text
    assert re.search(r'requires = \["setuptools>=(\d+)"\]', text).group(1) >= "77"  # type: ignore[union-attr]


def test_install_says_which_serve_flags_it_does_not_bake() -> None:
    """The layout sets where dnsside listens and what it reads: each such flag is refused
    with the reason, in one line, not with argparse's confusion about subcommands."""
    for given, reason in ((("--listen", "0.0.0.0:53"), "sets where dnsside answers"),
                          (("--http-listen", ":9153"), "PodMonitor"),
                          (("--source", "dump.yaml"), "a file source is for"),
                          (("--kubeconfig", "/root/.kube/config"), "ServiceAccount")):
        code, out, err = cli("install", "--cluster-name", "east", *given)
        assert code == 2 and not out, (given, out)
        assert err.count("\n") == 1 and given[0] in err and reason in err, err
    code, _, err = cli("install", "--cluster-name", "East_1")
    assert code == 2 and "did you mean 'east-1'" in err, err
