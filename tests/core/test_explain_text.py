"""`dnsside explain` for a person: the report of the demo, rendered like `kubectl describe`."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from dnsside.core.explain import Explainer, render
from dnsside.core.index import IndexOptions
from dnsside.model.events import Upsert
from dnsside.model.linkerd import parse_object
from dnsside.sources.file import load_records
from testkit.inprocess import file_index, synced_index
from testkit.serve import DEMO


def explainer() -> Explainer:
    records = [parse_object(o) for o in yaml.safe_load(DEMO.read_text())["items"]]
    return Explainer(synced_index((r for r in records if r is not None),
                                  IndexOptions(cluster_name="east")))


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


def test_every_explain_error_is_one_line_and_a_failing_exit(
        monkeypatch: Any, tmp_path: Any, capsys: Any) -> None:
    """Checked before the source is loaded: a source that does not exist is never read
    (its error would be the one reported otherwise)."""
    from dnsside.cli import main

    missing = str(tmp_path / "never-read.yaml")
    cases = {
        ("nginx-svc.default.svc-global", "BOGUS"): "'BOGUS' is not a DNS record type",
        ("a" * 70 + ".svc-global", "A"): "has 70 octets; a label has 1 to 63",
        ("ünï.svc-global", "A"): "is not ASCII",
        (".", "A"): "give a name in a served zone",
    }
    for (name, qtype), message in cases.items():
        code = main(["explain", "--source", missing, name, qtype])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err
    # no kubeconfig anywhere: what serve and check say, in one line
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code = main(["explain", "nginx-svc.default.svc-global"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("dnsside: no Kubernetes configuration"), err
    assert "Traceback" not in err


def test_an_unexported_local_service_is_explained_out_of_the_clusterset_only() -> None:
    items = yaml.safe_load(DEMO.read_text())["items"]
    for o in items:
        if o["kind"] == "Service" and o["metadata"]["name"] == "nginx-svc":
            del o["metadata"]["labels"]["mirror.linkerd.io/exported"]
    records = [parse_object(o) for o in items]
    index = synced_index((r for r in records if r is not None), IndexOptions(cluster_name="east"),
                         mcs_zones=["clusterset.local."])
    explain = Explainer(index).explain

    def local_status(name: str) -> set[str]:
        return {m["status"] for m in explain(name)["members"] if m["cluster"] == "east"}

    assert local_status("nginx-svc.default.svc.clusterset.local") == {
        "left out: only exporting clusters belong to a clusterset service, and the local "
        "Service has no mirror.linkerd.io/exported label"}
    assert local_status("nginx-svc.default.svc-global") == {"in the answer"}
    mcs = explain("nginx-svc.default.svc.clusterset.local")
    assert "10.42.1.10" not in " ".join(mcs["answer"])
    assert "10.42.1.10" in " ".join(explain("nginx-svc.default.svc-global")["answer"])


def test_each_name_says_its_zone_serial_and_what_transfers_keep() -> None:
    plain = render(explainer().explain("nginx-svc.default.svc-global"))
    assert "not transferred (no --allow-transfer or --tsig-key-file)" in plain
    idx = file_index(DEMO, allow_transfer=["127.0.0.1"])
    first = idx.publisher.cut_serial  # the initial sync cut the first version
    assert first is not None
    by_pod = dataclasses.replace(
        next(r for r in load_records(DEMO)[0] if r.name == "nginx-set-0-west"),
        cluster_ips=("10.43.9.9",))
    idx.apply([Upsert(by_pod)])
    idx.publisher.cut(first + 1)
    line = next(x for x in render(Explainer(idx).explain("nginx-svc.default.svc-global"))
                .splitlines() if x.startswith("Zone:"))
    assert line == (f"Zone:            svc-global. serial {first + 1}; 1 version of differences "
                    "kept for IXFR, 6 records")


def test_a_namespace_left_out_by_the_filter_says_so() -> None:
    """It used to read "no mirror of it exists", which sends the operator to the linked
    clusters when the cause is --namespace."""
    options = IndexOptions(cluster_name="east", namespaces=("db",))
    records, _ = load_records(DEMO, frozenset(options.namespaces))  # as the source reads
    index = synced_index(records, options)
    e = Explainer(index)
    missing = e.explain("nginx-svc.default.svc-global")
    assert missing["explanation"] == ("no global service default/nginx-svc: namespace default "
                                      "is not watched (--namespace db), so none of its "
                                      "Services is read")
    assert "not watched" not in str(e.explain("kafka.db.svc-global"))
    assert "namespace default is not watched" in e.explain("default.svc-global")["explanation"]
