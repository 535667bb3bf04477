"""`dnsside install` refuses, in the line `dnsside serve` would print and before printing
anything, every value the pods would refuse (a crash loop after `kubectl apply` is far
from the typo): it reads the ConfigMap it would write through dnsside.flagvalues, as serve
reads its environment."""

from __future__ import annotations

import contextlib
import io

import pytest

from dnsside.cli import main
from dnsside.config import SERVE
from dnsside.flagvalues import checked_config, expected
from dnsside.ops.commands import RENAMED, BakeableFlag, bakeable_flags
from tests.test_flagvalues import BAD_TEXT

pytestmark = pytest.mark.quick


def run(*words: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(words))
        except SystemExit as exc:  # argparse's own refusals (a type, a choice)
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def bad_words(option: str, serve_flag: str) -> list[str] | None:
    """A value of ``option`` the pods would refuse once baked; None for a switch, which has
    none on its own (a switch needing another is refused by install's own checks)."""
    from dnsside.config import flag

    f = flag(serve_flag)
    if f.switch:
        return None
    if f.choices or f.type in (int, float):
        return [f"{option}=-1"]  # a choice, or a number out of range
    text = BAD_TEXT[serve_flag]
    assert text is not None or serve_flag == "--tsig-key-file", serve_flag
    return [option, text if text is not None else "/nonexistent/key"]


@pytest.mark.parametrize("baked", bakeable_flags(), ids=lambda b: b.option)
def test_every_baked_flag_with_a_bad_value_is_refused_as_serve_refuses_it(
        baked: BakeableFlag) -> None:
    words = bad_words(baked.option, baked.serve_flag)
    if words is None:
        return
    needs = ["--flat-network"] if baked.serve_flag.startswith(("--flat-network-",)) else []
    code, out, err = run("install", "--cluster-name", "east", *needs, *words)
    assert code == 2 and out == "", (words, out)
    if baked.flag.choices or baked.flag.type in (int, float):
        # A value of the wrong kind, or no choice: refused while parsing, in the one line
        # serve prints for it (argparse's 30-line usage once came first, on both).
        line = f"dnsside: {baked.serve_flag} 'abc': expected {expected(baked.flag)}\n"
        assert run(SERVE, f"{baked.serve_flag}=abc") == (2, "", line)
        assert run("install", "--cluster-name", "east", f"{baked.option}=abc") == (2, "", line)
    if baked.flag.choices or baked.serve_flag == "--tsig-key-file":
        return  # refused above; the key file's own line (test_install_tsig.py)
    # The same line serve prints for the same value on its command line.
    value: object = words[-1].partition("=")[2] if "=" in words[-1] else words[-1]
    if baked.flag.type in (int, float):
        value = baked.flag.type(value)
    given = {baked.flag.dest: [value] if baked.flag.repeatable else value,
             "flat_network": True if needs else None}
    with pytest.raises(ValueError) as exc:
        checked_config(SERVE, given, {})
    serve_line = str(exc.value).replace("--namespace", RENAMED["--namespace"])
    assert err == f"dnsside: {serve_line}\n", words


@pytest.mark.parametrize("words,line", [
    (["--allow-transfer", "notacidr"], "--allow-transfer 'notacidr' is not a network such as "
                                       "10.0.0.0/8 or ::1/128"),
    (["--zone", "a..b"], "--zone 'a..b': the label '' is not a host name label (letters, "
                         "digits and '-', at most 63, '-' not first or last)"),
    (["--ttl=-5"], "--ttl must be >= 0"),
    (["--notify", "nohost"], "--notify 'nohost': expected HOST:PORT, e.g. 127.0.0.1:5353 or "
                             "[::1]:5353"),
    (["--explain-from", "bogus"], "--explain-from 'bogus' is not a network such as "
                                  "10.0.0.0/8 or ::1/128"),
    (["--watch-namespace", "Default"], "--watch-namespace 'Default' is not a namespace name "
                                       "(a lower-case DNS label: letters, digits and '-')"),
    # switches have no bad value alone; with what they need missing, serve's line too
    (["--insecure-remote-tls"], "--insecure-remote-tls weakens TLS to the linked clusters "
                                "--flat-network watches: it needs --flat-network"),
    (["--locality", "local-first", "--no-local"], "--locality local-first prefers this "
                                                   "cluster's members, which --no-local "
                                                   "leaves out: choose one"),
])
def test_the_reported_mistakes(words: list[str], line: str) -> None:
    assert run("install", "--cluster-name", "east", *words) == (2, "", f"dnsside: {line}\n")


@pytest.mark.parametrize("words,option", [
    (["--cluster-name", "east", "--ttl=-5", "monitoring"], "--cluster-name"),
    (["--ttl=-5", "monitoring"], "--ttl"),
    (["--allow-transfer", "notacidr", "monitoring"], "--allow-transfer"),
    (["--mode", "sidecar", "coredns", "--flavor", "kubeadm", "--address", "10.0.0.1"],
     "--mode"),
    (["--watch-namespace", "Default", "coredns", "--flavor", "kubeadm", "--address",
      "10.0.0.1"], "--watch-namespace"),
    (["--listen", "0.0.0.0:53", "monitoring"], "--listen"),
])
def test_a_subcommand_refuses_the_flags_of_install_it_would_drop(words: list[str],
                                                                  option: str) -> None:
    # `install --ttl -5 monitoring` printed the monitoring objects, exit 0, --ttl dropped;
    # `install --mode sidecar coredns` printed the standalone block.
    target = next(w for w in words if w in ("coredns", "monitoring"))
    assert run("install", *words) == (2, "", (
        f"dnsside: {option} is a flag of `dnsside install`, which `install {target}` does "
        f"not read; `dnsside install {target} --help` lists its own, given after "
        f"`{target}`\n"))


def test_a_subcommand_with_its_own_flags_only_still_prints() -> None:
    code, out, err = run("install", "coredns", "--flavor", "kubeadm", "--address",
                         "10.0.0.1", "--block-only")
    assert (code, err) == (0, "") and "forward . 10.0.0.1:53" in out
    code, out, err = run("install", "monitoring", "--mode", "sidecar")
    assert (code, err) == (0, "") and "PrometheusRule" in out


def test_the_shells_variables_are_not_baked_and_install_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # install bakes its command line only: a DNSSIDE_TTL left in the shell from running
    # serve by hand is neither baked nor a reason to refuse, but it is named.
    monkeypatch.setenv("DNSSIDE_TTL", "abc")
    monkeypatch.setenv("DNSSIDE_ZONE", "example.")
    monkeypatch.setenv("DNSSIDE_FUZZ_PROFILE", "long")  # no flag's: not named
    code, out, err = run("install", "--cluster-name", "east")
    assert code == 0 and "DNSSIDE_TTL" not in out and "DNSSIDE_ZONE" not in out
    assert err == ("dnsside: warning: install bakes only the flags on its command line; "
                   "DNSSIDE_TTL, DNSSIDE_ZONE in this environment are not read (give the "
                   "flag instead)\n")
    monkeypatch.delenv("DNSSIDE_TTL")
    monkeypatch.delenv("DNSSIDE_ZONE")
    assert run("install", "--cluster-name", "east")[2] == ""
