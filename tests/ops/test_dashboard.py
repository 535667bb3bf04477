"""dnsside's Grafana dashboard (dnsside/ops/dashboard.py), checked with real tools.

* every panel's PromQL through `promtool check rules`, as recording rules, Grafana's
  variables replaced by what Grafana sends;
* every metric a panel names is served on /metrics by a running dnsside;
* against a real Prometheus scraping a running dnsside, the panels of what that dnsside
  does (answers, latency, members, connections, locality, transfers, memory...) show
  series, their legends' labels on them;
* the JSON has the shape Grafana loads (a schema of our own: ids, gridPos, targets with
  expr, the datasource/namespace/pod variables), and the ConfigMap `dnsside install
  monitoring` prints carries it with the label Grafana's dashboard sidecar looks for.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dnsside.ops import dashboard as dash
from testkit.clusters import linked_cluster, local_cluster, serve_flat
from testkit.flatnet import local_objects, west_objects
from testkit.gateways import FakeGateway, probed_demo
from testkit.resolvers import free_port
from testkit.serve import NGINX, ROOT, Dnsside, demo_server, wait_for
from tests.ops.test_install import cli, docs, one, promtool

# What Grafana puts in place of its variables before the query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$namespace": "dnsside", "$pod": "dnsside-.*",
                     "${datasource}": "prometheus"}


def promql(expr: str) -> str:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def targets(board: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(p, t) for p in board["panels"] if p["type"] != "row" for t in p["targets"]]


# --------------------------------------------------------------------------- PromQL


def rule_file(board: dict[str, Any]) -> dict[str, Any]:
    rules = [{"record": f"dnsside:dashboard:panel{p['id']}_{t['refId']}",
              "expr": promql(t["expr"])} for p, t in targets(board)]
    return {"groups": [{"name": "dnsside-dashboard", "rules": rules}]}


def test_promtool_checks_every_panel_expression(tmp_path: Path) -> None:
    board = dash.dashboard()
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rule_file(board)))
    proc = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(targets(board))
    assert n >= 25 and f"SUCCESS: {n} rules found" in proc.stdout, proc.stdout
    # Guards the guard: one broken expression fails the check.
    board["panels"][1]["targets"][0]["expr"] = "sum by (rcode (dnsside_queries_total)"
    path.write_text(yaml.safe_dump(rule_file(board)))
    bad = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0


KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: every identifier that is not a
    function or aggregation (followed by a parenthesis), a keyword, or inside a string,
    label matcher, range or grouping clause."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", s):
        if s[m.end():].lstrip().startswith("(") or m.group().lower() in KEYWORDS:
            continue
        names.add(m.group())
    return names


@pytest.mark.quick
def test_metric_names_are_read_from_promql() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, transport) (rate(dnsside_answer_duration_'
            'seconds_bucket{namespace=~"$namespace", pod=~"a_b"}[5m]))) / on (pod) '
            'group_left (x) max(up) > bool 0 and count by (state) (dnsside_gateway_probe_state'
            ' == 1)')
    assert metric_names(expr) == {"dnsside_answer_duration_seconds_bucket", "up",
                                  "dnsside_gateway_probe_state"}


def exported(text: str) -> set[str]:
    """Every sample name a /metrics text can carry, labelled families without a series
    yet included (their # TYPE line is there)."""
    suffixes = {"counter": ("_total", "_created"), "gauge": ("",), "info": ("_info",),
                "histogram": ("_bucket", "_count", "_sum", "_created"), "unknown": ("",),
                "summary": ("", "_count", "_sum", "_created")}
    return {f.name + s for f in text_string_to_metric_families(text) for s in suffixes[f.type]}


def test_every_panel_names_only_metrics_dnsside_serves() -> None:
    with demo_server() as srv:
        status, text = srv.http("/metrics")
    assert status == 200
    served = exported(text)
    board = dash.dashboard()
    used = {n for _, t in targets(board) for n in metric_names(t["expr"])}
    used |= {n for v in board["templating"]["list"][1:] for n in metric_names(
        re.sub(r"^label_values\((.+), \w+\)$", r"\1", v["definition"]))}
    assert used - served == set(), "panels name metrics dnsside does not serve"
    # The topics the dashboard is for, by the metric that shows each.
    assert {"dnsside_queries_total", "dnsside_answer_duration_seconds_bucket",
            "dnsside_members", "dnsside_gateway_probe_state", "dnsside_links_watch_up",
            "dnsside_remote_synced", "dnsside_transfers_total", "dnsside_notifies_total",
            "process_resident_memory_bytes", "dnsside_dropped_connections_total",
            "dnsside_locality_spilled_services", "dnsside_remote_throttled"} <= used
    # Guards the guard: a misspelt name is caught.
    assert metric_names("sum(rate(dnsside_querys_total[1m]))") - served == {
        "dnsside_querys_total"}


# --------------------------------------------------------------------------- a real Prometheus

SCRAPE = "1s"
LIVE_VARIABLES = {**GRAFANA_VARIABLES, "$__rate_interval": "10s", "$pod": "dnsside-0"}
# The panels that show series for a dnsside on the demo topology that probes gateways and
# answered queries over UDP and TCP; the others need --flat-network or a watch that restarted.
SHOWN = {"Answers by rcode", "Answers by query type", "Answer latency", "Dropped connections",
         "Open connections", "Dropped packets", "Members by cluster", "Global services",
         "Sources synced", "Index update time", "Locality spill", "Link watch",
         "Gateways by probe state", "Gateway probe failures", "Transfers", "NOTIFYs",
         "Transfer bytes", "Memory", "CPU"}


@contextlib.contextmanager
def scraping(srv: Dnsside, tmp: Path) -> Iterator[str]:
    """The address of a Prometheus scraping ``srv`` every second, labelled as the
    PodMonitor's scrape labels it (namespace, pod)."""
    config = tmp / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
        "scrape_configs": [{"job_name": "dnsside", "static_configs": [{
            "targets": [f"127.0.0.1:{srv.http_port}"],
            "labels": {"namespace": "dnsside", "pod": "dnsside-0"}}]}]}))
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp}/tsdb",
         f"--web.listen-address={address}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _get(address, "/-/ready") is not None, 30, "prometheus ready")
        yield address
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Dnsside, dict[str, FakeGateway], str]]:
    """A demo dnsside probing its links' gateways, those, and a Prometheus scraping it."""
    gateways = {c: FakeGateway().start() for c in ("west", "north", "south")}
    demo = probed_demo(tmp_path, gateways)
    with contextlib.ExitStack() as stack:
        for gw in gateways.values():
            stack.callback(gw.stop)
        srv = stack.enter_context(Dnsside(
            "--source", str(demo), "--cluster-name", "east", "--gateway-probe", "on",
            "--gateway-probe-period", "0.2", "--gateway-probe-timeout", "0.2"))
        yield srv, gateways, stack.enter_context(scraping(srv, tmp_path))


def _get(address: str, path: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return None


def instant(address: str, expr: str) -> list[dict[str, Any]]:
    text = _get(address, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert text is not None, expr
    body = json.loads(text)
    assert body["status"] == "success", (expr, body)
    return list(body["data"]["result"])


def live(expr: str) -> str:
    for var, value in LIVE_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def results(address: str, board: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each target's series now, by "panel title/refId"."""
    return {f"{p['title']}/{t['refId']}": instant(address, live(t["expr"]))
            for p, t in targets(board)}


def legends_match(board: dict[str, Any], found: dict[str, list[dict[str, Any]]]) -> None:
    for p, t in targets(board):
        for series in found[f"{p['title']}/{t['refId']}"]:
            for label in re.findall(r"\{\{(\w+)\}\}", t["legendFormat"]):
                assert label in series["metric"], (p["title"], label, series)


def by_cluster(series: list[dict[str, Any]]) -> dict[str, float]:
    return {s["metric"]["cluster"]: float(s["value"][1]) for s in series}




def test_flat_network_panels_show_a_linked_cluster(tmp_path: Path) -> None:
    """--flat-network against two fake API servers (east local, west linked): west's row
    shows it synced, its credentials valid, and not throttled (0, not "No data")."""
    with contextlib.ExitStack() as stack:
        west = linked_cluster(tmp_path / "west", west_objects())
        stack.callback(west.close)
        east = local_cluster(tmp_path / "east", local_objects(), {"west": west})
        stack.callback(east.close)
        srv = stack.enter_context(serve_flat(east))
        address = stack.enter_context(scraping(srv, tmp_path))
        board = dash.dashboard()
        flat = ("Remote API synced", "Remote credentials valid", "Remote throttled")

        def shown() -> dict[str, list[dict[str, Any]]] | None:
            found = results(address, board)
            return found if all(found[f"{title}/A"] for title in flat) else None

        found = wait_for(shown, 60, "west in the flat network panels")
        legends_match(board, found)
        assert by_cluster(found["Remote API synced/A"]) == {"west": 1}
        assert by_cluster(found["Remote credentials valid/A"]) == {"west": 1}
        assert by_cluster(found["Remote throttled/A"]) == {"west": 0}


def test_panels_show_a_scraped_dnsside(
        prometheus: tuple[Dnsside, dict[str, FakeGateway], str]) -> None:
    srv, gateways, address = prometheus
    # A gateway that answered and then fails is "failing" (one never answered is not).
    wait_for(lambda: srv.metric("dnsside_gateway_probe_state", cluster="south",
                                state="alive") == 1, 10, "south's gateway alive")
    gateways["south"].mode = "fail"
    for i in range(80):  # UDP is sampled 1 in 64 for the latency histogram; TCP every query
        srv.query(NGINX, "A", tcp=i % 8 == 0)
        srv.query("nothing.default.svc-global", "A")
    board = dash.dashboard()

    def all_shown() -> dict[str, list[dict[str, Any]]] | None:
        found = results(address, board)
        return found if all(found[f"{title}/A"] for title in SHOWN) else None

    def settled() -> dict[str, list[dict[str, Any]]] | None:
        found = all_shown()
        states = [s["metric"]["state"] for s in found["Gateways by probe state/A"]] \
            if found else []
        return found if sorted(states) == ["alive", "failing"] else None

    found = wait_for(settled, 60, "a series in each panel of SHOWN, the probes settled")
    legends_match(board, found)
    # The namespace and pod variables list the scraped pod.
    for variable in board["templating"]["list"][1:]:
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
        assert m, variable["definition"]
        values = {s["metric"].get(m.group(2)) for s in instant(address, live(m.group(1)))}
        assert values == {"dnsside" if m.group(2) == "namespace" else "dnsside-0"}, variable
    rcodes = {s["metric"]["rcode"] for s in found["Answers by rcode/A"]}
    assert {"NOERROR", "NXDOMAIN"} <= rcodes
    states = {s["metric"]["state"]: float(s["value"][1])
              for s in found["Gateways by probe state/A"]}
    assert states.get("failing") == 1 and states.get("alive") == 2, states
    failing = {s["metric"]["cluster"] for s in found["Gateway probe failures/A"]
               if float(s["value"][1]) > 0}
    assert failing == {"south"}
    memory = found["Memory/A"]
    assert len(memory) == 1 and float(memory[0]["value"][1]) > 10e6


# --------------------------------------------------------------------------- JSON shape

VARIABLE = {"type": "object", "required": ["name", "type"],
            "properties": {"name": {"type": "string"}, "type": {"type": "string"}}}
DATASOURCE_REF = {"type": "object", "required": ["type", "uid"],
                  "properties": {"type": {"const": "prometheus"},
                                 "uid": {"const": "${datasource}"}}}
GRID_POS = {"type": "object", "required": ["h", "w", "x", "y"], "additionalProperties": False,
            "properties": {"h": {"type": "integer", "minimum": 1},
                           "w": {"type": "integer", "minimum": 1, "maximum": 24},
                           "x": {"type": "integer", "minimum": 0, "maximum": 23},
                           "y": {"type": "integer", "minimum": 0}}}
PANEL = {
    "type": "object", "required": ["id", "type", "title", "gridPos"],
    "properties": {"id": {"type": "integer", "minimum": 1}, "gridPos": GRID_POS,
                   "title": {"type": "string", "minLength": 1}},
    "if": {"properties": {"type": {"const": "row"}}},
    "then": {"required": ["panels", "collapsed"],
             "properties": {"panels": {"maxItems": 0}, "collapsed": {"const": False}}},
    "else": {
        "required": ["datasource", "description", "targets", "fieldConfig"],
        "properties": {
            "type": {"const": "timeseries"}, "datasource": DATASOURCE_REF,
            "description": {"type": "string", "minLength": 20, "pattern": r"^[^\n]*\.$"},
            "fieldConfig": {"type": "object", "required": ["defaults", "overrides"],
                            "properties": {"defaults": {"type": "object",
                                                        "required": ["unit"]}}},
            "targets": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["refId", "expr", "datasource"],
                "properties": {"refId": {"type": "string", "pattern": "^[A-Z]$"},
                               "expr": {"type": "string", "minLength": 1},
                               "legendFormat": {"type": "string"},
                               "datasource": DATASOURCE_REF}}}}},
}
DASHBOARD_SCHEMA = {  # Grafana's classic dashboard model, the parts dnsside's uses
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 39},
        "time": {"type": "object", "required": ["from", "to"]},
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
        "templating": {"type": "object", "required": ["list"],
                       "properties": {"list": {"type": "array", "items": VARIABLE}}},
    },
}


def check_shape(board: dict[str, Any]) -> None:
    """Raise when Grafana would not load ``board`` as meant."""
    jsonschema.validate(board, DASHBOARD_SCHEMA)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {ids}"
    cells: dict[tuple[int, int], str] = {}
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]
        if p["type"] != "row":
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), p["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "pod"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"] == dash.DATASOURCE
        assert "label_values(dnsside_build_info" in variables[name]["definition"]


@pytest.mark.quick
def test_the_dashboard_has_the_shape_grafana_loads() -> None:
    board = dash.dashboard()
    check_shape(board)
    titles = [p["title"] for p in board["panels"] if p["type"] != "row"]
    assert len(titles) == len(dash.panels()) == len(set(titles))
    # Every series is one of the pods the variables choose.
    for panel, target in targets(board):
        assert 'namespace=~"$namespace", pod=~"$pod"' in target["expr"], panel["title"]


@pytest.mark.quick
@pytest.mark.parametrize("break_it", ["duplicate id", "no expr", "overlap", "two lines"])
def test_the_shape_check_catches_a_broken_dashboard(break_it: str) -> None:
    board = dash.dashboard()
    panel = board["panels"][2]
    if break_it == "duplicate id":
        panel["id"] = board["panels"][1]["id"]
    elif break_it == "no expr":
        del panel["targets"][0]["expr"]
    elif break_it == "overlap":
        panel["gridPos"] = dict(board["panels"][1]["gridPos"])
    else:
        panel["description"] = "first line.\nsecond line."
    with pytest.raises((AssertionError, jsonschema.ValidationError)):
        check_shape(board)


# --------------------------------------------------------------------------- shipping


@pytest.mark.quick
def test_install_monitoring_prints_the_dashboard_for_grafanas_sidecar() -> None:
    for args, namespace in (((), "dnsside"), (("--mode", "sidecar"), "kube-system"),
                            (("--dashboard-namespace", "monitoring"), "monitoring")):
        code, out, err = cli("install", "monitoring", "--label", "release=prom", *args)
        assert code == 0, err
        cm = one(docs(out), "ConfigMap")
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["labels"]["release"] == "prom"
        assert cm["metadata"]["namespace"] == namespace
        ((key, text),) = cm["data"].items()
        assert key.endswith(".json") and json.loads(text) == dash.dashboard()
        for version in ("1.29", "1.33"):
            assert kubernetes_validate.validate(cm, version, strict=True) == version
        # `kubectl apply` (client side) copies the object into an annotation of 256 KiB.
        assert len(json.dumps(cm)) < 128 * 1024


@pytest.mark.quick
def test_deploy_ships_the_dashboard() -> None:
    text = (ROOT / "deploy" / "monitoring" / dash.FILE_NAME).read_text()
    assert json.loads(text) == dash.dashboard()
    objs = docs((ROOT / "deploy" / "monitoring" / "monitoring.yaml").read_text())
    assert json.loads(one(objs, "ConfigMap")["data"][dash.FILE_NAME]) == dash.dashboard()


@pytest.mark.quick
def test_the_dashboard_shows_what_issue_37_lists_and_the_metrics_added_since() -> None:
    """Answers by rcode, latency, members by cluster, gateway health, link and remote state,
    transfers and NOTIFYs, memory over time; and what came after the dashboard: transfers
    being sent, NOTIFYs given up, heap trims, list retries, relists, Links refused."""
    used = {n for _, t in targets(dash.dashboard()) for n in metric_names(t["expr"])}
    assert {"dnsside_queries_total", "dnsside_answer_duration_seconds_bucket",
            "dnsside_members", "dnsside_gateway_probe_state", "dnsside_links_watch_up",
            "dnsside_remote_synced", "dnsside_transfers_total", "dnsside_notifies_total",
            "process_resident_memory_bytes",
            "dnsside_transfers_sending", "dnsside_notify_given_up",
            "dnsside_heap_trims_total", "dnsside_heap_trim_mode",
            "dnsside_list_retries_total", "dnsside_relists_total",
            "dnsside_links_refused"} <= used, used
    for panel in dash.panels():  # each with its one line
        assert panel.description and "\n" not in panel.description, panel.title
