"""The zone as a whole, through real sockets: its apex is the zone's name server.

* `Z. NS Z.`, glue `Z. A/AAAA` from `--ns-address` (default `$POD_IP`, else a specific
  `--listen` address, else 127.0.0.1); the SOA MNAME names it; `named-checkzone` accepts
  the zone as served; the manifests give dnsside its pod IP for the glue.

EDNS (the DO bit, Extended DNS Errors, SERVFAIL before the first sync) is in
test_edns.py, truncation in test_truncation.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from dnsside.netvalues import ns_addresses
from testkit import topology as t
from testkit.dig import dig
from testkit.inprocess import ask
from testkit.rawdns import (
    AAAA,
    EDE,
    NS,
    SOA,
    TRANSPORTS,
    A,
    parse,
    query,
)
from testkit.serve import DEMO, Dnsside, answers, demo_server, run_cli


@pytest.fixture(scope="module")
def srv(sockets: Dnsside) -> Dnsside:
    """The demo plus `big.bulk` (120 addresses, too big for any UDP reply): conftest's."""
    return sockets


def ede(msg: dns.message.Message) -> list[tuple[int, str]]:
    return [(o.code, o.text or "") for o in msg.options if o.otype == EDE]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- NS and glue


def test_dig_ns_norec_shows_the_glue(srv: Dnsside) -> None:
    d = dig(srv, "svc-global", "NS", "+norec")
    assert d.status == "NOERROR" and d.flags == {"qr", "aa"}
    assert d.sections["ANSWER"] == [["svc-global.", "5", "IN", "NS", "svc-global."]]
    assert d.sections["ADDITIONAL"] == [["svc-global.", "5", "IN", "A", "127.0.0.1"]]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ns_target_exists_and_soa_names_it(srv: Dnsside, transport: str) -> None:
    ns = parse(ask(srv, query("svc-global", NS), transport))
    assert answers(ns, "NS") == ["svc-global."]
    glue = [(rr.name.to_text(), rd.to_text()) for rr in ns.additional for rd in rr]
    assert glue == [("svc-global.", "127.0.0.1")]
    a = parse(ask(srv, query("svc-global", A), transport))
    assert a.flags & dns.flags.AA and answers(a) == ["127.0.0.1"]
    aaaa = parse(ask(srv, query("svc-global", AAAA), transport))
    assert aaaa.rcode() == dns.rcode.NOERROR and not aaaa.answer, "no IPv6 address: NODATA"
    soa = parse(ask(srv, query("svc-global", SOA), transport))
    assert soa.answer[0][0].mname.to_text() == "svc-global."


def test_no_generated_name_can_be_the_ns_target(tmp_path: Path) -> None:
    """Every name a Kubernetes object can produce has at least two labels below the
    apex (`<svc>.<ns>.Z`; `<ns>.Z` is an empty non-terminal): a Service `ns` in
    namespace `dns` (the old NS target's name) is just another service now, and the
    NS target, the apex, is untouched by it."""
    objs = [t.service("dns", "ns", None, [("dns", 53)], {"mirror.linkerd.io/exported": "true"}),
            t.endpoint_slice("dns", "ns-1", "ns", [
                {"addresses": ["10.42.9.9"], "hostname": "ns", "conditions": {"ready": True}}],
                [("dns", 53)])]
    path = t.write(tmp_path / "ns.json", objs)
    with Dnsside("--source", str(path), "--cluster-name", "east") as srv:
        assert answers(srv.query("ns.dns.svc-global", "A")) == ["10.42.9.9"]
        assert answers(srv.query("svc-global", "A")) == ["127.0.0.1"]
        assert answers(srv.query("svc-global", "NS"), "NS") == ["svc-global."]
        assert srv.query("dns.svc-global", "A").rcode() == dns.rcode.NOERROR  # ENT


def dump_zone(srv: Dnsside, zone: str, path: Path) -> str:
    """The zone's apex as dnsside serves it (SOA, NS, the NS target's A/AAAA), by dig."""
    lines = []
    for rtype in ("SOA", "NS", "A", "AAAA"):
        out = subprocess.run(["dig", f"@{srv.host}", "-p", str(srv.port), "+noall", "+answer",
                              "+norec", zone, rtype], capture_output=True, text=True, timeout=30,
                             check=True).stdout
        lines += [line for line in out.splitlines() if line.strip()]
    path.write_text("\n".join(lines) + "\n")
    return path.read_text()


def named_checkzone(zone: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["named-checkzone", zone, str(path)], capture_output=True, text=True,
                          timeout=30)


def test_named_checkzone_accepts_the_zone_as_served(tmp_path: Path) -> None:
    with demo_server("--zone", "svc-global.", "--zone", "global.example.",
                     "--ns-address", "127.0.0.1", "--ns-address", "::1") as srv:
        for zone in ("svc-global", "global.example"):
            text = dump_zone(srv, zone, tmp_path / f"{zone}.db")
            assert f"{zone}.\t\t5\tIN\tNS\t{zone}." in text.replace(" ", "\t") or \
                f"IN\tNS\t{zone}." in text, text
            assert "IN\tA\t127.0.0.1" in text and "IN\tAAAA\t::1" in text, text
            check = named_checkzone(zone, tmp_path / f"{zone}.db")
            assert check.returncode == 0 and check.stdout.strip().endswith("OK"), check.stdout
    # The checker bites: the NS target of old, without an address, is rejected.
    old = tmp_path / "old.db"
    old.write_text(text.replace(f"NS\t{zone}.", f"NS\tns.dns.{zone}.")
                   .replace("IN\tA\t127.0.0.1", "IN\tTXT\t\"x\""))
    check = named_checkzone("global.example", old)
    assert check.returncode != 0 and "has no address records" in check.stdout, check.stdout


# --------------------------------------------------------------------------- --ns-address


def test_ns_address_defaults() -> None:
    assert ns_addresses(None, None, "127.0.0.1:5353") == ("127.0.0.1",)
    assert ns_addresses(None, None, "127.0.0.7:53") == ("127.0.0.7",)
    assert ns_addresses(None, None, "[::1]:5353") == ("::1",)
    assert ns_addresses(None, None, "0.0.0.0:5353") == ("127.0.0.1",), "not a specific one"
    assert ns_addresses(None, None, "[::]:5353") == ("127.0.0.1",)
    assert ns_addresses(None, None, ":5353") == ("127.0.0.1",)
    assert ns_addresses(None, None, "localhost:5353") == ("127.0.0.1",), "a name: not an address"
    assert ns_addresses(None, None, None) == ("127.0.0.1",), "explain has no --listen"
    assert ns_addresses(None, "10.42.0.17", "0.0.0.0:5353") == ("10.42.0.17",)
    assert ns_addresses(None, "10.42.0.17", "127.0.0.1:5353") == ("10.42.0.17",), "$POD_IP first"
    assert ns_addresses(None, "", "127.0.0.3:53") == ("127.0.0.3",), "empty $POD_IP: unset"
    assert ns_addresses(["fd00:0::53", "10.0.0.1", "fd00::53"], "10.42.0.17", None) == (
        "fd00::53", "10.0.0.1"), "explicit wins, normalised, deduplicated"


@pytest.mark.parametrize(
    ("explicit", "pod_ip", "message"),
    [(["nope"], None, "--ns-address: 'nope' is not an IPv4 or IPv6"),
     (["10.0.0.1", "10.0.0.300"], None, "'10.0.0.300' is not an IPv4 or IPv6 address"),
     (None, "pod", "$POD_IP: 'pod' is not an IPv4 or IPv6 address"),
     (["fe80::1%eth0"], None, "a scoped address cannot be published")],
)
def test_bad_ns_address_names_where_it_came_from(
    explicit: list[str] | None, pod_ip: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ns_addresses(explicit, pod_ip, "127.0.0.1:53")


def test_bad_ns_address_is_a_clean_cli_error() -> None:
    out = run_cli(["serve", "--source", str(DEMO), "--ns-address", "ns.example"])
    assert out.returncode == 2
    assert "dnsside: --ns-address (or DNSSIDE_NS_ADDRESS): 'ns.example' is not" in out.stderr
    assert "Traceback" not in out.stderr


def glue_of(srv: Dnsside) -> list[str]:
    ns = srv.query("svc-global", "NS")
    a = sorted(rd.to_text() for rr in ns.additional for rd in rr)
    direct = answers(srv.query("svc-global", "A"), "A") + answers(
        srv.query("svc-global", "AAAA"), "AAAA")
    assert sorted(direct) == a, "the glue is the apex's own A/AAAA"
    return a


def test_ns_address_from_pod_ip_explicit_env_and_ipv6_listen() -> None:
    with demo_server(env={"POD_IP": "127.0.5.3"}) as srv:
        assert glue_of(srv) == ["127.0.5.3"]
        assert "name server of svc-global.: the apex itself, at 127.0.5.3" in "\n".join(srv.lines)
    with demo_server("--ns-address", "127.0.5.4", "--ns-address", "fd00:5::3",
                     env={"POD_IP": "127.0.5.3"}) as srv:
        assert glue_of(srv) == ["127.0.5.4", "fd00:5::3"]
        ns = srv.query("svc-global", "NS")
        assert [dns.rdatatype.to_text(rr.rdtype) for rr in ns.additional] == ["A", "AAAA"]
    with demo_server(env={"DNSSIDE_NS_ADDRESS": "fd00:5::4,127.0.5.5"}) as srv:
        assert glue_of(srv) == ["127.0.5.5", "fd00:5::4"]
    with Dnsside("--source", str(DEMO), "--cluster-name", "east", listen="[::1]:0") as srv:
        assert srv.host == "::1" and glue_of(srv) == ["::1"]
        assert srv.query("svc-global", "A").answer == [], "IPv6 only: NODATA for A"


# --------------------------------------------------------------------------- manifests


def test_manifests_give_dnsside_its_pod_ip() -> None:
    """Both installs set POD_IP from the downward API, so the glue is the pod's address."""
    from tests.ops.test_deploy import base_deployment, sidecar_container

    (base,) = base_deployment()["spec"]["template"]["spec"]["containers"]
    for container in (base, sidecar_container()):
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert "DNSSIDE_NS_ADDRESS" not in env, "the default is the pod's address"
    assert ns_addresses(None, "10.42.0.17", "0.0.0.0:5353") == ("10.42.0.17",)
