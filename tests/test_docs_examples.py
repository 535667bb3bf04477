"""The command examples of docs/troubleshooting.md and docs/operating.md are real output,
and stay so: each ```console block's `$ command` is run again and its output compared.

`dnsside explain --source examples/demo-east.yaml ...` is run as written (in this
process) and compared line for line (quick). The others need something running,
started here as the page says it was: `dig` and `curl` against port 5353/9153 ask the
demo (`dnsside serve --source examples/demo-east.yaml --cluster-name east`), against
5300/9300 a dnsside whose API server does not answer, against 5354 nothing; `dnsside
check` runs against the fake API server holding the demo's objects, as `dnsside install`
leaves a cluster. dig is not needed: its question is asked with dnspython, and what the
example shows (status, flags, EDE, records) is compared with the answer. Only the SOA
serial (the time it was cut) and the message ID are left out of the comparison.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from testkit.serve import ROOT, Dnsside, demo_server

PAGES = [ROOT / "docs" / "troubleshooting.md", ROOT / "docs" / "operating.md"]
DEMO_DNS, DEMO_HTTP = 5353, 9153  # the demo's ports, as the pages show them
UNSYNCED_DNS, UNSYNCED_HTTP = 5300, 9300  # a dnsside whose API server does not answer
NOTHING = 5354  # where nothing listens

_CONSOLE = re.compile(r"^```console\n(.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Example:
    where: str  # page:line, for the failure message
    command: str
    output: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command)

    def __str__(self) -> str:
        return f"{self.where}: $ {self.command}"


def examples(page: Path) -> Iterator[Example]:
    """Each `$ command` of a console block and the lines after it, up to the next."""
    text = page.read_text()
    for block in _CONSOLE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        command: str | None = None
        start, output = 0, []
        for n, line in enumerate(block.group(1).splitlines(), first):
            if line.startswith("$ "):
                if command is not None:
                    yield Example(f"{page.name}:{start}", command, "\n".join(output).strip("\n"))
                command, start, output = line[2:], n, []
            else:
                output.append(line)
        if command is not None:
            yield Example(f"{page.name}:{start}", command, "\n".join(output).strip("\n"))


ALL = [e for page in PAGES for e in examples(page)]
EXPLAIN = [e for e in ALL if e.argv[:2] == ["dnsside", "explain"]]
CHECK = [e for e in ALL if e.argv[:2] == ["dnsside", "check"]]
DIG = [e for e in ALL if e.argv[0] == "dig"]
CURL = [e for e in ALL if e.argv[0] == "curl"]


def normal(text: str) -> str:
    """What must match: the SOA serial and the message ID vary from run to run, and dig
    separates fields with tabs where explain uses spaces."""
    text = re.sub(r"(hostmaster\.\S+\s+)\d+", r"\1SERIAL", text)
    text = re.sub(r"id: \d+", "id: ID", text)
    return "\n".join(" ".join(line.split()) if not line.startswith("  ") else line.rstrip()
                     for line in text.strip("\n").splitlines())


def test_every_example_is_checked() -> None:
    """A new kind of example must come with its check here."""
    assert len(EXPLAIN) >= 4 and CHECK and len(DIG) >= 4 and CURL
    unchecked = [str(e) for e in ALL if e not in (*EXPLAIN, *CHECK, *DIG, *CURL)]
    assert not unchecked, unchecked
    for e in EXPLAIN:  # these run on the demo file, without a cluster
        assert "--source examples/demo-east.yaml" in e.command, e


def test_the_page_is_linked() -> None:
    assert "(docs/troubleshooting.md)" in (ROOT / "README.md").read_text()
    assert "(troubleshooting.md)" in (ROOT / "docs" / "operating.md").read_text()


@pytest.mark.quick
@pytest.mark.parametrize("example", EXPLAIN, ids=str)
def test_explain_examples_are_its_output(example: Example, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from dnsside.cli import main

    monkeypatch.chdir(ROOT)  # the page's paths are the checkout's
    code = main(example.argv[1:])  # in this process: the quick tier starts no program
    out = capsys.readouterr()
    assert code == 0, out.err
    assert normal(out.out) == normal(example.output), f"{example}\n{out.out}"


# --------------------------------------------------------------------------- needs a server

@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Dnsside]]:
    """The page's ports, each to the server it names."""
    with socket.socket() as s:  # a port nothing listens on, for the API server
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    kubeconfig = tmp_path_factory.mktemp("kube") / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{closed}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    demo = demo_server()
    unsynced = Dnsside("--kubeconfig", str(kubeconfig), "--cluster-name", "east",
                       wait_synced=False)
    try:
        yield {DEMO_DNS: demo, DEMO_HTTP: demo, UNSYNCED_DNS: unsynced, UNSYNCED_HTTP: unsynced}
    finally:
        demo.stop()
        unsynced.stop()


def _dig(argv: list[str]) -> tuple[int, str, str, set[str]]:
    """dig's server port, name, type and + options."""
    port = int(argv[argv.index("-p") + 1])
    words = [w for i, w in enumerate(argv[1:], 1)
             if not w.startswith(("@", "+", "-")) and argv[i - 1] != "-p"]
    name, rdtype = words[0], words[1] if len(words) > 1 else "A"
    return port, name, rdtype, {w for w in argv if w.startswith("+")}


def _records(msg: dns.message.Message, short: bool, sections: set[str]) -> set[str]:
    if short:
        return {normal(rd.to_text()) for rrset in msg.answer for rd in rrset}
    chosen = [s for name, s in (("answer", msg.answer), ("authority", msg.authority))
              if name in sections]
    return {normal(line) for section in chosen for rrset in section
            for line in rrset.to_text().splitlines()}


@pytest.mark.parametrize("example", DIG, ids=str)
def test_dig_examples_are_what_a_client_gets(example: Example,
                                             servers: dict[int, Dnsside]) -> None:
    port, name, rdtype, options = _dig(example.argv)
    shown = example.output
    if port == NOTHING:
        assert "connection refused" in shown and "no servers could be reached" in shown
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]  # free once this socket is closed
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # as dig: connected UDP
            s.settimeout(3)
            s.connect(("127.0.0.1", free))
            with pytest.raises(ConnectionRefusedError):
                s.send(dns.message.make_query(name, rdtype).to_wire())
                s.recv(512)
        return
    srv = servers[port]
    if rdtype == "AXFR":
        reply = dns.query.tcp(dns.message.make_query(name, "AXFR"), srv.host, port=srv.port,
                              timeout=5)
        assert shown == "; Transfer failed." and reply.rcode() == dns.rcode.REFUSED
        return
    srv_reply = srv.query(name, rdtype, edns=0)
    status = re.search(r"status: (\w+)", shown)
    if status:
        assert dns.rcode.to_text(srv_reply.rcode()) == status.group(1), example
    flags = re.search(r";; flags: ([a-z ]+);", shown)
    if flags:
        assert set(flags.group(1).split()) == set(dns.flags.to_text(srv_reply.flags).lower()
                                                  .split()), example
    ede = re.search(r"; EDE: (\d+) \(.*?\): \((.*)\)", shown)
    if ede:
        got = [(int(o.code), o.text) for o in srv_reply.options
               if isinstance(o, dns.edns.EDEOption)]
        assert got == [(int(ede.group(1)), ede.group(2))], example
    short = "+short" in options
    sections = {"answer", "authority"} if "+noall" not in options else {
        s for s in ("answer", "authority") if f"+{s}" in options}
    records = {normal(line) for line in shown.splitlines() if line and not line.startswith(";")}
    assert records == _records(srv_reply, short, sections), example


@pytest.mark.parametrize("example", CURL, ids=str)
def test_curl_examples_are_what_the_server_says(example: Example,
                                                servers: dict[int, Dnsside]) -> None:
    url = next(w for w in example.argv[1:] if not w.startswith("-"))
    m = re.fullmatch(r"localhost:(\d+)(/\S*)", url)
    assert m, example
    _, body = servers[int(m.group(1))].http(m.group(2))
    assert body.strip() == example.output.strip(), example


@pytest.mark.parametrize("example", CHECK, ids=str)
def test_check_examples_are_its_output(example: Example, tmp_path: Path) -> None:
    from testkit.threadedkube import ThreadedKube
    from tests.ops.test_check import demo

    kube = ThreadedKube(tmp_path)
    try:
        kube.call(demo, kube.kube, orphans=True)
        out = subprocess.run(
            [sys.executable, "-m", "dnsside", *example.argv[1:], "--kubeconfig",
             kube.kubeconfig], capture_output=True, text=True, timeout=60, cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"})
    finally:
        kube.close()
    assert out.returncode == 1, out.stderr
    assert normal(out.stdout) == normal(example.output), out.stdout
