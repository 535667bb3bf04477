"""Corefile text, as pure functions: dnsside's server block, and patching it into a Corefile.

Everything of a live Corefile that is not dnsside's is kept:
:func:`patch` replaces only the top-level blocks that serve one of dnsside's zones
(dnsside's own, marked with :data:`MARK`, or anyone's) and appends dnsside's block,
so running ``dnsside install coredns --from -`` twice changes nothing the second
time. The distributions' default Corefiles are package data
(``dnsside/ops/corefiles/``), used when there is no live Corefile to start from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import resources

MARK = "# dnsside:"  # first line of every server block dnsside writes
LOADBALANCE = "loadbalance"  # CoreDNS's plugin that shuffles A and AAAA records

# Where each default Corefile comes from (the cluster domain is written {domain}):
UPSTREAM = {
    # cmd/kubeadm/app/phases/addons/dns/manifests.go: what `coredns` holds when nobody
    # changed it.
    "kubeadm": "kubeadm.Corefile",
    # The EKS CoreDNS add-on's default.
    "eks": "eks.Corefile",
    # kubernetes/kubernetes cluster/addons/dns/nodelocaldns/nodelocaldns.yaml: the template.
    # Its install replaces __PILLAR__LOCAL__DNS__, __PILLAR__DNS__SERVER__ and the domain
    # with sed before applying; node-cache fills only the rest at start. Never printed as
    # is (--flavor nodelocaldns needs --from); tests build live ConfigMaps from it.
    "nodelocaldns": "nodelocaldns.Corefile",
}


class CorefileError(ValueError):
    """A Corefile whose braces do not pair up."""


def upstream(flavor: str, domain: str) -> str:
    """The default Corefile of ``flavor`` (a key of :data:`UPSTREAM`) for ``domain``."""
    text = (resources.files(__package__) / "corefiles" / UPSTREAM[flavor]).read_text("utf-8")
    return text.replace("{domain}", domain)


def server_block(zones: Sequence[str], address: str, mode: str, *,
                 through_cluster_dns: bool = False, nodelocal: Sequence[str] = (),
                 port: int = 53) -> str:
    """The server block that forwards ``zones`` to dnsside at ``address``.

    ``prometheus`` so the zone's queries are counted with the rest of CoreDNS's,
    ``bufsize 1232`` so answers relayed over UDP stay unfragmented (DNS flag day 2020),
    ``cache 5`` = dnsside's TTL, ``loadbalance round_robin`` so that an answer served
    from the cache is shuffled too (CoreDNS runs it before ``cache``, whatever the line
    order): without it every client of one cached answer would connect to its first
    address for the TTL. ``nodelocal`` are node-local-dns's own ``bind`` and
    ``prometheus`` lines, copied so the block listens where the others do;
    ``through_cluster_dns`` forwards to the cluster DNS instead of ``address`` (dnsside
    listening on loopback inside the CoreDNS pods, seen from node-local-dns). ``port`` is
    where CoreDNS listens (Gardener's: 8053).
    """
    keys = " ".join(f"{z.rstrip('.')}:{port}" for z in zones)
    lines = [f"{MARK} {', '.join(zones)} answered by dnsside ({mode} mode)",
             keys + " {", "    errors", "    cache 5", f"    {LOADBALANCE} round_robin"]
    if nodelocal:
        lines += [f"    {line}" for line in nodelocal]
    else:
        lines.append("    prometheus :9153")
    lines.append("    bufsize 1232")
    if through_cluster_dns:
        # Over TCP like node-local-dns's cluster.local block (no conntrack entry per query).
        lines += ["    forward . __PILLAR__CLUSTER__DNS__ {", "        force_tcp", "    }"]
    else:
        lines.append(f"    forward . {address}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def blocks(text: str) -> list[tuple[list[str], int, int]]:
    """Top-level server blocks of a Corefile: (keys, first line, last line), lines counted
    from 0. Enough structure to replace a block and read its directives; comments are
    skipped (a brace inside a quoted string would confuse it: Corefiles have none)."""
    found: list[tuple[list[str], int, int]] = []
    depth, start, keys = 0, 0, []
    for i, raw in enumerate(text.splitlines()):
        line = strip_comment(raw).strip()
        if depth == 0 and "{" in line:
            keys, start = line.split("{", 1)[0].split(), i
            if not keys:
                raise CorefileError(f"Corefile line {i + 1}: a block with no zone")
        depth += line.count("{") - line.count("}")
        if depth < 0:
            raise CorefileError(f"Corefile line {i + 1}: '}}' without a matching '{{'")
        if depth == 0 and keys and ("{" in line or "}" in line):
            found.append((keys, start, i))
            keys = []
    if depth:
        raise CorefileError("the Corefile has a '{' that is never closed")
    return found


def strip_comment(line: str) -> str:
    out, quoted = [], False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        if ch == "#" and not quoted:
            break
        out.append(ch)
    return "".join(out)


def zone_of(key: str) -> str:
    """The zone a server block key (``svc-global:53``, ``dns://x.``) serves, absolute."""
    host = re.sub(r"^[a-z]+://", "", key.lower()).rsplit(":", 1)[0] if ":" in key else key
    return host.rstrip(".") + "."


def directives(corefile: str, first: int, last: int) -> list[str]:
    """The directive names at the top of the server block on lines ``first``..``last``
    (as :func:`blocks` gives them): nested blocks' contents are skipped."""
    names: list[str] = []
    depth = 0
    for raw in corefile.splitlines()[first + 1:last]:
        line = strip_comment(raw).strip()
        if depth == 0 and line and line[0] not in "{}":
            names.append(line.split()[0])
        depth += line.count("{") - line.count("}")
    return names


def listen_lines(corefile: str, zones: Sequence[str]) -> list[str]:
    """The ``bind`` and ``prometheus`` lines of the first block that serves none of
    ``zones``: where node-local-dns listens, for dnsside's block to listen there too."""
    lines = corefile.splitlines()
    for keys, first, last in blocks(corefile):
        if any(zone_of(k) in zones for k in keys):
            continue
        body = [strip_comment(x).strip() for x in lines[first + 1:last]]
        return [x for x in body if x.startswith(("bind ", "prometheus "))]
    return []


def patch(corefile: str, zones: Sequence[str], block: str) -> str:
    """``corefile`` with ``block`` added, in place of every block (dnsside's or anyone's)
    that already serves one of ``zones``; everything else is kept."""
    lines = corefile.splitlines()
    for keys, first, last in reversed(blocks(corefile)):
        if any(zone_of(k) in zones for k in keys):
            if first > 0 and lines[first - 1].startswith(MARK):
                first -= 1
            del lines[first:last + 1]
            while first < len(lines) and first > 0 and not lines[first].strip() \
                    and not lines[first - 1].strip():
                del lines[first]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join([*lines, "", *block.splitlines()]).lstrip("\n") + "\n"
