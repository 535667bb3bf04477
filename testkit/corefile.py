"""A small Corefile parser for tests, written apart from dnsside's own block finder.

It follows CoreDNS's Caddyfile grammar as far as the Corefiles here need: tokens
separated by white space, ``#`` comments to the end of the line, ``{``/``}``
opening and closing blocks, quoted strings. The top level is a list of server
blocks, each with keys (``zone[:port]``, several allowed) and directives; a
directive is its tokens on one line plus an optional nested block.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class CorefileError(ValueError):
    pass


@dataclass
class Directive:
    name: str
    args: list[str]
    block: list[Directive] = field(default_factory=list)


@dataclass
class ServerBlock:
    keys: list[str]
    directives: list[Directive]

    @property
    def zones(self) -> list[tuple[str, int]]:
        """(zone with a trailing dot, port) per key; port 53 when absent."""
        out = []
        for key in self.keys:
            host, port = key, 53
            if key.rsplit(":", 1)[-1].isdigit() and ":" in key:
                host, p = key.rsplit(":", 1)
                port = int(p)
            out.append((host.rstrip(".") + ".", port))
        return out

    def directive(self, name: str) -> list[Directive]:
        return [d for d in self.directives if d.name == name]


def _tokens(text: str) -> list[tuple[int, str]]:
    """(line number, token); braces are tokens of their own."""
    out: list[tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "#":
                break
            if ch.isspace():
                i += 1
                continue
            if ch in "{}":
                out.append((lineno, ch))
                i += 1
                continue
            if ch == '"':
                end = line.find('"', i + 1)
                if end < 0:
                    raise CorefileError(f"line {lineno}: unterminated quote")
                out.append((lineno, line[i + 1:end]))
                i = end + 1
                continue
            j = i
            while j < len(line) and not line[j].isspace() and line[j] not in "{}#":
                j += 1
            out.append((lineno, line[i:j]))
            i = j
    return out


def parse(text: str) -> list[ServerBlock]:
    toks = _tokens(text)
    pos = 0

    def directives(closing: bool) -> list[Directive]:
        nonlocal pos
        out: list[Directive] = []
        while pos < len(toks):
            lineno, tok = toks[pos]
            if tok == "}":
                if not closing:
                    raise CorefileError(f"line {lineno}: unexpected '}}'")
                pos += 1
                return out
            if tok == "{":
                raise CorefileError(f"line {lineno}: '{{' without a directive")
            line_toks = []
            while pos < len(toks) and toks[pos][0] == lineno and toks[pos][1] not in "{}":
                line_toks.append(toks[pos][1])
                pos += 1
            d = Directive(line_toks[0], line_toks[1:])
            if pos < len(toks) and toks[pos][1] == "{" and toks[pos][0] == lineno:
                pos += 1
                d.block = directives(True)
            out.append(d)
        if closing:
            raise CorefileError("unexpected end of file: a block is never closed")
        return out

    blocks: list[ServerBlock] = []
    while pos < len(toks):
        lineno, _ = toks[pos]
        keys = []
        while pos < len(toks) and toks[pos][1] != "{":
            if toks[pos][1] == "}":
                raise CorefileError(f"line {toks[pos][0]}: unexpected '}}'")
            keys.append(toks[pos][1])
            pos += 1
        if pos >= len(toks):
            raise CorefileError(f"line {lineno}: server block keys {keys} without a body")
        if not keys:
            raise CorefileError(f"line {lineno}: a server block needs at least one key")
        pos += 1
        blocks.append(ServerBlock(keys, directives(True)))
    if not blocks:
        raise CorefileError("no server block")
    return blocks


def block_for(blocks: list[ServerBlock], zone: str) -> ServerBlock:
    zone = zone.rstrip(".") + "."
    found = [b for b in blocks if any(z == zone for z, _ in b.zones)]
    if len(found) != 1:
        raise AssertionError(f"expected one server block for {zone}, found {len(found)}")
    return found[0]


def forward_to(block: ServerBlock) -> list[str]:
    """The upstreams of the block's ``forward .`` directive."""
    (fwd,) = block.directive("forward")
    assert fwd.args and fwd.args[0] == ".", f"forward {fwd.args} does not forward everything"
    return fwd.args[1:]
