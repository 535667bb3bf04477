"""What an operator sees of Linkerd's lifecycle through a running `dnsside serve` on the
demo: the answers, the warnings in the log, the metrics and `explain`."""

from __future__ import annotations

import json
import re
from typing import Any

import dns.rcode

from testkit.serve import DEMO, Dnsside, answers, demo_server, run_cli

NGINX = "nginx-svc.default.svc-global"


def explain(srv: Dnsside, name: str, rdtype: str = "A") -> dict[str, Any]:
    status, body = srv.http(f"/debug/explain?name={name}&type={rdtype}")
    assert status == 200
    report: dict[str, Any] = json.loads(body)
    return report


def members(report: dict[str, Any]) -> dict[tuple[str, str | None], dict[str, Any]]:
    return {(m["cluster"], m["hostname"]): m for m in report["members"]}


def test_demo_answers_of_the_lifecycle_fixtures() -> None:
    with demo_server() as srv:
        # A service shared only through Linkerd's federated services.
        assert answers(srv.query("payments.default.svc-global")) == ["10.43.100.20"]
        # The orphaned cluster "old" is in no answer.
        assert "10.45.0.10" not in answers(srv.query(NGINX))
        assert srv.query(f"nginx-set-0.old.{NGINX}").rcode() == dns.rcode.NXDOMAIN
        # south has headless mirroring off: its kafka is one cluster-level member.
        assert answers(srv.query("south.kafka.db.svc-global")) == ["10.44.0.20"]
        srv.wait_log("cluster old: 1 mirror is an orphan")
        # east is the right name: no configuration warning.
        assert not any("--cluster-name is" in line or "--cluster-name east is" in line
                       for line in srv.lines)


def test_explain_says_who_can_use_a_member_and_why_it_is_out() -> None:
    with demo_server() as srv:
        web = members(explain(srv, "web.default.svc-global"))
        assert "meshed clients only" in web[("north", None)]["via"]  # remote discovery
        assert "meshed clients only" in web[("federated", None)]["via"]
        assert web[("south", None)]["status"] == (
            "left out: not ready (remote service has no ready endpoints)")
        assert web[("west", None)]["status"] == "in the answer"
        orphan = explain(srv, f"nginx-set-0.old.{NGINX}")
        assert orphan["rcode"] == "NXDOMAIN"
        (m,) = orphan["members"]
        assert m["status"] == ("left out: orphaned: no Link targets cluster old (deleting a "
                               "Link leaves its mirrors behind)")
        assert explain(srv, NGINX)["links"] == "3 read (north, south, west)"


def test_cluster_name_clash_is_logged_and_never_duplicates_a_record() -> None:
    with Dnsside("--source", str(DEMO), "--cluster-name", "west") as srv:
        srv.wait_log("--cluster-name west is also the cluster name of mirrors here")
        srv.wait_log("cluster west: 6 members have the name of a local member")
        msg = srv.query(f"_http._tcp.{NGINX}", "SRV")
        targets = [rd.target.to_text() for rrset in msg.answer for rd in rrset]
        assert len(targets) == len(set(targets))
        glue = [(rrset.name.to_text(), rd.to_text()) for rrset in msg.additional for rd in rrset]
        assert len(glue) == len(set(glue))
        assert {t.split(".")[0] + "." + t.split(".")[1] for t in targets} == {
            "nginx-set-0.west", "nginx-set-1.west", "nginx-set-2.west"}
        _, text = srv.http("/metrics")
        assert 'dnsside_config_warning{warning="cluster-name-clash"} 1.0' in text
        assert 'dnsside_name_clashes{cluster="west"} 6.0' in text


def test_default_cluster_name_says_what_to_set() -> None:
    with Dnsside("--source", str(DEMO)) as srv:
        line = srv.wait_log("--cluster-name is still the default 'local'")
        assert "linkerd multicluster link --cluster-name" in line
        _, text = srv.http("/metrics")
        assert re.search(r'dnsside_config_warning\{warning="default-cluster-name"\} 1\.0', text)


def test_explain_cli_reports_links_and_warnings() -> None:
    result = run_cli(["explain", "-o", "json", "--source", str(DEMO), NGINX])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert any("--cluster-name is still the default" in w for w in report["warnings"])
    assert report["links"].startswith("3 read")
    west = next(m for m in report["members"] if m["cluster"] == "west")
    assert west["gateway_probe"].startswith("not probed yet, or off")
