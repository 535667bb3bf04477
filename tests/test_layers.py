"""The import contract of dnsside/, read from the source with ast (nothing is imported).

Layers, lowest first, each a folder of dnsside/ (the top holds only the package's face,
the configuration and the entry points); a module may import its own layer and the ones
below:

    config      dnsside (the package), config, flagvalues, netvalues: no other dnsside module
    dns         dns/*: the protocol as functions over bytes (wire, zone, responder): it
                knows names and records, not Kubernetes or Linkerd
    model       model/*: Linkerd's and Kubernetes' objects as records, the events sources
                send, address and endpoint rules
    core        core/*: the index and what the answers are, and why (pure: no I/O)
    telemetry   telemetry/*: the counters the sources and the serving side update
    kubeapi     kubeapi/*: the Kubernetes API client, shared by sources and ops
    sources     sources/*: the outside world turned into index events
    serving     serving/*: sockets, logs and the process's life
    ops         ops/*: install and check, never loaded by serve
    entry       cli, __main__: the command line, which loads ops for install/check only

Every import counts, also one inside a function: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.serve import ROOT

pytestmark = pytest.mark.quick

PACKAGE = ROOT / "dnsside"
LAYERS: dict[str, tuple[str, ...]] = {  # a module, or a package and everything in it
    "config": ("dnsside.config", "dnsside.flagvalues", "dnsside.netvalues"),
    "dns": ("dnsside.dns",),
    "model": ("dnsside.model",),
    "core": ("dnsside.core",),
    "telemetry": ("dnsside.telemetry",),
    "kubeapi": ("dnsside.kubeapi",),
    "sources": ("dnsside.sources",),
    "serving": ("dnsside.serving",),
    "ops": ("dnsside.ops",),
    "entry": ("dnsside.cli", "dnsside.__main__"),
}
ORDER = list(LAYERS)

# Imports that break the layering, each to be removed, never added to (the test fails
# when one is gone, so the list cannot go stale).
KNOWN_UPWARD: set[tuple[str, str]] = set()

# The one module through which the operations wing talks to the Kubernetes API.
API_CLIENT = "dnsside.kubeapi.client"
TOP_LEVEL = {"dnsside", "dnsside.__main__", "dnsside.cli", "dnsside.config", "dnsside.netvalues",
             "dnsside.flagvalues"}
HTTP_LIBRARIES = ("aiohttp", "kubernetes_asyncio")

MAX_LINES = 600
# Modules still over MAX_LINES, each to be split, never added to.
KNOWN_LONG: set[str] = set()


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports: a module, or for a name from a module, that module
    names: tuple[str, ...]  # the names of a `from ... import`
    lazy: bool  # inside a function


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> Iterator[Import]:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    nested = {id(n) for f in functions for n in ast.walk(f)}
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        lazy = id(node) in nested
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, (), lazy)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                # `from dnsside import metrics` imports a module, not a name
                target = sub if sub in MODULES else base
                yield Import(name, target, () if target == sub else (alias.name,), lazy)


ALL = [imp for name in MODULES for imp in imports_of(name)]
INTERNAL = [imp for imp in ALL if imp.target in MODULES]


def layer(module: str) -> str:
    if module == "dnsside":  # the package's face: __version__ only
        return "config"
    best = ""
    for name, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, found = prefix, name
    assert best, f"{module} is in no layer: add it to LAYERS"
    return found


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer(name)
    missing = [i for i in ALL if i.target.split(".")[0] == "dnsside" and i.target not in MODULES]
    assert not missing, missing


def test_no_import_goes_up_a_layer() -> None:
    upward = {(i.module, i.target) for i in INTERNAL
              if ORDER.index(layer(i.target)) > ORDER.index(layer(i.module))}
    assert upward == KNOWN_UPWARD, "\n".join(
        f"{a} ({layer(a)}) imports {b} ({layer(b)})" for a, b in sorted(upward - KNOWN_UPWARD))


def test_no_import_circle() -> None:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for i in INTERNAL:
        if i.target != i.module:
            graph[i.module].add(i.target)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circle = [*path[path.index(nxt):], nxt]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def reachable(start: set[str]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        here = todo.pop()
        for i in INTERNAL:
            if i.module == here and i.target not in seen:
                seen.add(i.target)
                todo.append(i.target)
    return seen


def test_nothing_that_serves_reaches_the_operations_wing() -> None:
    serving = {m for m in MODULES if layer(m) in ("dns", "model", "core", "telemetry", "kubeapi",
                                                  "sources", "serving")}
    assert not {m for m in reachable(serving) if layer(m) == "ops"}
    # The CLI loads the wing only from inside the functions that run install and check.
    eager = [i for i in INTERNAL if i.module == "dnsside.cli" and layer(i.target) == "ops"
             and not i.lazy]
    assert not eager, eager


# What a start of dnsside pays for only when its command uses it (issue 38: the suite starts
# dnsside hundreds of times, and importing the serving wing, aiohttp and the API client
# was a second of each start, `--version` included).
SERVING_WING = ("dnsside.serving", "dnsside.sources", "dnsside.kubeapi", "dnsside.core",
                "dnsside.ops", "aiohttp", "kubernetes_asyncio", "prometheus_client", "yaml",
                "dnslib", "uvloop")
HTTP_CLIENT = ("aiohttp", "kubernetes_asyncio", "dnsside.kubeapi.client")


def loaded_by(statement: str) -> list[str]:
    """The modules a fresh interpreter holds once ``statement`` ran in the checkout (a
    ``SystemExit`` from argparse is let be: `--version` and a bad flag end that way)."""
    code = (f"import sys\ntry:\n    {statement}\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('\\n' + repr(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    loaded: list[str] = ast.literal_eval(out.stderr.strip().splitlines()[-1])
    return loaded


def under(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_serve_loads_no_operations_module() -> None:
    """What `dnsside explain` (the serve path without sockets) really imports: no operations
    module, and from a file no HTTP client (it builds the index serve builds, but reads no
    API server)."""
    loaded = loaded_by("import dnsside.cli; dnsside.cli.main(['explain', "
                       "'nginx-svc.default.svc-global', '--source', 'examples/demo-east.yaml'])")
    assert "dnsside.serving.app" in loaded and "dnsside.sources.file" in loaded
    assert not [m for m in loaded if m.startswith("dnsside.ops")]
    assert not under(loaded, HTTP_CLIENT), under(loaded, HTTP_CLIENT)


@pytest.mark.parametrize("statement", [
    "import dnsside.cli",
    "import dnsside.cli; dnsside.cli.main(['--version'])",
    "import dnsside.cli; dnsside.cli.main(['--help'])",
    "import dnsside.cli; dnsside.cli.main(['serve', '--no-such-flag'])",
    "import dnsside.cli; dnsside.cli.main(['explain', 'x.svc-global', '--ttl', 'abc'])",
])
def test_the_entry_and_its_refusals_load_no_wing(statement: str) -> None:
    """`import dnsside.cli`, `--version`, `--help` and a bad flag: the flags' table only."""
    loaded = loaded_by(statement)
    assert "dnsside.cli" in loaded
    assert not under(loaded, SERVING_WING), under(loaded, SERVING_WING)


def test_install_loads_no_serving_wing_and_no_http_client() -> None:
    """`install` without a cluster to look at prints manifests: no server, no API client."""
    loaded = loaded_by("import dnsside.cli; dnsside.cli.main(['install'])")
    assert "dnsside.ops.commands" in loaded
    wing = under(loaded, (*HTTP_CLIENT, "dnsside.serving", "dnsside.sources", "prometheus_client"))
    assert not wing, wing


def test_sources_import_no_index_and_no_dns() -> None:
    bad = [i for i in INTERNAL if layer(i.module) == "sources" and (
        layer(i.target) == "dns"
        or i.target in ("dnsside.core.index", "dnsside.core.encode", "dnsside.core.explain"))]
    assert not bad, bad


# What only a linked cluster's reading is made of (--flat-network): its modules, and the
# names of its things.
LINKED_CLUSTER_MODULES = {"dnsside.sources.limits", "dnsside.sources.budget",
                          "dnsside.sources.linked", "dnsside.sources.remote"}
LINKED_CLUSTER_NAMES = {"gate", "Gate", "budget", "EventBudget", "Remote", "cluster", "limits",
                        "Limits"}


def test_the_shared_reflector_knows_nothing_of_linked_clusters() -> None:
    """The reflector's loops are the same for every API server: what a linked cluster
    changes is asked of its Trust (sources/trust.py; a linked cluster's is its Gate). So
    sources/reflector.py imports none of a linked cluster's modules and names none of its
    things: no variable, attribute or parameter (the `gate is None` branches it once had
    cannot come back unseen)."""
    reflector = "dnsside.sources.reflector"
    imported = {i.target for i in INTERNAL if i.module == reflector}
    assert not imported & LINKED_CLUSTER_MODULES, imported & LINKED_CLUSTER_MODULES
    tree = ast.parse(MODULES[reflector].read_text(encoding="utf-8"))
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    named |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    named |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    assert not named & LINKED_CLUSTER_NAMES, sorted(named & LINKED_CLUSTER_NAMES)


def test_the_query_path_knows_no_kubernetes() -> None:
    """The protocol layer answers from bytes: it never loads the Linkerd model."""
    assert not [i for i in INTERNAL if layer(i.module) == "dns" and layer(i.target) != "dns"
                and i.target != "dnsside"]


def test_the_operations_wing_reaches_the_api_through_one_client() -> None:
    api = {(i.module, i.target) for i in INTERNAL
           if layer(i.module) == "ops" and layer(i.target) in ("kubeapi", "sources")}
    assert {target for _, target in api} <= {API_CLIENT}, api
    http = {(i.module, i.target) for i in ALL if layer(i.module) == "ops"
            and i.target.split(".")[0] in HTTP_LIBRARIES}
    assert not http, http


def test_no_private_name_is_imported_from_another_module() -> None:
    private = [i for i in INTERNAL for n in i.names
               if n.startswith("_") and not n.startswith("__") and i.target != i.module]
    assert not private, private


def test_no_module_is_over_600_lines() -> None:
    long = {name for name, path in MODULES.items()
            if len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES}
    assert long == KNOWN_LONG, long ^ KNOWN_LONG


def test_only_entry_points_and_configuration_at_the_top() -> None:
    top = {name for name in MODULES if name.count(".") <= 1 and not
           (PACKAGE / name.removeprefix("dnsside.")).is_dir()}
    assert top == TOP_LEVEL, top ^ TOP_LEVEL


# What starts a program: a quick test calls none of these, directly or through a helper of
# its own file or of testkit, unless the program is this venv's Python (sys.executable).
SPAWNERS = {"subprocess.run", "subprocess.call", "subprocess.check_call",
            "subprocess.check_output", "subprocess.Popen", "subprocess.getoutput",
            "subprocess.getstatusoutput", "shutil.which", "os.system", "os.popen",
            "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell", "pty.spawn"}
SPAWNER_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn")
# What starts dnsside, a resolver, a fake API server on a thread of its own, or a network
# namespace, by name.
PEERS = {"Dnsside", "demo_server", "run_cli", "ThreadedKube", "Netns", "enter_netns"}
# testkit modules that start a program and that the quick tier may use anyway, and why:
# none (testkit/testca.py once ran openssl; its certificates are now made in Python).
TOLERATED: dict[str, str] = {}


def _spawns(call: ast.Call, aliases: dict[str, str]) -> bool:
    """``call`` starts a program other than this venv's Python."""
    func = ast.unparse(call.func)
    head, dot, rest = func.partition(".")
    func = aliases.get(func, aliases.get(head, head) + dot + rest)
    if func not in SPAWNERS and not func.startswith(SPAWNER_PREFIXES):
        return False
    argv = call.args[0] if call.args else None
    first = argv.elts[0] if isinstance(argv, ast.List | ast.Tuple) and argv.elts else None
    return first is None or ast.unparse(first) != "sys.executable"


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local names of imported modules and functions: `from subprocess import run` makes
    `run` mean `subprocess.run`."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            out.update({a.asname or a.name: a.name for a in node.names})
    return out


@functools.cache
def _spawning_testkit() -> dict[str, set[str]]:
    """For each testkit module, its functions and classes that start a program, directly or
    through another of its own or of another testkit module (``fake_ca`` calling a helper
    that ran openssl made every fake API server start a program, unseen one level up)."""
    defs: dict[str, dict[str, ast.AST]] = {}
    aliases: dict[str, dict[str, str]] = {}
    for path in sorted((ROOT / "testkit").glob("*.py")):
        module = f"testkit.{path.stem}"
        if module in TOLERATED:
            continue
        tree = ast.parse(path.read_text())
        aliases[module] = _aliases(tree)
        defs[module] = {d.name: d for d in tree.body
                        if isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    out: dict[str, set[str]] = {module: set() for module in defs}
    changed = True
    while changed:  # to the fixed point: a caller of a spawner spawns
        changed = False
        for module, named in defs.items():
            for name, d in named.items():
                if name in out[module]:
                    continue
                for n in ast.walk(d):
                    if not isinstance(n, ast.Call):
                        continue
                    callee = ast.unparse(n.func).partition(".")[0]
                    origin = aliases[module].get(callee, "")
                    home, _, attr = origin.rpartition(".")
                    if (_spawns(n, aliases[module]) or callee in out[module]
                            or attr in out.get(home, ())):
                        out[module].add(name)
                        changed = True
                        break
    return out


def quick_scopes(tree: ast.Module) -> list[ast.AST]:
    """What of a test file runs in the quick tier: all of it under ``pytestmark =
    pytest.mark.quick``, else the functions marked quick (and the parameters marked quick
    of the others, conservatively the whole function)."""
    if any(isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "pytestmark"
           and "quick" in ast.unparse(node.value) for node in tree.body):
        return [tree]
    return [d for d in tree.body if isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef)
            and any("quick" in ast.unparse(dec) for dec in d.decorator_list)]


def quick_violations(tree: ast.Module) -> list[str]:
    """The calls of ``tree``'s quick scopes that start a program or a peer, with those of
    the file's own helpers they call."""
    aliases = _aliases(tree)
    helpers = {d.name: d for d in tree.body
               if isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef)}
    testkit = _spawning_testkit()
    bad, seen, todo = [], set(), list(quick_scopes(tree))
    while todo:
        scope = todo.pop()
        for node in ast.walk(scope):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            short = name.rpartition(".")[2]
            origin = aliases.get(name.partition(".")[0], "")
            module, _, attr = origin.rpartition(".")
            if _spawns(node, aliases) or short in PEERS or attr in testkit.get(module, ()) \
                    or (origin in testkit and short in testkit[origin]):
                bad.append(f"{name} (line {node.lineno})")
            elif name in helpers and name not in seen:
                seen.add(name)
                todo.append(helpers[name])
    return sorted(set(bad))


def test_the_quick_tier_needs_only_the_venv() -> None:
    """The tests marked `quick` (what `scripts/test.sh --quick` runs) need only Python and
    the venv: none starts a program (subprocess, shutil.which, os.system...) other than
    the venv's Python, nor dnsside, a resolver, a fake API server on a thread of its own or
    a network namespace, directly or through a helper."""
    quick = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        if not quick_scopes(tree):
            continue
        quick.append(path)
        assert not quick_violations(tree), (path, quick_violations(tree))
    # The core and the protocol in-process are in it whatever else moves; the protocol
    # rules' server fixture marks only its in-process parameter, the socket ones are the
    # full tier.
    names = {p.relative_to(ROOT).as_posix() for p in quick}
    assert {"tests/core/test_index.py", "tests/dns/test_fuzz_respond.py"} <= names, names
    protocol = (ROOT / "tests" / "dns" / "conftest.py").read_text()
    assert 'pytest.param("in-process", marks=pytest.mark.quick)' in protocol


@pytest.mark.parametrize("source", [
    # what the quick tier once ran without seeing it: tsig-keygen, dig and kdig
    "import subprocess\npytestmark = pytest.mark.quick\n"
    "def test_a():\n    subprocess.run(['tsig-keygen', 'k'])\n",
    "import subprocess\ndef keygen():\n    return subprocess.check_output(['dig'])\n"
    "@pytest.mark.quick\ndef test_a():\n    keygen()\n",
    "from shutil import which\n@pytest.mark.quick\ndef test_a():\n    which('kdig')\n",
    "from testkit.dig import dig\npytestmark = pytest.mark.quick\n"
    "def test_a():\n    dig('x')\n",
    "import asyncio\npytestmark = pytest.mark.quick\n"
    "async def test_a():\n    await asyncio.create_subprocess_exec('named')\n",
])
def test_the_quick_guard_sees_every_way_to_start_a_program(source: str) -> None:
    assert quick_violations(ast.parse(source))


def test_the_quick_guard_lets_the_venvs_python_and_unmarked_tests_be() -> None:
    assert not quick_violations(ast.parse(
        "import subprocess, sys\npytestmark = pytest.mark.quick\n"
        "def test_a():\n    subprocess.run([sys.executable, '-c', 'pass'])\n"))
    assert not quick_violations(ast.parse(
        "import subprocess\ndef test_a():\n    subprocess.run(['dig'])\n"
        "@pytest.mark.quick\ndef test_b():\n    pass\n"))


# --------------------------------------------------------------------------- one index builder

BUILDER = "dnsside/core/build.py"  # make_index: the index and its responder, made together
# Every Python file of the checkout that could build an index.
CHECKOUT = sorted(p for folder in ("dnsside", "testkit", "bench", "tests", "scripts")
                  for p in (ROOT / folder).rglob("*.py"))


def builders(tree: ast.AST) -> list[str]:
    """What in ``tree`` builds an index other than through the one builder: a function
    named make_index, or a call of Index(...) or make_responder(...)."""
    found = [f"def {n.name} (line {n.lineno})" for n in ast.walk(tree)
             if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "make_index"]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func).rpartition(".")[2]
            if called in ("Index", "make_responder"):
                found.append(f"{called}(...) (line {node.lineno})")
    return found


# Files that also build the index of an older tree, one without make_index, for an A/B
# against it: each builds through make_index where it exists, by hand only in the
# ImportError branch, and names the calls it may make.
OLDER_TREES = {"bench/ab_instructions.py": ["Index(...)", "make_responder(...)"]}


def test_an_index_is_built_in_one_place() -> None:
    """The app, explain, check, testkit, bench and the tests all build an index with
    dnsside.core.build.make_index (from a Config or from IndexOptions): the zone options
    given once, no second make_index anywhere."""
    bad = {path: found for p in CHECKOUT
           if (path := p.relative_to(ROOT).as_posix()) != BUILDER
           and (found := builders(ast.parse(p.read_text(encoding="utf-8"))))
           and [f.partition(" ")[0] for f in found] != OLDER_TREES.get(path)}
    assert not bad, bad
    made = [f for f in builders(ast.parse((ROOT / BUILDER).read_text())) if f.startswith("def")]
    assert len(made) == 1, made


@pytest.mark.parametrize("source", [
    "def make_index(zone):\n    return 1\n",
    "idx = Index(make_responder(['svc-global.'], zone), options)\n",
    "from dnsside.core import index\nidx = index.Index(r, o)\n",
])
def test_the_builder_guard_sees_a_second_builder(source: str) -> None:
    assert builders(ast.parse(source))


# --------------------------------------------------------------------------- read-only views

VIEWS = "dnsside.core.view"
# What a view's member may be typed with besides the views themselves: values and
# read-only collections.
READ_ONLY = {"int", "str", "bytes", "bool", "float", "None", "tuple", "frozenset", "Mapping",
             "Sequence", "Set", "Iterator", "Iterable", "Collection"}
# A method that writes, by its name (set, set_serial... but not settled).
MUTATING = re.compile(r"(apply|add|remove|pop|put|clear|update|replace|discard|delete|insert|"
                      r"append|extend|cut|publish|upsert|reset|forget\w*|write\w*|set|set_\w+)")
# A class of a lower layer a view hands out although it is not frozen, and why it may.
HANDED_OUT = {"Zone": "a served zone as explain reads it (origin, serial); only the Publisher "
                      "moves its serial, and explain needs it to parse a name"}


def _is_value_class(module: str, name: str) -> bool:
    """``name`` of ``module`` is a frozen dataclass, an enum or an alias of read-only
    types (read from the source)."""
    for node in ast.parse(MODULES[module].read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            frozen = any(isinstance(d, ast.Call) and ast.unparse(d.func) == "dataclass"
                         and any(k.arg == "frozen" and ast.unparse(k.value) == "True"
                                 for k in d.keywords) for d in node.decorator_list)
            enum = any(ast.unparse(b).rpartition(".")[2] in ("Enum", "StrEnum", "IntEnum")
                       for b in node.bases)
            return frozen or enum
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == name:
            return all(n.id in READ_ONLY for n in ast.walk(node.value) if isinstance(n, ast.Name))
    return False


def view_violations(tree: ast.Module) -> list[str]:
    """Whatever a view of ``tree`` exposes that could write: a member named as a writing
    method, or a member typed with anything but the views, values and read-only
    collections (a live store, a dict, a list, a set)."""
    imported = {a.asname or a.name: n.module for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module for a in n.names}
    views = {c.name for c in tree.body if isinstance(c, ast.ClassDef)}
    bad = []
    for view in (c for c in tree.body if isinstance(c, ast.ClassDef)):
        for member in view.body:
            if not isinstance(member, ast.FunctionDef | ast.AnnAssign):
                continue
            name = member.name if isinstance(member, ast.FunctionDef) else ast.unparse(
                member.target)
            if MUTATING.fullmatch(name):
                bad.append(f"{view.name}.{name}: a method that writes")
            annotation = member.returns if isinstance(member, ast.FunctionDef) else \
                member.annotation
            for n in ast.walk(annotation) if annotation is not None else ():
                if not isinstance(n, ast.Name | ast.Constant) or (
                        isinstance(n, ast.Constant) and n.value in (None, Ellipsis)):
                    continue
                typed = n.id if isinstance(n, ast.Name) else str(n.value)
                module = imported.get(typed, "")
                if typed in READ_ONLY or typed in views or typed in HANDED_OUT or (
                        module in MODULES and _is_value_class(module, typed)):
                    continue
                bad.append(f"{view.name}.{name}: typed {typed}, which can be written")
    return bad


def test_views_expose_read_only_data() -> None:
    """The views explain, the reporter and the prober read (core/view.py) name no method
    that writes, and hand out nothing typed as something that can be written: no live
    store with its apply, no dict or list, only views, values and read-only collections."""
    tree = ast.parse(MODULES[VIEWS].read_text(encoding="utf-8"))
    assert [c.name for c in tree.body if isinstance(c, ast.ClassDef)], "no view found"
    assert not view_violations(tree), view_violations(tree)


@pytest.mark.parametrize("source", [
    # what the views once handed out: the live stores, the responder, a dict
    "from dnsside.core.links import Links\nclass V(Protocol):\n"
    "    @property\n    def links(self) -> Links: ...\n",
    "from dnsside.core.store import LocalStore\nclass V(Protocol):\n"
    "    @property\n    def local(self) -> LocalStore: ...\n",
    "from dnsside.dns.responder import Responder\nclass V(Protocol):\n"
    "    @property\n    def responder(self) -> Responder: ...\n",
    "class V(Protocol):\n    def probe_targets(self) -> dict[str, str]: ...\n",
    "class V(Protocol):\n    def apply(self, events: Sequence[int]) -> None: ...\n",
    "class V(Protocol):\n    def set_serial(self, serial: int) -> int: ...\n",
])
def test_the_view_guard_sees_a_view_that_writes(source: str) -> None:
    assert view_violations(ast.parse(source))


def test_the_view_guard_lets_values_be() -> None:
    assert not view_violations(ast.parse(
        "from dnsside.core.assembly import GlobalService\nclass V(Protocol):\n"
        "    def settled(self) -> bool: ...\n"
        "    @property\n    def services(self) -> Mapping[str, GlobalService]: ...\n"))


# --------------------------------------------------------------------------- no flags below core

# The flags' modules: what dns/ and model/ never read (a rule they need is theirs, or lower).
CONFIGURATION = {"dnsside.config", "dnsside.flagvalues"}


def configuration_readers(imports: list[Import]) -> set[tuple[str, str]]:
    return {(i.module, i.target) for i in imports
            if layer(i.module) in ("dns", "model") and i.target in CONFIGURATION}


def test_the_protocol_and_the_model_read_no_configuration() -> None:
    """dns/ and model/ sit below the configuration in use, not in order: they hold the rules
    config.py checks flags with, never the reverse, so a module of theirs imports neither
    config.py nor flagvalues.py."""
    found = configuration_readers(INTERNAL)
    assert not found, "\n".join(f"{a} imports {b}" for a, b in sorted(found))


def test_the_configuration_guard_sees_a_reader() -> None:
    assert configuration_readers([Import("dnsside.dns.zone", "dnsside.config", ("FLAGS",), True),
                                  Import("dnsside.model.events", "dnsside.flagvalues", (), False)])
    assert not configuration_readers([Import("dnsside.core.index", "dnsside.config", (), False)])
