"""Every relative link in the README and docs/ leads somewhere.

The README is the path a newcomer walks and docs/ holds what it points to, so a link
broken by a moved section or a renamed heading strands them. A link is checked as
GitHub renders it: relative to the file that holds it, and an anchor (`#...`) must be
the slug GitHub gives one of the target's headings. Links inside code (fenced blocks,
backticks) are text, not links.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "deploy").rglob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")


def unfenced(text: str) -> str:
    """The text with fenced blocks blanked out, lines kept."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def prose(text: str) -> str:
    """The text with fenced blocks and code spans blanked out, lines kept."""
    return _CODE.sub("", unfenced(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation (backticks, parentheses,
    colons...) dropped, each space a hyphen; hyphens and underscores kept."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated heading gets -1, -2..."""
    seen: Counter[str] = Counter()
    out = set()
    for line in unfenced(path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            out.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    out = []
    for n, line in enumerate(prose(path.read_text()).splitlines(), 1):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{n}: {target}"
            if not dest.exists():
                out.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                out.append(f"{where} (no heading with that anchor)")
    return out


def test_slug_is_githubs() -> None:
    assert slug("Multi-Cluster Services names (`--mcs-zone`)") == \
        "multi-cluster-services-names---mcs-zone"
    assert slug("Checking: `dnsside check`") == "checking-dnsside-check"
    assert slug("Resolvers in front of dnsside") == "resolvers-in-front-of-dnsside"


def test_the_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [bad](#nowhere)\n"
                    "`[code](missing.md)`\n```\n[fenced](missing.md)\n```\n")
    assert broken_links(page, tmp_path) == ["page.md:3: missing.md (no such file)",
                     "page.md:3: #nowhere (no heading with that anchor)"]


def test_every_relative_link_resolves() -> None:
    assert len(DOCS) > 3
    broken = [b for path in DOCS for b in broken_links(path)]
    assert not broken, "\n".join(broken)


def test_the_readme_stays_a_path_not_a_reference() -> None:
    """About 300 lines: the reference material lives in docs/, one link away."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*\.md", doc.name), doc.name
        assert f"(docs/{doc.name})" in readme, f"README's table of contents lacks {doc.name}"


def test_the_documented_packages_are_the_ones_installed() -> None:
    """docs/testing.md lists what `scripts/test.sh` installs; `.ci/run` installs the same."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    listed = re.search(r"^packages=\((.*?)\)", script, re.M | re.S)
    assert listed
    installed = set(listed.group(1).split())
    ci = (ROOT / ".ci" / "run").read_text()
    ci_installed = {w for line in re.findall(r"apt-get install ((?:.*\\\n)*.*)", ci)
                    for w in re.sub(r"#.*", "", line).replace("\\\n", " ").split()
                    if not w.startswith("-")} - {"python3-venv", "kubernetes-client"}
    docs = (ROOT / "docs" / "testing.md").read_text()
    paragraph = docs[docs.index("those of these"):docs.index("and `kubernetes-client`")]
    documented = set(re.findall(r"`([a-z0-9.+-]+)`", paragraph))
    assert documented == installed == ci_installed, (documented ^ installed,
                                                     installed ^ ci_installed)
