"""dnsside/flagvalues.py: every DNSSIDE_* variable is checked as its flag is, in one line
naming the variable, the value and what it accepts; `--help` and `--version` ignore them.

(tests/serving/test_operator_messages.py runs the same mistakes through the installed
`dnsside` command, as a user meets them.)"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from dnsside.cli import main
from dnsside.config import EXPLAIN, FLAGS, SERVE, Flag, flags_for
from dnsside.flagvalues import (
    BOOLEANS,
    checked_config,
    env_value,
    flag_values,
    misspelt_variables,
)

pytestmark = pytest.mark.quick

# A value no flag of its kind accepts; None: a path, read (and refused in one line) when
# the command starts, not a value to check beforehand.
BAD_TEXT: dict[str, str | None] = {
    "--source": None, "--kubeconfig": None, "--tsig-key-file": None,
    "--cluster-name": "East", "--zone": "a..b", "--mcs-zone": "a..b", "--catalog-zone": "a..b",
    "--ns-address": "nohost", "--namespace": "Not_A_Namespace", "--links-namespace": "Not_A_Namespace",
    "--flat-network-namespaces": "Bad NS", "--listen": "nowhere", "--http-listen": "nowhere",
    "--explain-from": "notacidr", "--allow-transfer": "notacidr", "--notify": "nohost",
}


def bad_texts(f: Flag) -> list[str]:
    """Values of ``DNSSIDE_<FLAG>`` that serve must refuse: wrong in kind, or in range."""
    if f.switch:
        return ["maybe", "tru", ""]
    if f.choices:
        return ["bogus", f.choices[0].upper() + "x"]
    if f.type is int:
        return ["abc", "5s", "-1"]
    if f.type is float:
        return ["5s", "nan", "-1"]
    assert f.name in BAD_TEXT, f"{f.name}: add a value serve refuses to BAD_TEXT"
    text = BAD_TEXT[f.name]
    return [] if text is None else [text]


def every_variable() -> list[Any]:
    return [pytest.param(f, text, id=f"{f.env}={text}")
            for f in FLAGS if SERVE in f.commands for text in bad_texts(f)]


@pytest.mark.parametrize("f,text", every_variable())
def test_every_variable_is_checked_in_one_line(f: Flag, text: str) -> None:
    with pytest.raises(ValueError) as exc:
        checked_config(SERVE, {}, {f.env: text})
    message = str(exc.value)
    assert "\n" not in message
    assert f.env in message and repr(text) in message, message


def test_every_flag_has_a_bad_value_or_a_reason() -> None:
    assert {f.name for f in FLAGS if not bad_texts(f)} == {
        "--source", "--kubeconfig", "--tsig-key-file"}


@pytest.mark.parametrize("text", [*sorted(BOOLEANS), "TRUE", " Yes ", "No"])
def test_a_switch_takes_each_spelling_of_true_and_false(text: str) -> None:
    f = next(f for f in FLAGS if f.name == "--query-log")
    assert env_value(f, text) is BOOLEANS[text.strip().lower()]


@pytest.mark.parametrize("text", ["on", "off", "ture", "y", ""])
def test_a_switch_takes_only_its_six_words(text: str) -> None:
    f = next(f for f in FLAGS if f.name == "--publish-not-ready")
    with pytest.raises(ValueError, match=r"expected true or false \(also 1/0, yes/no\)$"):
        env_value(f, text)


def test_an_unknown_spelling_of_true_is_refused_not_read_as_false() -> None:
    f = next(f for f in FLAGS if f.name == "--publish-not-ready")
    with pytest.raises(ValueError, match=r"^DNSSIDE_PUBLISH_NOT_READY='ture': expected true "
                       r"or false \(also 1/0, yes/no\)$"):
        env_value(f, "ture")


def test_the_messages_say_what_is_accepted() -> None:
    cases = {"DNSSIDE_LAMEDUCK": ("5s", "DNSSIDE_LAMEDUCK='5s': expected a number of seconds, "
                                        "e.g. 5 or 0.5"),
             "DNSSIDE_TTL": ("abc", "DNSSIDE_TTL='abc': expected a whole number of seconds"),
             "DNSSIDE_LOG_LEVEL": ("verbose", "DNSSIDE_LOG_LEVEL='verbose': expected one of "
                                              "debug, info, warning, error"),
             "DNSSIDE_SRV_PRIORITY": ("bogus", "DNSSIDE_SRV_PRIORITY='bogus': expected one of "
                                               "equal, local-first"),
             "DNSSIDE_GATEWAY_PROBE": ("maybe", "DNSSIDE_GATEWAY_PROBE='maybe': expected one "
                                                "of auto, on, off"),
             "DNSSIDE_TTL ": ("-5", "--ttl must be >= 0 (from DNSSIDE_TTL='-5')")}
    for env, (text, message) in cases.items():
        with pytest.raises(ValueError) as exc:
            checked_config(SERVE, {}, {env.strip(): text})
        assert str(exc.value) == message


def test_the_command_line_replaces_the_variable() -> None:
    values = flag_values(SERVE, {"ttl": 9, "zone": ["b."], "query_log": None},
                         {"DNSSIDE_TTL": "abc", "DNSSIDE_ZONE": "a.", "DNSSIDE_QUERY_LOG": "yes"})
    assert values["ttl"] == 9 and values["zone"] == ["b."] and values["query_log"] is True
    with pytest.raises(ValueError, match=r"^--ttl must be >= 0$"):  # no variable to blame
        checked_config(SERVE, {"ttl": -1}, {"DNSSIDE_TTL": "5"})


@pytest.mark.parametrize("given,message", [
    ({"tcp_max_connections": 0}, "--tcp-max-connections must be >= 1, not 0"),
    ({"tcp_idle_timeout": 0.0}, "--tcp-idle-timeout must be > 0, not 0.0"),
    ({"reload_interval": -1.0}, "--reload-interval must be > 0, not -1.0"),
    ({"lameduck": float("nan")}, "--lameduck nan: expected a finite number"),
    ({"ttl": 2**31}, "--ttl must be <= 2147483647 (RFC 2181), not 2147483648"),
    ({"allow_transfer": ["10.0.0.1/8"]}, "--allow-transfer '10.0.0.1/8' has host bits set: "
                                         "write 10.0.0.0/8 for the network, or 10.0.0.1 for "
                                         "the one address"),
    ({"explain_from": ["::1/64"]}, "--explain-from '::1/64' has host bits set: write ::/64 "
                                   "for the network, or ::1 for the one address"),
    ({"namespace": ["Default"]}, "--namespace 'Default' is not a namespace name (a lower-case "
                                 "DNS label: letters, digits and '-')"),
])
def test_numbers_names_and_networks_serve_would_misread(given: dict[str, Any],
                                                          message: str) -> None:
    with pytest.raises(ValueError) as exc:
        checked_config(SERVE, given, {})
    assert str(exc.value) == message


def run(*words: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(words))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", [SERVE, EXPLAIN])
def test_serve_and_explain_refuse_a_bad_variable_before_anything(
        monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    monkeypatch.setenv("DNSSIDE_LOG_LEVEL", "verbose")
    words = [command] + (["x.svc-global"] if command == EXPLAIN else [])
    assert run(*words) == (2, "", "dnsside: DNSSIDE_LOG_LEVEL='verbose': expected one of "
                                  "debug, info, warning, error\n")


def test_help_and_version_do_not_read_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for f in flags_for(SERVE):
        bad = bad_texts(f)
        if bad:
            monkeypatch.setenv(f.env, bad[0])
    code, out, err = run("--version")
    assert (code, err) == (0, "") and out.startswith("dnsside ")
    for words in (["--help"], ["serve", "--help"], ["explain", "--help"]):
        code, out, err = run(*words)
        assert (code, err) == (0, "") and out.startswith("usage: dnsside"), words


def test_dnsside_alone_prints_the_help() -> None:
    code, out, err = run()
    assert code == 2 and out == ""
    assert err.startswith("usage: dnsside") and "serve" in err and "explain" in err


def test_explain_type_is_a_word_not_a_flag() -> None:
    code, out, err = run("explain", "x.svc-global", "--type", "BOGUS")
    assert (code, out) == (2, "")
    assert err == ("dnsside: explain: TYPE is the word after NAME, not a flag: `dnsside "
                   "explain NAME TYPE`, TYPE one of A, AAAA, SRV, TXT, SOA, NS or ANY\n")


def test_a_misspelt_variable_is_named_not_ignored_silently() -> None:
    assert misspelt_variables({"DNSSIDE_TLL": "5", "DNSSIDE_LISTN": "x", "DNSSIDE_TTL": "5",
                               "DNSSIDE_FUZZ_PROFILE": "long", "HOME": "/"}) == [
        "DNSSIDE_LISTN is no dnsside variable and is ignored; did you mean DNSSIDE_LISTEN?",
        "DNSSIDE_TLL is no dnsside variable and is ignored; did you mean DNSSIDE_TTL?"]
