"""dig (BIND) and kdig (Knot) as a test asks them: dig's text output parsed into its
header, flags, counts, OPT pseudo-section and sections; kdig's `+json` (RFC 8427) read
as data."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any

from testkit.serve import Dnsside


@dataclass
class Dig:
    text: str
    opcode: str = ""
    status: str = ""
    flags: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)
    edns: str | None = None  # the "; EDNS: ..." line
    opt_lines: list[str] = field(default_factory=list)
    sections: dict[str, list[list[str]]] = field(default_factory=dict)

    def rdata(self, section: str = "ANSWER", rtype: str | None = None) -> list[str]:
        return sorted(" ".join(rr[4:]) for rr in self.sections.get(section, [])
                      if rtype is None or rr[3] == rtype)


def dig(srv: Dnsside, *args: str) -> Dig:
    out = subprocess.run(
        ["dig", f"@{srv.host}", "-p", str(srv.port), "+time=3", "+tries=1", *args],
        capture_output=True, text=True, timeout=30,
    ).stdout
    d = Dig(out)
    header = re.findall(r"opcode: (\w+), status: (\w+), id: \d+", out)
    if header:
        d.opcode, d.status = header[-1]
    flags = re.findall(r";; flags:([^;]*); QUERY: (\d+), ANSWER: (\d+), AUTHORITY: (\d+), "
                       r"ADDITIONAL: (\d+)", out)
    if flags:
        f, *counts = flags[-1]
        d.flags = set(f.split())
        d.counts = dict(zip(["QUERY", "ANSWER", "AUTHORITY", "ADDITIONAL"], map(int, counts),
                            strict=True))
    section = None
    for line in out.splitlines():
        if line.startswith(";; OPT PSEUDOSECTION"):
            section = "OPT"
            continue
        m = re.match(r";; (\w+) SECTION:", line)
        if m:
            section = m.group(1)
            d.sections.setdefault(section, [])
            continue
        if not line.strip():
            section = None
        elif section == "OPT":
            d.opt_lines.append(line)
            if line.startswith("; EDNS:"):
                d.edns = line
        elif section and section != "QUESTION" and not line.startswith(";"):
            d.sections[section].append(line.split(None, 4))
        elif section == "QUESTION":
            d.sections[section].append(line.lstrip(";").split())
    return d


def kdig(srv: Dnsside, *args: str) -> list[dict[str, Any]]:
    """kdig +json: one JSON object per message (several with more than one query)."""
    out = subprocess.run(
        ["kdig", f"@{srv.host}", "-p", str(srv.port), "+json", "+timeout=3", "+retry=0", *args],
        capture_output=True, text=True, timeout=30,
    ).stdout
    decoder = json.JSONDecoder()
    msgs, i = [], 0
    while i < len(out):
        if out[i].isspace():
            i += 1
            continue
        obj, i = decoder.raw_decode(out, i)
        msgs.append(obj)
    assert msgs, out
    return msgs


def rcode(msg: dict[str, Any]) -> int:
    """The full rcode: header bits plus the extended bits in the OPT TTL."""
    opt = [rr for rr in msg.get("additionalRRs", []) if rr["TYPE"] == 41]
    return int(msg["RCODE"]) | ((opt[0]["TTL"] >> 24) << 4 if opt else 0)


def rdata(msg: dict[str, Any], rtype: str, section: str = "answerRRs") -> list[str]:
    return sorted(rr[f"rdata{rtype}"] for rr in msg.get(section, []) if rr["TYPEname"] == rtype)
