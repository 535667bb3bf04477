"""Offline checks of the container recipe and everything under deploy/.

Nothing here talks to a cluster or a Docker engine, and kubectl/kustomize are
not needed: a tiny loader reads each kustomization.yaml's `resources:` list
(the only kustomize feature the manifests use; any other field makes the
loader fail rather than silently skip it; tests/ops/test_install.py checks the
same against `kubectl kustomize` and `dnsside install`) and every object is validated with
kubernetes-validate against the Kubernetes 1.33 OpenAPI schemas in strict mode
(unknown fields are errors). On top of schema validity, the tests pin down the
properties the product depends on: read-only RBAC, the pod security settings,
probes on /readyz and /healthz, DNS on 53 over UDP and TCP (as non-root through
the pod's `net.ipv4.ip_unprivileged_port_start`; 127.0.0.1:5353 in sidecar mode), the CoreDNS
stanzas, and a lint of the demo scripts with shellcheck and `bash -n`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from dnsside.cli import serve_parser
from testkit.serve import parser_options

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
SIDECAR = DEPLOY / "overlays" / "sidecar"
COREDNS = DEPLOY / "coredns"
DEMO = DEPLOY / "demo"

# kubernetes-validate 1.37.0 (the version in .venv) ships schemas for 1.25 ...
# 1.37, including v1.33.0-local-strict, so 1.33 is validated exactly. validate()
# returns the schema version it actually used; the tests assert it is 1.33.
K8S_VERSION = "1.33"

KUSTOMIZATIONS = [BASE, SIDECAR]
# Plain manifests applied with `kubectl apply -f` / `create -f`.
STANDALONE = [
    COREDNS / "coredns-custom-configmap.yaml",
    DEPLOY / "monitoring" / "monitoring.yaml",
    DEMO / "workload.yaml",
    DEMO / "smoke-job.yaml",
]
# A strategic-merge patch: a partial Deployment, not a complete object.
SIDECAR_PATCH = SIDECAR / "coredns-patch.yaml"

# Fields of kustomization.yaml the loader understands (the generated ones use
# `resources` only: `dnsside install` writes every namespace and tag itself).
KUSTOMIZE_FIELDS = {"apiVersion", "kind", "namespace", "resources", "images"}
# Custom resources (prometheus-operator): kubernetes-validate has no schema for them;
# tests/ops/test_install.py validates them against schemas of their own and promtool.
CUSTOM_KINDS = {"PrometheusRule", "PodMonitor"}

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}

# `dnsside serve` flags; each is also DNSSIDE_<FLAG>.
def _serve_flags() -> set[str]:
    return {s for s in parser_options(serve_parser()) if s.startswith("--")}


SERVE_FLAGS = _serve_flags()
READ_VERBS = {"get", "list", "watch"}
ALLOWED_RESOURCES = {("", "services"), ("discovery.k8s.io", "endpointslices"),
                     ("multicluster.linkerd.io", "links")}
IMAGE = "ghcr.io/dnsside/dnsside:0.1.0"
SIDECAR_STANZA = ("svc-global:53 {\n    errors\n    cache 5\n    loadbalance round_robin\n    prometheus :9153\n"
                  "    bufsize 1232\n    forward . 127.0.0.1:5353\n}")


# --------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------


def load_docs(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for d in docs:
        assert isinstance(d, dict), f"{path}: a YAML document is not a mapping"
    return docs


def load_kustomization(kdir: Path) -> dict[str, Any]:
    k = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    assert isinstance(k, dict)
    return k


def render(kdir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The objects `kubectl apply -k kdir` would send, minus kustomize's own
    transformations (the manifests are written so that none are needed)."""
    k = load_kustomization(kdir)
    unknown = set(k) - KUSTOMIZE_FIELDS
    assert not unknown, f"{kdir}: kustomize fields this loader does not apply: {unknown}"
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert k["kind"] == "Kustomization"
    out: list[tuple[Path, dict[str, Any]]] = []
    for entry in k["resources"]:
        path = (kdir / entry).resolve()
        assert path.exists(), f"{kdir}/kustomization.yaml lists missing {entry}"
        if path.is_dir():
            out.extend(render(path))
        else:
            out.extend((path, doc) for doc in load_docs(path))
    return out


def objects(kdir: Path) -> list[dict[str, Any]]:
    return [obj for _, obj in render(kdir)]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]


def all_full_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    for kdir in KUSTOMIZATIONS:
        for path, obj in render(kdir):
            yield f"{path.relative_to(ROOT)}:{obj['kind']}/{obj['metadata']['name']}", obj
    for path in STANDALONE:
        for obj in load_docs(path):
            yield f"{path.relative_to(ROOT)}:{obj['kind']}/{obj['metadata']['name']}", obj


FULL_OBJECTS = [(n, o) for n, o in all_full_objects() if o["kind"] not in CUSTOM_KINDS]


def base_deployment() -> dict[str, Any]:
    return one(objects(BASE), "Deployment", "dnsside")


def patch_doc() -> dict[str, Any]:
    (doc,) = load_docs(SIDECAR_PATCH)
    return doc


def sidecar_container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = patch_doc()["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["dnsside"]
    return containers[0]


def flag_values(args: list[str]) -> dict[str, str]:
    """`--flag value` / `--flag=value` pairs after the `serve` subcommand."""
    assert args and args[0] == "serve", f"args must start with the serve subcommand: {args}"
    values: dict[str, str] = {}
    rest = list(args[1:])
    while rest:
        tok = rest.pop(0)
        assert tok.startswith("--"), f"unexpected positional argument {tok!r}"
        if "=" in tok:
            flag, value = tok.split("=", 1)
        else:
            flag = tok
            value = rest.pop(0) if rest and not rest[0].startswith("--") else ""
        assert flag in SERVE_FLAGS, f"{flag} is not a `dnsside serve` flag"
        values[flag] = value
    return values


def host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def resolve_port(container: dict[str, Any], port: int | str, protocol: str = "TCP") -> int:
    if isinstance(port, int):
        return port
    matches = [
        p["containerPort"]
        for p in container.get("ports", [])
        if p.get("name") == port and p.get("protocol", "TCP") == protocol
    ]
    assert len(matches) == 1, f"named port {port}/{protocol} not declared on {container['name']}"
    return int(matches[0])


def labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are used here"
    want = selector["matchLabels"]
    return bool(want) and all(labels.get(k) == v for k, v in want.items())


# --------------------------------------------------------------------------
# kustomizations and schema validity
# --------------------------------------------------------------------------


def test_every_kustomization_is_covered() -> None:
    found = {p.parent for p in DEPLOY.rglob("kustomization.yaml")}
    assert found == set(KUSTOMIZATIONS)


def test_every_manifest_is_referenced_or_known() -> None:
    referenced = {path for kdir in KUSTOMIZATIONS for path, _ in render(kdir)}
    known = referenced | set(STANDALONE) | {SIDECAR_PATCH}
    on_disk = {
        p.resolve()
        for ext in ("*.yaml", "*.yml")
        for p in DEPLOY.rglob(ext)
        if p.name != "kustomization.yaml"
    }
    assert on_disk == {p.resolve() for p in known}


@pytest.mark.parametrize("name,obj", FULL_OBJECTS, ids=[n for n, _ in FULL_OBJECTS])
def test_manifest_is_valid_kubernetes_object(name: str, obj: dict[str, Any]) -> None:
    try:
        used = kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        pytest.fail(f"{name}: {path}: {e.message}")
    assert used == K8S_VERSION


def test_validation_catches_an_unknown_field() -> None:
    # Guards the guard: strict mode must reject what a typo would produce.
    bad = json.loads(json.dumps(base_deployment()))
    bad["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_namespaces_are_explicit_and_consistent(kdir: Path) -> None:
    want = load_kustomization(kdir).get("namespace")
    for obj in objects(kdir):
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert ns is None, f"{obj['kind']}/{obj['metadata']['name']} is cluster-scoped"
        else:
            assert ns, f"{obj['kind']}/{obj['metadata']['name']} has no namespace"
            if want:
                assert ns == want


def test_port_names_are_valid_service_names() -> None:
    # IANA_SVC_NAME: at most 15 characters, lowercase alphanumerics and '-'.
    containers = [c for _, o in FULL_OBJECTS for c in pod_containers(o)] + [sidecar_container()]
    services = [o for _, o in FULL_OBJECTS if o["kind"] == "Service"]
    names = [p["name"] for c in containers for p in c.get("ports", [])]
    names += [p["name"] for s in services for p in s["spec"]["ports"]]
    assert names
    for n in names:
        assert re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", n) and len(n) <= 15, n


def pod_containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] in {"Deployment", "StatefulSet", "Job"}:
        return list(obj["spec"]["template"]["spec"]["containers"])
    return []


# --------------------------------------------------------------------------
# RBAC
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_rbac_is_read_only_on_services_endpointslices_and_links(kdir: Path) -> None:
    objs = objects(kdir)
    kinds = {o["kind"] for o in objs}
    # Nothing that could hand out more than this; one namespaced grant, for the Links.
    assert not kinds & {"Secret"}
    roles = [o for o in objs if o["kind"] in ("ClusterRole", "Role")]
    assert sorted(o["kind"] for o in roles) == ["ClusterRole", "Role"]
    granted: set[tuple[str, str]] = set()
    for role in roles:
        for rule in role["rules"]:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
            assert set(rule["verbs"]) <= READ_VERBS, f"write or wildcard verb in {rule}"
            for group in rule["apiGroups"]:
                for res in rule["resources"]:
                    assert (group, res) in ALLOWED_RESOURCES, f"{group}/{res} is not needed"
                    assert set(rule["verbs"]) == READ_VERBS, f"{group}/{res} needs get, list and watch"
                    # Links in the links namespace only (issue 33): a Link elsewhere counts
                    # for nothing, so dnsside need not even read it.
                    assert (res == "links") == (role["kind"] == "Role"), (role["kind"], res)
                    granted.add((group, res))
    assert granted == ALLOWED_RESOURCES
    (role,) = [o for o in roles if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "linkerd-multicluster"


def test_base_binding_connects_role_and_deployment_service_account() -> None:
    objs = objects(BASE)
    role = one(objs, "ClusterRole")
    binding = one(objs, "ClusterRoleBinding")
    sa = one(objs, "ServiceAccount")
    dep = base_deployment()
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": sa["metadata"]["name"],
            "namespace": sa["metadata"]["namespace"],
        }
    ]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert dep["spec"]["template"]["spec"].get("automountServiceAccountToken", True) is True


def test_sidecar_binding_targets_the_coredns_service_account() -> None:
    objs = objects(SIDECAR)
    role = one(objs, "ClusterRole")
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}
    ]
    # Its own names, so removing one install never removes the other's grant.
    assert role["metadata"]["name"] != one(objects(BASE), "ClusterRole")["metadata"]["name"]


# --------------------------------------------------------------------------
# the standalone Deployment
# --------------------------------------------------------------------------


def effective(container: dict[str, Any], pod: dict[str, Any], key: str) -> Any:
    """A securityContext field as the kubelet applies it (container wins)."""
    csc = container.get("securityContext", {})
    return csc[key] if key in csc else pod.get("securityContext", {}).get(key)


def assert_hardened(container: dict[str, Any], pod: dict[str, Any]) -> None:
    assert effective(container, pod, "runAsNonRoot") is True
    assert effective(container, pod, "runAsUser") == 65532
    assert effective(container, pod, "seccompProfile") == {"type": "RuntimeDefault"}
    csc = container["securityContext"]
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc.get("privileged", False) is False
    assert csc["capabilities"] == {"drop": ["ALL"]}


def test_deployment_security_context() -> None:
    pod = base_deployment()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    (container,) = pod["containers"]
    assert_hardened(container, pod)


# The "safe" sysctls the kubelet allows without --allowed-unsafe-sysctls and the Pod
# Security Standards' baseline (so restricted) admits: kubernetes/kubernetes
# pkg/kubelet/sysctl/safe_sysctls.go; net.ipv4.ip_unprivileged_port_start since 1.22.
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
                "net.ipv4.ip_unprivileged_port_start"}


def test_deployment_binds_53_as_non_root_through_the_safe_sysctl() -> None:
    """Port 53 with no capability: the pod's network namespace makes ports from 53 up
    unprivileged (the kernel default is 1024), nothing else changes."""
    pod = base_deployment()["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    _, dns_port = host_port(flag_values(c["args"])["--listen"])
    assert dns_port == 53
    sysctls = {s["name"]: s["value"] for s in pod["securityContext"]["sysctls"]}
    assert sysctls == {"net.ipv4.ip_unprivileged_port_start": "53"}
    assert set(sysctls) <= SAFE_SYSCTLS
    assert int(sysctls["net.ipv4.ip_unprivileged_port_start"]) <= dns_port
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "add" not in c["securityContext"]["capabilities"]


def test_dns_port_5353_keeps_the_old_layout_without_the_sysctl() -> None:
    """`install --dns-port 5353` (clusters older than 1.22): pods and Service on 5353,
    no sysctl; the sidecar refuses the flag (CoreDNS holds 53 there)."""
    from dnsside.ops.manifests import InstallError, InstallOptions, manifests

    objs = manifests(InstallOptions("east", dns_port=5353))
    dep = next(o for o in objs if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert "sysctls" not in pod["securityContext"]
    assert flag_values(c["args"])["--listen"] == "[::]:5353"
    svc = next(o for o in objs if o["kind"] == "Service")
    assert {p["port"] for p in svc["spec"]["ports"] if p["name"].startswith("dns")} == {5353}
    for o in objs:
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)
    with pytest.raises(InstallError, match="sidecar"):
        manifests(InstallOptions("east", mode="sidecar", dns_port=53))
    for bad in (0, 70000, 9153):
        with pytest.raises(InstallError, match="--dns-port"):
            manifests(InstallOptions("east", dns_port=bad))


def test_namespace_enforces_restricted_pod_security() -> None:
    ns = one(objects(BASE), "Namespace", "dnsside")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_deployment_is_replicated_and_spread_across_nodes() -> None:
    dep = base_deployment()
    spec = dep["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert labels_match(spec["selector"], pod_labels)
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    by_host = [
        t for t in pod["topologySpreadConstraints"] if t["topologyKey"] == "kubernetes.io/hostname"
    ]
    assert len(by_host) == 1 and by_host[0]["maxSkew"] == 1
    assert labels_match(by_host[0]["labelSelector"], pod_labels)
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert any(
        t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        and labels_match(t["podAffinityTerm"]["labelSelector"], pod_labels)
        for t in anti
    )


def test_deployment_args_env_and_ports() -> None:
    pod = base_deployment()["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == IMAGE
    flags = flag_values(c["args"])
    # [::] = both address families (IPv6-only and dual-stack clusters).
    assert flags["--listen"] == "[::]:53"
    assert flags["--http-listen"] == "[::]:9153"
    # Every other setting comes from the ConfigMap, read whole as DNSSIDE_* variables.
    assert "--cluster-name" not in flags
    (source,) = c["envFrom"]
    cm = one(objects(BASE), "ConfigMap", source["configMapRef"]["name"])
    assert "DNSSIDE_CLUSTER_NAME" in cm["data"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    for key in cm["data"]:
        assert key.startswith("DNSSIDE_")
        assert "--" + key.removeprefix("DNSSIDE_").lower().replace("_", "-") in SERVE_FLAGS

    _, dns_port = host_port(flags["--listen"])
    assert resolve_port(c, "dns", "UDP") == dns_port
    assert resolve_port(c, "dns-tcp", "TCP") == dns_port
    _, http_port = host_port(flags["--http-listen"])
    assert resolve_port(c, "metrics") == http_port


def test_deployment_probes_and_resources() -> None:
    (c,) = base_deployment()["spec"]["template"]["spec"]["containers"]
    _, http_port = host_port(flag_values(c["args"])["--http-listen"])
    ready = c["readinessProbe"]["httpGet"]
    live = c["livenessProbe"]["httpGet"]
    assert ready["path"] == "/readyz"
    assert live["path"] == "/healthz"
    assert resolve_port(c, ready["port"]) == http_port
    assert resolve_port(c, live["port"]) == http_port
    res = c["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"]
    assert res["limits"]["memory"]


def test_image_tag_is_the_package_version() -> None:
    from dnsside import __version__

    assert IMAGE.endswith(":" + __version__)
    (c,) = base_deployment()["spec"]["template"]["spec"]["containers"]
    assert c["image"] == sidecar_container()["image"] == IMAGE


@pytest.mark.parametrize("where", ["base", "sidecar"])
def test_args_and_configmap_parse_with_the_real_cli(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container args and the ConfigMap's DNSSIDE_* keys are accepted by
    dnsside's own argument parser, the way the kubelet would pass them."""
    from dnsside.cli import build_parser
    from dnsside.flagvalues import checked_config

    if where == "base":
        (c,) = base_deployment()["spec"]["template"]["spec"]["containers"]
        cm = one(objects(BASE), "ConfigMap", "dnsside")
    else:
        c = sidecar_container()
        cm = one(objects(SIDECAR), "ConfigMap", "dnsside")
    for key in list(os.environ):
        if key.startswith("DNSSIDE_"):
            monkeypatch.delenv(key)
    known = set(parser_options(serve_parser()))
    for key, value in cm["data"].items():
        flag = "--" + key.removeprefix("DNSSIDE_").lower().replace("_", "-")
        assert key.startswith("DNSSIDE_") and flag in known, f"{key}: dnsside has no {flag}"
        monkeypatch.setenv(key, value)
    # envFrom: the kubelet sets each key as an environment variable.
    assert c["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]
    ns = build_parser().parse_args(c["args"])
    flags = flag_values(c["args"])
    assert ns.command == "serve"
    assert ns.listen == flags["--listen"]
    assert ns.http_listen == flags["--http-listen"]
    # What serve runs with there (dnsside.flagvalues: the variables checked as flags are).
    config = checked_config(ns.command, vars(ns), cm["data"])
    assert config.cluster_name == cm["data"]["DNSSIDE_CLUSTER_NAME"]


# --------------------------------------------------------------------------
# Service and PodDisruptionBudget
# --------------------------------------------------------------------------


def test_service_exposes_dns_udp_and_tcp_and_metrics() -> None:
    svc = one(objects(BASE), "Service", "dnsside")
    pod_spec = base_deployment()["spec"]["template"]
    (c,) = pod_spec["spec"]["containers"]
    assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert svc["spec"].get("clusterIP") != "None"
    assert svc["spec"]["selector"] == {
        k: v for k, v in pod_spec["metadata"]["labels"].items() if k in svc["spec"]["selector"]
    }
    ports = {(p["port"], p.get("protocol", "TCP")): p for p in svc["spec"]["ports"]}
    assert ports[(53, "UDP")]["name"] == "dns"
    assert ports[(53, "TCP")]["name"] == "dns-tcp"
    assert (9153, "TCP") in ports
    for (_, proto), p in ports.items():
        assert resolve_port(c, p["targetPort"], proto) == p["port"]


def test_pod_disruption_budget() -> None:
    pdb = one(objects(BASE), "PodDisruptionBudget")
    dep = base_deployment()
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["minAvailable"] < dep["spec"]["replicas"]
    assert labels_match(pdb["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])


# --------------------------------------------------------------------------
# the CoreDNS sidecar patch
# --------------------------------------------------------------------------

# The parts of a stock CoreDNS Deployment (kubeadm / k3s) the patch must
# coexist with: container "coredns" owns :53, :8080 (health), :8181 (ready)
# and :9153 (prometheus) in the pod's network namespace.
COREDNS_PORTS = {53, 8080, 8181, 9153}


def stock_coredns() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "coredns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns"},
        },
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-dns"}},
                "spec": {
                    "serviceAccountName": "coredns",
                    "dnsPolicy": "Default",
                    "containers": [
                        {
                            "name": "coredns",
                            "image": "coredns/coredns:1.12.1",
                            "args": ["-conf", "/etc/coredns/Corefile"],
                            "ports": [
                                {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
                            ],
                            "volumeMounts": [
                                {"name": "config-volume", "mountPath": "/etc/coredns"}
                            ],
                        }
                    ],
                    "volumes": [{"name": "config-volume", "configMap": {"name": "coredns"}}],
                },
            },
        },
    }


def merge_by_name(base: list[dict[str, Any]], patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The strategic-merge rule for containers and volumes (merge key: name),
    enough for a patch that only adds new entries."""
    existing = {item["name"] for item in base}
    assert not existing & {item["name"] for item in patch}, "the patch would modify, not add"
    return [*base, *patch]


def test_sidecar_patch_shape() -> None:
    # A strategic-merge patch is a partial object (no selector, no CoreDNS
    # container), so it cannot be validated as a Deployment on its own: its
    # shape is checked by hand here, and the merged result is validated
    # strictly in the next test.
    patch = patch_doc()
    assert set(patch) == {"apiVersion", "kind", "metadata", "spec"}
    assert (patch["apiVersion"], patch["kind"]) == ("apps/v1", "Deployment")
    assert patch["metadata"] == {"name": "coredns", "namespace": "kube-system"}
    # The selector is there to make the patch a valid Deployment (kubectl apply,
    # kubernetes-validate); it is the one every CoreDNS install has, and immutable.
    assert set(patch["spec"]) == {"template", "selector"}
    assert patch["spec"]["selector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert set(patch["spec"]["template"]) == {"spec", "metadata"}
    # Only an annotation: a change of dnsside's ConfigMap rolls the CoreDNS pods.
    assert set(patch["spec"]["template"]["metadata"]) == {"annotations"}
    tspec = patch["spec"]["template"]["spec"]
    assert set(tspec) <= {"containers", "volumes", "terminationGracePeriodSeconds"}
    assert all(c["name"] != "coredns" for c in tspec["containers"])
    volumes = {v["name"] for v in tspec.get("volumes", [])}
    for c in tspec["containers"]:
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"mount of a volume the patch does not add: {m['name']}"


def test_sidecar_patch_merged_into_coredns_is_valid() -> None:
    merged = stock_coredns()
    pod = merged["spec"]["template"]["spec"]
    tspec = patch_doc()["spec"]["template"]["spec"]
    pod["containers"] = merge_by_name(pod["containers"], tspec["containers"])
    pod["volumes"] = merge_by_name(pod["volumes"], tspec.get("volumes", []))
    assert kubernetes_validate.validate(merged, K8S_VERSION, strict=True) == K8S_VERSION
    assert [c["name"] for c in pod["containers"]] == ["coredns", "dnsside"]


def test_sidecar_container_settings() -> None:
    c = sidecar_container()
    flags = flag_values(c["args"])
    host, dns_port = host_port(flags["--listen"])
    # Loopback only: reachable by CoreDNS in the same pod, by nothing else.
    assert host == "127.0.0.1" and dns_port == 5353
    _, http_port = host_port(flags["--http-listen"])
    assert {dns_port, http_port}.isdisjoint(COREDNS_PORTS)
    assert http_port != dns_port
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert resolve_port(c, c["livenessProbe"]["httpGet"]["port"]) == http_port
    # A readiness probe here would make the whole CoreDNS pod unready while
    # dnsside syncs: cluster DNS must not depend on it.
    assert "readinessProbe" not in c
    (source,) = c["envFrom"]
    cm = one(objects(SIDECAR), "ConfigMap", source["configMapRef"]["name"])
    assert cm["metadata"]["namespace"] == "kube-system"
    assert "DNSSIDE_CLUSTER_NAME" in cm["data"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert c["resources"]["limits"]["memory"]
    assert_hardened(c, {})


# --------------------------------------------------------------------------
# Corefile stanzas
# --------------------------------------------------------------------------


def stanza(text: str) -> str:
    """The Corefile text without comment lines and surrounding blank lines."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return "\n".join(lines).strip()


def test_corefile_snippet_for_the_sidecar() -> None:
    text = stanza((COREDNS / "Corefile.snippet").read_text())
    assert text == SIDECAR_STANZA
    forward = re.search(r"forward \. (\S+)", text)
    assert forward and forward.group(1) == flag_values(sidecar_container()["args"])["--listen"]


def test_corefile_snippet_for_the_service() -> None:
    raw = (COREDNS / "Corefile.service.snippet").read_text()
    assert "kubectl -n dnsside get service dnsside -o jsonpath='{.spec.clusterIP}'" in raw
    text = stanza(raw)
    assert text == SIDECAR_STANZA.replace("127.0.0.1:5353", "<dnsside-service-ClusterIP>:53")
    svc = one(objects(BASE), "Service", "dnsside")
    assert {p["port"] for p in svc["spec"]["ports"] if p["name"].startswith("dns")} == {53}


def test_coredns_custom_configmap_example() -> None:
    (cm,) = load_docs(COREDNS / "coredns-custom-configmap.yaml")
    assert cm["metadata"] == {"name": "coredns-custom", "namespace": "kube-system"}
    assert list(cm["data"]) == ["dnsside.server"]
    assert all(k.endswith(".server") for k in cm["data"])
    assert stanza(cm["data"]["dnsside.server"]) == SIDECAR_STANZA


# --------------------------------------------------------------------------
# Dockerfile and .dockerignore
# --------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)  # line continuations
    out = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        word, _, rest = s.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[dict[str, Any]]:
    args: dict[str, str] = {}
    result: list[dict[str, Any]] = []
    for word, rest in dockerfile_instructions():
        if word == "FROM":
            image, _, name = rest.partition(" AS ")
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image.strip())
            result.append({"image": image, "name": name.strip(), "ins": []})
        elif not result:
            assert word == "ARG", f"{word} before the first FROM"
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            result[-1]["ins"].append((word, rest))
    return result


def test_dockerfile_is_multi_stage_on_slim_python_311() -> None:
    st = stages()
    assert len(st) >= 2
    build, final = st[0], st[-1]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", final["image"]), final["image"]
    # The venv's interpreter symlink points into the base image: same image.
    assert build["image"] == final["image"]
    build_runs = " ".join(rest for w, rest in build["ins"] if w == "RUN")
    venv = re.search(r'"-m", "venv", "(/[^"]+)"', build_runs)
    assert venv, "the build stage creates a virtualenv"
    assert "pip install" in build_runs
    assert ("ARG", "EXTRAS=fast") in build["ins"]
    assert ("COPY", f"--from={build['name']} {venv.group(1)} {venv.group(1)}") in final["ins"]
    envs = " ".join(rest for w, rest in final["ins"] if w == "ENV")
    assert re.search(rf"PATH={re.escape(venv.group(1))}/bin:", envs)


def test_dockerfile_final_stage_runtime_contract() -> None:
    final = stages()[-1]
    ins = final["ins"]
    words = [w for w, _ in ins]
    assert "RUN" not in words, "the runtime stage must not need a shell"
    assert ("USER", "65532:65532") in ins
    (entrypoint,) = [rest for w, rest in ins if w == "ENTRYPOINT"]
    (cmd,) = [rest for w, rest in ins if w == "CMD"]
    assert json.loads(entrypoint) == ["dnsside"]
    assert json.loads(cmd) == ["serve"]
    exposed = {
        p if "/" in p else f"{p}/tcp" for w, rest in ins if w == "EXPOSE" for p in rest.split()
    }
    # 53: where the standalone manifests listen; 5353: dnsside's own default and the
    # sidecar's; 9153: /metrics and the probes
    assert exposed == {"53/udp", "53/tcp", "5353/udp", "5353/tcp", "9153/tcp"}


def test_dockerfile_uses_exec_form_everywhere() -> None:
    for word, rest in dockerfile_instructions():
        if word in {"RUN", "CMD", "ENTRYPOINT"}:
            parsed = json.loads(rest)
            assert isinstance(parsed, list) and all(isinstance(x, str) for x in parsed), rest


def test_dockerignore() -> None:
    entries = {
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    }
    for needed in (
        ".git",
        ".venv",
        "bench/out",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
    ):
        assert needed in entries, needed
    # What the Dockerfile copies must not be ignored.
    for kept in ("pyproject.toml", "dnsside", "README.md"):
        assert kept not in entries


# --------------------------------------------------------------------------
# demo scripts and manifests
# --------------------------------------------------------------------------

DEMO_SCRIPTS = ["01-clusters.sh", "02-linkerd.sh", "03-workload.sh", "04-dnsside.sh", "05-smoke.sh"]
ALL_SHELL = sorted(p.name for p in DEMO.glob("*.sh"))


def test_demo_scripts_present() -> None:
    assert set(DEMO_SCRIPTS) <= set(ALL_SHELL)
    assert (DEMO / "README.md").is_file()


def test_shellcheck_is_clean() -> None:
    # Missing shellcheck is a failure, not a skip: the lint is the only thing
    # that exercises these scripts in CI.
    shellcheck = shutil.which("shellcheck") or "/usr/bin/shellcheck"
    assert Path(shellcheck).is_file(), "shellcheck is not installed (apt-get install shellcheck)"
    proc = subprocess.run(
        [shellcheck, "--external-sources", "--severity=style", "--shell=bash", *ALL_SHELL],
        cwd=DEMO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", ALL_SHELL)
def test_bash_parses(script: str) -> None:
    proc = subprocess.run(
        ["bash", "-n", script], cwd=DEMO, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("script", DEMO_SCRIPTS)
def test_demo_script_header(script: str) -> None:
    path = DEMO / script
    lines = path.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert os.access(path, os.X_OK), f"{script} is not executable"


@pytest.mark.parametrize("script", DEMO_SCRIPTS)
def test_demo_script_paths_exist(script: str) -> None:
    text = (DEMO / script).read_text()
    refs = re.findall(r"\$(REPO_ROOT|DEMO_DIR)/([\w./-]+)", text)
    for anchor, rel in refs:
        base = ROOT if anchor == "REPO_ROOT" else DEMO
        assert (base / rel).exists(), f"{script} refers to missing {anchor}/{rel}"


def test_smoke_job_queries_srv_through_cluster_dns() -> None:
    (job,) = load_docs(DEMO / "smoke-job.yaml")
    pod = job["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    script = "\n".join(c["args"])
    assert "name=_http._tcp.nginx-svc.default.svc-global" in script
    assert 'dig +short SRV "$name"' in script
    assert "[ -s /tmp/srv ]" in script  # the non-empty check
    assert "exit 1" in script
    # The kubelet would expand $(...) in args; the script must not use it.
    assert "$(" not in script
    # Default dnsPolicy (ClusterFirst): the query goes through CoreDNS.
    assert pod["spec"].get("dnsPolicy", "ClusterFirst") == "ClusterFirst"
    assert pod["metadata"]["annotations"]["linkerd.io/inject"] == "disabled"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_demo_workload_is_an_exported_headless_statefulset() -> None:
    docs = load_docs(DEMO / "workload.yaml")
    svc = one(docs, "Service", "nginx-svc")
    sts = one(docs, "StatefulSet", "nginx-set")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["metadata"]["labels"]["mirror.linkerd.io/exported"] == "true"
    # _http._tcp only matches a port named "http" with protocol TCP.
    assert any(
        p["name"] == "http" and p.get("protocol", "TCP") == "TCP" for p in svc["spec"]["ports"]
    )
    assert sts["spec"]["serviceName"] == "nginx-svc"
    assert labels_match(sts["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])
    assert all(
        sts["spec"]["template"]["metadata"]["labels"].get(k) == v
        for k, v in svc["spec"]["selector"].items()
    )
