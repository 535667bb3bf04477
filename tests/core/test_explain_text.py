"""`dnsside explain` for a person: the report of the demo, rendered like `kubectl describe`."""

from __future__ import annotations

import yaml

from dnsside.core.explain import Explainer, render
from dnsside.core.index import Index, IndexOptions, make_responder
from dnsside.model.events import Kind, Replace, Synced
from dnsside.model.linkerd import parse_object
from testkit.serve import DEMO


def explainer() -> Explainer:
    options = IndexOptions(cluster_name="east")
    index = Index(make_responder(["svc-global."], options.zone), options)
    records = [parse_object(o) for o in yaml.safe_load(DEMO.read_text())["items"]]
    index.apply([Replace(frozenset(Kind), tuple(r for r in records if r is not None)), Synced()])
    return Explainer(index)


def test_a_service_reads_as_question_answer_and_one_line_per_member() -> None:
    text = render(explainer().explain("nginx-svc.default.svc-global"))
    lines = text.splitlines()
    assert lines[0] == "Question:        nginx-svc.default.svc-global A"
    assert lines[1] == "Answer:          NOERROR, 5 records"
    assert "  nginx-svc.default.svc-global. 5 IN A 10.42.1.10" in lines  # as dig prints it
    assert "Links:           3 read (north, south, west)" in lines
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("CLUSTER"))
    members = lines[header + 1:]
    assert len(members) == 8  # 2 local, 2 north, 3 west, 1 orphan
    east = members[0].split()
    assert east[:4] == ["east", "nginx-set-0", "10.42.1.10", "yes"]
    assert members[0].endswith("local endpoint")
    orphan = next(m for m in members if m.split()[0] == "old")
    assert " no " in orphan and orphan.endswith(
        "orphaned: no Link targets cluster old (deleting a Link leaves its mirrors behind)")
    north = next(m for m in members if m.split()[0] == "north")
    assert "Service default/nginx-set-0-north (+1)" in north and "not ready" in north


def test_names_without_members_explain_themselves() -> None:
    e = explainer()
    refused = render(e.explain("example.com"))
    assert "Answer:          REFUSED, 0 records" in refused
    assert "Explanation:     outside every served zone: REFUSED" in refused
    nxdomain = render(e.explain("nginx-set-0.old.nginx-svc.default.svc-global"))
    assert "Answer:          NXDOMAIN, 0 records" in nxdomain
    assert "Authority:       1 record" in nxdomain
    bad = render(e.explain("x", "NOPE"))
    assert bad.splitlines()[1].startswith("Error:           cannot build a query")


def test_the_cli_prints_text_by_default_and_json_or_yaml_when_asked() -> None:
    import json

    import yaml

    from testkit.serve import run_cli

    base = ["explain", "--source", str(DEMO), "--cluster-name", "east",
            "nginx-svc.default.svc-global"]
    text = run_cli(base)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("Question:        nginx-svc.default.svc-global A\n")
    as_json = json.loads(run_cli([*base, "-o", "json"]).stdout)
    assert as_json == yaml.safe_load(run_cli([*base, "-o", "yaml"]).stdout)
    assert as_json["rcode"] == "NOERROR" and len(as_json["members"]) == 8
