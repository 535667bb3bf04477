"""`dnsside install coredns` per platform, checked against each platform's own shapes.

Each flavour's output is parsed the way the platform reads it: core objects through
kubernetes-validate, the EKS add-on values, the RKE2 HelmChartConfig and the OpenShift
DNS operator object against the schema parts written below from the platforms' own
sources, every Corefile (also one rendered from the rke2-coredns chart's ``servers``)
through testkit/corefile.py. Then one test per defect found in the flavours.
"""

from __future__ import annotations

import io
import json
import re
import sys
from typing import Any

import jsonschema
import pytest
import yaml

from testkit.corefile import block_for, forward_to, parse
from testkit.serve import ROOT
from tests.ops.test_install import OPENSHIFT_DNS_SCHEMA, cli, docs, live_nodelocaldns, valid

pytestmark = pytest.mark.quick

ADDRESS = "10.96.0.53:53"  # given with its port: independent of install's default port

# The EKS CoreDNS add-on's configuration schema, from `aws eks describe-addon-configuration
# --addon-name coredns --addon-version v1.11.1-eksbuild.8 --query configurationSchema`, as
# terraform-aws-modules/terraform-aws-eks's docs ("Amazon EKS add-ons") print it; defaults and
# descriptions left out, additionalProperties false where the schema has it. (Later add-on
# versions add keys, e.g. autoScaling; v1.11.1's set is the strictest check.)
EKS_LIMITS = {"type": "object", "additionalProperties": False,
              "properties": {"cpu": {"type": "string"}, "memory": {"type": "string"}}}
EKS_COREDNS_SCHEMA = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "affinity": {"type": ["object", "null"]},
        "computeType": {"type": "string"},
        "corefile": {"type": "string"},
        "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
        "podAnnotations": {"type": "object"},
        "podDisruptionBudget": {"type": "object"},
        "podLabels": {"type": "object"},
        "replicaCount": {"type": "integer"},
        "resources": {"type": "object", "additionalProperties": False,
                      "properties": {"limits": EKS_LIMITS, "requests": EKS_LIMITS}},
        "tolerations": {"type": "array", "items": {"type": "object"}},
        "topologySpreadConstraints": {"type": "array"},
    },
}

# helm.cattle.io/v1 HelmChartConfig (k3s-io/helm-controller pkg/apis/helm.cattle.io/v1
# types.go: HelmChartConfigSpec{ValuesContent, ValuesSecrets, FailurePolicy}).
HELM_CHART_CONFIG_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "helm.cattle.io/v1"},
        "kind": {"const": "HelmChartConfig"},
        "metadata": {"type": "object", "required": ["name", "namespace"],
                     "properties": {"name": {"const": "rke2-coredns"},
                                    "namespace": {"const": "kube-system"}}},
        "spec": {"type": "object", "additionalProperties": False, "properties": {
            "valuesContent": {"type": "string"},
            "valuesSecrets": {"type": "array"},
            "failurePolicy": {"type": "string"},
        }},
    },
}

# rke2-coredns's default server: coredns/helm charts/coredns/values.yaml `servers` with
# rancher/rke2-charts packages/rke2-coredns values.yaml.patch (the cluster domain moves into
# the chart's template, as global.clusterDomain).
RKE2_CHART_DEFAULT_PLUGINS = ["errors", "health", "ready", "kubernetes", "prometheus",
                              "forward", "cache", "loop", "reload", "loadbalance"]


def render_chart_servers(servers: list[dict[str, Any]], domain: str = "cluster.local") -> str:
    """The Corefile the coredns chart's templates/configmap.yaml (rke2's patch included)
    writes from ``servers``."""
    out = []
    for server in servers:
        zones = "".join(f"{z.get('scheme', '')}{z.get('zone', '.')} "
                        for z in server.get("zones") or [{"zone": "."}]).rstrip()
        head = zones + (f":{server['port']} " if server.get("port") else " ")
        out.append(head + "{")
        for plugin in server["plugins"]:
            line = plugin["name"]
            if plugin.get("parameters") is not None:
                prefix = f" {domain} " if plugin["name"] == "kubernetes" else ""
                line += f" {prefix}{plugin['parameters']}"
            if plugin.get("configBlock"):
                line += " {\n" + "\n".join(f"    {x}" for x in
                                           plugin["configBlock"].splitlines()) + "\n}"
            out.append(line)
        out.append("}")
    return "\n".join(out) + "\n"


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """`dnsside install coredns ARGS` in this process, ``stdin`` for `--from -` (the same
    command through a real pipe is tests/ops/test_install.py's)."""
    real = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        return cli("install", "coredns", *args)
    finally:
        sys.stdin = real


# --------------------------------------------------------------------------- nodelocaldns


def test_nodelocaldns_without_from_refuses_and_says_how_to_get_the_live_object() -> None:
    code, out, err = run("--flavor", "nodelocaldns", "--address", ADDRESS)
    assert code == 2 and out == ""
    assert "kubectl -n kube-system get configmap node-local-dns -o yaml" in err


def test_nodelocaldns_never_prints_install_time_placeholders() -> None:
    # The raw template as --from is refused too: node-cache would put both -localip
    # addresses into `health __PILLAR__LOCAL__DNS__:8080`.
    template = yaml.safe_load(live_nodelocaldns())
    template["data"]["Corefile"] = template["data"]["Corefile"].replace(
        "169.254.20.10", "__PILLAR__LOCAL__DNS__")
    code, out, err = run("--flavor", "nodelocaldns", "--address", ADDRESS, "--from", "-",
                         stdin=yaml.safe_dump(template))
    assert code == 2 and "__PILLAR__LOCAL__DNS__" in err and out == ""
    for mode in ("standalone", "sidecar"):
        code, out, err = run("--flavor", "nodelocaldns", "--mode", mode, "--address", ADDRESS,
                             "--from", "-", stdin=live_nodelocaldns())
        assert code == 0, err
        (cm,) = docs(out)
        valid(cm)
        text = cm["data"]["Corefile"]
        # Only node-cache's run-time words may remain.
        assert set(re.findall(r"__PILLAR__\w+?__(?=\W)", text)) <= {
            "__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}, text
        blocks = parse(text)
        (health,) = block_for(blocks, "cluster.local.").directive("health")
        assert health.args == ["169.254.20.10:8080"]
        assert block_for(blocks, "svc-global.").directive("bind")[0].args == [
            "169.254.20.10", "10.96.0.10"]


# --------------------------------------------------------------------------- eks

EKS_LIVE = {"replicaCount": 3,
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
            "resources": {"limits": {"memory": "256Mi"}, "requests": {"cpu": "100m"}},
            "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
            "corefile": ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa "
                        "ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n"
                        "corp.example:53 {\n    forward . 10.1.1.1\n}\n"}


@pytest.mark.parametrize("form", ["json", "json-string", "yaml"])
def test_eks_from_merges_into_the_addon_values_and_keeps_every_other_key(form: str) -> None:
    text = {"json": json.dumps(EKS_LIVE),
            # `--query addon.configurationValues` with --output json: a JSON string
            "json-string": json.dumps(json.dumps(EKS_LIVE)),
            "yaml": yaml.safe_dump(EKS_LIVE)}[form]
    code, out, err = run("--flavor", "eks", "--address", ADDRESS, "--from", "-", stdin=text)
    assert code == 0, err
    values = json.loads(out)
    jsonschema.validate(values, EKS_COREDNS_SCHEMA)
    assert {k: v for k, v in values.items() if k != "corefile"} == {
        k: v for k, v in EKS_LIVE.items() if k != "corefile"}
    blocks = parse(values["corefile"])
    assert [b.keys for b in blocks] == [[".:53"], ["corp.example:53"], ["svc-global:53"]]
    assert forward_to(block_for(blocks, "svc-global.")) == [ADDRESS]
    again = run("--flavor", "eks", "--address", ADDRESS, "--from", "-", stdin=out)
    assert again[1] == out  # idempotent


def test_eks_without_from_warns_that_the_values_replace_the_whole_configuration() -> None:
    code, out, err = run("--flavor", "eks", "--address", ADDRESS)
    assert code == 0
    jsonschema.validate(json.loads(out), EKS_COREDNS_SCHEMA)
    assert "replace the add-on's whole configuration" in err
    assert "describe-addon" in err and "--from" in err
    empty = run("--flavor", "eks", "--address", ADDRESS, "--from", "-", stdin="null\n")
    assert empty[0] == 0 and set(json.loads(empty[1])) == {"corefile"}


def test_eks_from_refuses_a_kubernetes_object() -> None:
    cm = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "data": {"Corefile": ""}})
    code, out, err = run("--flavor", "eks", "--address", ADDRESS, "--from", "-", stdin=cm)
    assert code == 2 and out == "" and "configuration values" in err


def test_eks_schema_catches_an_unknown_key() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"corefile": "", "replicas": 2}, EKS_COREDNS_SCHEMA)


# --------------------------------------------------------------------------- openshift

OPENSHIFT_LIVE = {
    "apiVersion": "operator.openshift.io/v1", "kind": "DNS", "metadata": {"name": "default"},
    "spec": {"logLevel": "Normal", "servers": [
        {"name": "corp", "zones": ["corp.example"],
         "forwardPlugin": {"upstreams": ["10.1.1.1"]}},
        {"name": "old-global", "zones": ["svc-global"],
         "forwardPlugin": {"upstreams": ["10.9.9.9"]}},
        {"name": "lab", "zones": ["lab.example"],
         "forwardPlugin": {"policy": "Sequential", "upstreams": ["10.2.2.2"]}}]}}


def test_openshift_needs_from() -> None:
    code, out, err = run("--flavor", "openshift", "--address", ADDRESS)
    assert code == 2 and out == ""
    assert "oc get dns.operator.openshift.io/default -o yaml" in err


def test_openshift_keeps_every_other_server_and_says_how_to_apply_the_list() -> None:
    code, out, err = run("--flavor", "openshift", "--address", ADDRESS, "--from", "-",
                         stdin=yaml.safe_dump(OPENSHIFT_LIVE))
    assert code == 0, err
    (dns,) = docs(out)
    # OPENSHIFT_DNS_SCHEMA: openshift/api operator/v1 dnses CRD's spec.servers (policy enum,
    # upstreams maxItems 15), with name/zone patterns from types_dns.go's rfc6335/rfc1123.
    jsonschema.validate(dns, OPENSHIFT_DNS_SCHEMA)
    servers = dns["spec"]["servers"]
    assert servers[:2] == [OPENSHIFT_LIVE["spec"]["servers"][0],  # type: ignore[index]
                           OPENSHIFT_LIVE["spec"]["servers"][2]]  # type: ignore[index]
    assert servers[2]["name"] == "dnsside" and servers[2]["zones"] == ["svc-global"]
    assert "old-global" in err  # the entry it replaced is named
    assert "--force-conflicts" in out and "--type=merge" in out


# --------------------------------------------------------------------------- gke


def test_gke_says_it_is_for_standard_with_kube_dns() -> None:
    from tests.ops.test_install import cli

    _, helptext, _ = cli("install", "coredns", "--help")
    flat = " ".join(helptext.split())
    assert "GKE Standard with kube-dns" in flat and "Autopilot" in flat
    code, out, _ = run("--flavor", "gke", "--address", "10.0.0.53:53")
    assert code == 0
    header = "".join(line for line in out.splitlines() if line.startswith("#"))
    assert "GKE Standard with kube-dns" in header and "Autopilot" in header
    readme = (ROOT / "deploy" / "README.md").read_text()
    assert "GKE Standard with kube-dns" in readme and "Autopilot" in readme


# --------------------------------------------------------------------------- kubeadm


def test_kubeadm_without_from_warns_and_points_to_from() -> None:
    code, _, err = run("--flavor", "kubeadm", "--address", ADDRESS)
    assert code == 0
    assert "warning" in err and "--from" in err
    live = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "coredns", "namespace": "kube-system"},
                           "data": {"Corefile": ".:53 {\n    forward . 1.1.1.1\n}\n"}})
    assert run("--flavor", "kubeadm", "--address", ADDRESS, "--from", "-",
               stdin=live)[2] == ""


# --------------------------------------------------------------------------- rke2


def test_rke2_helm_chart_config_repeats_the_default_server() -> None:
    code, out, err = run("--flavor", "rke2", "--address", ADDRESS, "--mcs-zone",
                         "clusterset.local")
    assert code == 0, err
    (hcc,) = docs(out)
    jsonschema.validate(hcc, HELM_CHART_CONFIG_SCHEMA)
    values = yaml.safe_load(hcc["spec"]["valuesContent"])
    default, ours = values["servers"]
    assert default["zones"] == [{"zone": ".", "use_tcp": True}] and default["port"] == 53
    assert [p["name"] for p in default["plugins"]] == RKE2_CHART_DEFAULT_PLUGINS
    blocks = parse(render_chart_servers(values["servers"]))
    cluster = block_for(blocks, ".")
    assert cluster.directive("kubernetes")[0].args == ["cluster.local", "in-addr.arpa",
                                                       "ip6.arpa"]
    mine = block_for(blocks, "svc-global.")
    assert block_for(blocks, "clusterset.local.") is mine
    assert forward_to(mine) == [ADDRESS]
    assert mine.directive("bufsize")[0].args == ["1232"]
    assert ours["port"] == 53  # the chart's Service ports are per distinct port


def test_rke2_from_keeps_other_values_and_servers_and_is_idempotent() -> None:
    live = {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
            "metadata": {"name": "rke2-coredns", "namespace": "kube-system"},
            "spec": {"valuesContent": yaml.safe_dump({
                "nodelocal": {"enabled": True},
                "servers": [{"zones": [{"zone": "."}], "port": 53,
                             "plugins": [{"name": "errors"},
                                         {"name": "forward",
                                          "parameters": ". /etc/resolv.conf"}]},
                            {"zones": [{"zone": "svc-global."}], "port": 53,
                             "plugins": [{"name": "forward", "parameters": ". 10.9.9.9"}]}]})}}
    code, out, err = run("--flavor", "rke2", "--address", ADDRESS, "--from", "-",
                         stdin=yaml.safe_dump(live))
    assert code == 0, err
    (hcc,) = docs(out)
    jsonschema.validate(hcc, HELM_CHART_CONFIG_SCHEMA)
    values = yaml.safe_load(hcc["spec"]["valuesContent"])
    assert values["nodelocal"] == {"enabled": True}
    blocks = parse(render_chart_servers(values["servers"]))
    assert len(blocks) == 2
    assert forward_to(block_for(blocks, ".")) == ["/etc/resolv.conf"]
    assert forward_to(block_for(blocks, "svc-global.")) == [ADDRESS]
    assert run("--flavor", "rke2", "--address", ADDRESS, "--from", "-", stdin=out)[1] == out


# --------------------------------------------------------------------------- gardener


def test_gardener_block_listens_on_8053() -> None:
    code, out, err = run("--flavor", "gardener", "--address", ADDRESS)
    assert code == 0, err
    (cm,) = docs(out)
    valid(cm)
    assert cm["metadata"] == {"name": "coredns-custom", "namespace": "kube-system"}
    assert list(cm["data"]) == ["dnsside.server"]
    (block,) = parse(cm["data"]["dnsside.server"])
    assert block.zones == [("svc-global.", 8053)]
    assert forward_to(block) == [ADDRESS]
    code, out, err = run("--flavor", "gardener", "--address", ADDRESS, "--block-only")
    assert code == 0, err
    assert parse(out)[0].zones == [("svc-global.", 8053)]


# --------------------------------------------------------------------------- kubespray


def test_kubespray_prints_both_inventory_variables() -> None:
    code, out, err = run("--flavor", "kubespray", "--address", ADDRESS, "--mcs-zone",
                         "clusterset.local")
    assert code == 0, err
    variables = yaml.safe_load(out)
    assert set(variables) == {"coredns_external_zones", "nodelocaldns_external_zones"}
    for name, zones in variables.items():
        (zone,) = zones
        # kubespray's docs/advanced/dns-stack.md shape; its coredns-config.yml.j2 writes
        # `{{ zones | join(' ') }} {` and `forward . {{ nameservers | join(' ') }}`.
        assert set(zone) <= {"zones", "nameservers", "cache", "rewrite"}, name
        assert zone["zones"] == ["svc-global", "clusterset.local"]
        assert isinstance(zone["cache"], int)
        rendered = (f"{' '.join(zone['zones'])} {{\n    forward . "
                    f"{' '.join(zone['nameservers'])}\n    cache {zone['cache']}\n}}\n")
        (block,) = parse(rendered)
        assert forward_to(block) == [ADDRESS]
    sidecar = run("--flavor", "kubespray", "--mode", "sidecar")
    assert sidecar[0] == 2 and "standalone" in sidecar[2]


# --------------------------------------------------------------------------- k3s / AKS


@pytest.mark.parametrize("flavor", ["k3s", "aks", "gardener"])
def test_custom_warns_when_another_server_key_serves_the_zone(flavor: str) -> None:
    live = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "coredns-custom", "namespace": "kube-system"},
                           "data": {"mine.server": "svc-global:53 {\n    forward . 1.2.3.4\n}\n",
                                    "other.server": "corp:53 {\n    forward . 1.2.3.5\n}\n"}})
    code, out, err = run("--flavor", flavor, "--address", ADDRESS, "--from", "-", stdin=live)
    assert code == 0, err
    assert "mine.server" in err and "other.server" not in err
    (cm,) = docs(out)
    assert set(cm["data"]) == {"mine.server", "other.server", "dnsside.server"}
    cm["data"]["mine.server"] = "corp2:53 {\n    forward . 1.2.3.4\n}\n"
    clean = run("--flavor", flavor, "--address", ADDRESS, "--from", "-",
                stdin=yaml.safe_dump(cm))
    assert clean[0] == 0 and clean[2] == ""


def test_no_doc_or_output_says_reload_ignores_imported_files() -> None:
    # CoreDNS's reload hashes the Corefile parsed with its imports expanded (coredns
    # plugin/reload/reload.go; "reload now detects changes in files imported", 1.6.1).
    code, out, _ = run("--flavor", "k3s", "--address", ADDRESS)
    assert code == 0
    docs = [ROOT / "README.md", ROOT / "deploy" / "README.md", *(ROOT / "docs").glob("*.md")]
    for text in (out, *(p.read_text() for p in docs)):
        assert "does not watch imported files" not in text
    assert "re-reads imported files" in out


def test_deploy_readme_names_every_flavour_and_the_kubeadm_alikes() -> None:
    from dnsside.ops.coredns import FLAVORS, KUBEADM_ALIKE

    readme = (ROOT / "deploy" / "README.md").read_text()
    table = readme[readme.index("| flavor |"):]
    for flavor in FLAVORS:
        assert f"| `{flavor}`" in table, flavor
    for name in KUBEADM_ALIKE:
        assert name in table.lower(), name
