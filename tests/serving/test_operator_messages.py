"""An operator's mistakes, met as a user meets them: the installed `dnsside` command run
from outside, each mistake one line on stderr and a non-zero exit, never a traceback.

(In-process, for every flag and variable: tests/test_flagvalues.py and
tests/ops/test_install_refuses.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.serve import DEMO

DNSSIDE = str(Path(sys.executable).parent / "dnsside")


def dnsside(*args: str, env: dict[str, str] | None = None,
            home: Path | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("DNSSIDE_") and k != "KUBECONFIG"}
    if home is not None:
        environ["HOME"] = str(home)
    return subprocess.run([DNSSIDE, *args], capture_output=True, text=True, timeout=60,
                          env={**environ, **(env or {})}, cwd=home)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("variable,value,line", [
    ("DNSSIDE_LAMEDUCK", "5s", "expected a number of seconds, e.g. 5 or 0.5"),
    ("DNSSIDE_TTL", "abc", "expected a whole number of seconds"),
    ("DNSSIDE_LOG_LEVEL", "verbose", "expected one of debug, info, warning, error"),
    ("DNSSIDE_SRV_PRIORITY", "bogus", "expected one of equal, local-first"),
    ("DNSSIDE_LOG_FORMAT", "xml", "expected one of text, json"),
    ("DNSSIDE_GATEWAY_PROBE", "maybe", "expected one of auto, on, off"),
    ("DNSSIDE_QUERY_LOG", "ture", "expected true or false (also 1/0, yes/no)"),
])
def test_a_bad_variable_is_one_line_and_help_still_works(variable: str, value: str,
                                                        line: str) -> None:
    env = {variable: value}
    out = dnsside("serve", "--source", str(DEMO), env=env)
    assert out.returncode == 2
    assert one_line(out) == f"dnsside: {variable}={value!r}: {line}"
    for words in (["--version"], ["serve", "--help"]):
        out = dnsside(*words, env=env)
        assert out.returncode == 0 and out.stderr == "", (words, out.stderr)


@pytest.mark.parametrize("words,line", [
    (["--allow-transfer", "notacidr"], "--allow-transfer 'notacidr' is not a network"),
    (["--zone", "a..b"], "--zone 'a..b': the label '' is not a host name label"),
    (["--ttl=-5"], "--ttl must be >= 0"),
    (["--notify", "nohost"], "--notify 'nohost': expected HOST:PORT"),
    (["--explain-from", "bogus"], "--explain-from 'bogus' is not a network"),
])
def test_install_refuses_what_serve_refuses(words: list[str], line: str) -> None:
    installed = dnsside("install", "--cluster-name", "east", *words)
    served = dnsside("serve", "--source", str(DEMO), *words)
    assert installed.returncode == served.returncode == 2 and installed.stdout == ""
    assert one_line(installed) == one_line(served)
    assert one_line(installed).startswith(f"dnsside: {line}")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A UDP port held by somebody else, as an mDNS responder holds 5353 (UDP only)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


def test_a_dns_port_in_use_names_the_flag_and_the_way_out(taken_port: int) -> None:
    out = dnsside("serve", "--source", str(DEMO), "--listen", f"127.0.0.1:{taken_port}",
                  "--http-listen", "127.0.0.1:0")
    assert out.returncode == 2
    assert one_line(out) == (
        f"dnsside: --listen 127.0.0.1:{taken_port}: address in use: another process listens "
        "there; choose another with --listen or DNSSIDE_LISTEN (scripts/demo.sh honours "
        "DNSSIDE_LISTEN too)")


def test_an_http_port_in_use_names_its_flag() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = dnsside("serve", "--source", str(DEMO), "--listen", "127.0.0.1:0",
                      "--http-listen", f"127.0.0.1:{port}")
    assert out.returncode == 2 and "Traceback" not in out.stderr  # (after the DNS side's log)
    assert out.stderr.splitlines()[-1] == (f"dnsside: --http-listen 127.0.0.1:{port}: address in use: "
                             "another process listens there; choose another with "
                             "--http-listen or DNSSIDE_HTTP_LISTEN")


def test_without_a_cluster_explain_and_serve_say_how_to_run_without_one(
        tmp_path: Path) -> None:
    hint = ("without a cluster, `--source FILE` serves a YAML/JSON file of Services and "
            "EndpointSlices (e.g. examples/demo-east.yaml), and ./scripts/demo.sh runs a demo")
    out = dnsside("explain", "nginx-svc.default.svc-global", home=tmp_path)
    assert out.returncode == 2
    assert one_line(out).startswith("dnsside: no Kubernetes configuration")
    assert one_line(out).endswith(hint)
    out = dnsside("serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                  home=tmp_path)
    assert out.returncode == 1
    (error,) = [line for line in out.stderr.splitlines() if " ERROR " in line]
    assert error.endswith(hint), error


def test_the_newcomers_first_tries() -> None:
    alone = dnsside()
    assert alone.returncode == 2 and alone.stderr.startswith("usage: dnsside")
    assert "serve" in alone.stderr and "the following arguments are required" not in alone.stderr
    typed = dnsside("explain", "x.svc-global", "--type", "BOGUS")
    assert typed.returncode == 2
    assert one_line(typed) == ("dnsside: explain: TYPE is the word after NAME, not a flag: "
                               "`dnsside explain NAME TYPE`, TYPE one of A, AAAA, SRV, TXT, "
                               "SOA, NS or ANY")
    unknown = dnsside("explain", "x.svc-global", "BOGUS")
    assert unknown.returncode == 2
    assert one_line(unknown) == ("dnsside: explain: 'BOGUS' is not a DNS record type: A, AAAA, "
                                 "SRV, TXT, SOA, NS or ANY")


def test_the_demo_reuses_a_ready_venv_without_pip_or_python3(tmp_path: Path) -> None:
    # scripts/demo.sh once ran `python3 -m venv` and `pip install -e` on every start (6.5 s
    # and a 9-line setuptools notice each time). With this checkout's venv ready it must go
    # straight to `dnsside serve`: here with no python3 or pip on the PATH at all, and a
    # --ttl that makes serve stop at once, in its own one line.
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "env", "dirname"):
        found = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True,
                               text=True, check=True).stdout.strip()
        (bare / tool).symlink_to(found)
    root = Path(__file__).resolve().parents[2]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DNSSIDE_")}
    out = subprocess.run([str(root / "scripts" / "demo.sh"), "--ttl=-1"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path,
                         env={**environ, "PATH": str(bare),
                              "DNSSIDE_LISTEN": "127.0.0.1:0",
                              "DNSSIDE_HTTP_LISTEN": "127.0.0.1:0"})
    assert (out.returncode, out.stdout, out.stderr) == (2, "", "dnsside: --ttl must be >= 0\n")
