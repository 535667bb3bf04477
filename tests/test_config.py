"""dnsside/config.py: the flag table, its DNSSIDE_<FLAG> spelling, host:port and zones."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

from dnsside.cli import build_parser, main, serve_parser
from dnsside.config import (
    COMMANDS,
    EXPLAIN,
    FLAGS,
    INSTALL,
    SERVE,
    Config,
    flag,
    flags_for,
    normal_zone,
)
from dnsside.flagvalues import checked_config
from dnsside.netvalues import split_hostport
from testkit.serve import parser_options

pytestmark = pytest.mark.quick


def test_every_flag_has_one_env_name_and_a_config_home() -> None:
    assert len({f.env for f in FLAGS}) == len(FLAGS)
    assert flag("--srv-priority").env == "DNSSIDE_SRV_PRIORITY"
    config = Config()
    for f in FLAGS:
        assert f.name.startswith("--") and f.commands
        if f.dest in vars(config) and not f.repeatable:
            assert getattr(config, f.dest) == f.default, f.name
    # install bakes what serve takes, minus what the layout decides
    assert set(flags_for(INSTALL)) < set(flags_for(SERVE))
    assert {f.name for f in flags_for(SERVE)} - {f.name for f in flags_for(INSTALL)} == {
        "--source", "--kubeconfig", "--cluster-name", "--listen", "--http-listen"}
    assert set(flags_for(EXPLAIN)) < set(flags_for(SERVE))


def test_the_parsers_offer_exactly_the_table() -> None:
    options = set(parser_options(serve_parser()))
    assert options - {"-h", "--help"} == {f.name for f in flags_for(SERVE)}


@pytest.mark.parametrize("name,text,value", [
    ("--ttl", "7", 7), ("--publish-not-ready", "Yes", True), ("--no-local", "0", False),
    ("--zone", "a.,,b.", ["a.", "b."]), ("--gateway-probe-timeout", "2.5", 2.5),
])
def test_env_values_read_back_what_install_writes(name: str, text: str, value: object) -> None:
    f = flag(name)
    assert f.from_env(text) == value
    assert f.from_env(f.to_env(value)) == value


def test_a_comma_cannot_go_through_a_list() -> None:
    with pytest.raises(ValueError, match="DNSSIDE_ZONE"):
        flag("--zone").to_env(["a,b."])


@pytest.mark.parametrize("text,default,expected", [
    ("127.0.0.1:5353", None, ("127.0.0.1", 5353)),
    ("[::1]:53", None, ("::1", 53)),
    (":5353", None, ("", 5353)),
    ("10.0.0.1", 5353, ("10.0.0.1", 5353)),
    ("fd00::53", 5353, ("fd00::53", 5353)),
    ("[fd00::53]", 53, ("fd00::53", 53)),
])
def test_one_host_port_grammar(text: str, default: int | None, expected: tuple[str, int]
                               ) -> None:
    assert split_hostport(text, default) == expected


@pytest.mark.parametrize("text,default", [
    ("127.0.0.1", None), ("::1:5353", None), ("[::1]5353", None), ("host:port", None),
    ("host:70000", None), ("[::1", 53),
])
def test_what_the_grammar_refuses(text: str, default: int | None) -> None:
    with pytest.raises(ValueError):
        split_hostport(text, default)


def test_zones_are_lower_case_and_absolute() -> None:
    assert normal_zone(" SVC-Global ") == "svc-global."
    for bad in ("a..b.", "x" * 64 + ".", "ünï.", "a." * 128, "svc_global!", "bad zone",
                "*.x", "-a.", "a-."):
        with pytest.raises(ValueError, match="is not a host name label|longer than"):
            normal_zone(bad)


def test_the_root_is_no_zone() -> None:
    """`--zone ''` or `.` would make dnsside authoritative for every name: NXDOMAIN with
    the root's SOA for example.com instead of REFUSED."""
    for root in ("", ".", " "):
        with pytest.raises(ValueError, match="is the root"):
            normal_zone(root, "--zone")
    for flag_name in ("--zone", "--mcs-zone"):
        args = build_parser(admin=False).parse_args(["serve", flag_name, "."])
        with pytest.raises(ValueError, match=f"{flag_name} '.' is the root"):
            Config.from_flags(args.command, vars(args))


def test_a_cluster_name_is_never_lower_cased_quietly() -> None:
    """It must equal the Links' targetClusterName: refused, with the spelling that would
    do, rather than changed behind the user's back."""
    for bad, fixed in (("East", "east"), ("East_1", "east-1"), ("a_", "a")):
        args = build_parser(admin=False).parse_args(["serve", "--cluster-name", bad])
        config = Config.from_flags(args.command, vars(args))
        with pytest.raises(ValueError, match=f"--cluster-name '{bad}' is not a lower-case DNS "
                           f"label.*did you mean '{fixed}'"):
            config.check()


def test_config_from_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for f in FLAGS:
        monkeypatch.delenv(f.env, raising=False)
    monkeypatch.setenv("DNSSIDE_TTL", "9")
    args = build_parser(admin=False).parse_args(
        ["serve", "--zone", "Svc-Global", "--zone", "svc-global.", "--cluster-name", "east",
         "--mcs-zone", "ClusterSet.Local", "--listen", "10.0.0.5:53", "--udp-io", "plain"])
    config = checked_config(args.command, vars(args), os.environ)
    assert config.zones == ("svc-global.",) and config.mcs_zones == ("clusterset.local.",)
    assert config.cluster_name == "east" and config.ttl == 9 and config.udp_io == "plain"
    assert config.ns_addresses == ("10.0.0.5",)
    config.check()
    explain = build_parser(admin=False).parse_args(["explain", "x.svc-global"])
    config = Config.from_flags(explain.command, vars(explain))
    assert config.listen == flag("--listen").default and config.ns_addresses == ("127.0.0.1",)


def test_config_check_names_the_flag() -> None:
    for kwargs, word in (({"cluster_name": "a_"}, "--cluster-name"), ({"ttl": -1}, "--ttl"),
                         ({"mcs_zones": ("svc-global.",)}, "--mcs-zone"),
                         ({"listen": "nowhere"}, "--listen"),
                         ({"gateway_probe_failures": 0}, "--gateway-probe-failures")):
        with pytest.raises(ValueError, match=word):
            Config(**kwargs).check()


def test_every_serve_flag_is_in_the_docs_flag_table() -> None:
    """docs/flags.md's table is what users read: a flag missing there does not exist
    for them."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "flags.md").read_text()
    table = text.split("\n| flag | meaning | default |\n", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"(?:^\| |, |/ )`(--[a-z0-9-]+)[ `]", table, re.M))
    missing = [f.name for f in flags_for(SERVE) if f.name not in named]
    assert not missing, f"docs/flags.md's flag table lacks {missing}"


def test_explain_from_accepts_networks_and_counts_mapped_loopback() -> None:
    from dnsside.netvalues import allowed_peer, networks
    nets = networks(["127.0.0.0/8", "::1", "10.1.2.3"], "--explain-from")
    assert allowed_peer("127.0.0.1", nets) and allowed_peer("::ffff:127.0.0.5", nets)
    assert allowed_peer("::1", nets) and allowed_peer("10.1.2.3", nets)
    assert not allowed_peer("10.1.2.4", nets) and not allowed_peer("fe80::1%eth0", nets)
    assert not allowed_peer("", nets) and not allowed_peer("127.0.0.1", ())
    with pytest.raises(ValueError, match="--explain-from 'lo' is not a network"):
        networks(["lo"], "--explain-from")


def run_main(*argv: str) -> tuple[int, str, str]:
    """`dnsside ARGV` in this process, up to argument parsing errors and help."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_help_shows_each_flags_default_and_variable() -> None:
    text = " ".join(serve_parser().format_help().split())  # argparse wraps anywhere
    for f in flags_for(SERVE):
        assert f"env {f.env}" in text, f.name
        assert f"default {' '.join(f.shown_default.split())}" in text, f.name
    usage = serve_parser().format_usage()
    # metavars are words a user writes, never an internal name
    assert not re.findall(r"[A-Z]+_[A-Z_]+", usage), usage


def test_usage_lists_every_command_and_what_each_is_for() -> None:
    for argv in ((), ("serve", "--bogus")):
        code, _, err = run_main(*argv)
        assert code == 2
    code, out, _ = run_main("--help")
    assert code == 0
    for command, purpose in COMMANDS.items():
        assert command in out and " ".join(purpose.split()[:4]) in " ".join(out.split())
    # a typo'd flag is named by the command's own parser, whose usage lists its flags
    code, _, err = run_main("serve", "--bogus")
    assert code == 2 and "dnsside serve: error: unrecognized arguments: --bogus" in err
    assert "--cluster-name NAME" in err
    for argv in (("install", "--bogus"), ("check", "--bogus")):
        code, _, err = run_main(*argv)
        assert code == 2 and f"dnsside {argv[0]}: error: unrecognized" in err, err


def test_help_says_what_the_code_does() -> None:
    """Help that was not true: --notify said "retried until it answers" after NOTIFYs
    stopped at TRIES a version; --source FILE left out the Links its file is read for."""
    from dnsside.config import flag
    from dnsside.serving.notify import TRIES

    assert f"({TRIES} tries a version at most)" in (flag("--notify").help or "")
    assert "Links" in (flag("--source").help or "")
    allow = flag("--allow-transfer")  # issue 37: it said "(default nobody)" alone
    assert "with --tsig-key-file alone, any address with the key" in (allow.default_text or "")
