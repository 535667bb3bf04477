"""The command line: `serve` and `explain` here; `install` and `check` come from ops/.

Every serve flag can also come from `DNSSIDE_<FLAG>` (the table is dnsside.config.FLAGS).
Environment values are defaults that the command line replaces; repeatable
flags take a comma-separated list from the environment (`DNSSIDE_ZONE=a.,b.`). They are
read and checked after parsing (dnsside.flagvalues), by serve and explain only.

`serve` and `explain` never load :mod:`dnsside.ops`: :func:`main` builds the install
and check parsers only when one of them is the command (the others get a placeholder
that lists them in the usage line).

This module imports only the flags' table: each command loads its own wing when it runs
(:mod:`dnsside.serving.commands` for serve and explain, :mod:`dnsside.ops.commands` for
install and check), so `--version`, `--help` and a mistyped flag start in a fraction of
the time a server does (the test suite starts dnsside hundreds of times; issue 38).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from dnsside import __version__
from dnsside.config import COMMANDS, EXPLAIN, EXPLAIN_TYPES, FLAGS, SERVE, Flag, flags_for
from dnsside.flagvalues import expected

ADMIN_COMMANDS = ("install", "check")  # parsed and run by dnsside.ops.commands, loaded for them
DESCRIPTION = ("dnsside answers DNS for the services of Kubernetes clusters linked by\n"
               "Linkerd's multicluster extension: one name for every cluster's members.\n\n"
               "`dnsside COMMAND --help` gives each command's flags; every serve flag can\n"
               "also be set as DNSSIDE_<FLAG> in the environment.")


# argparse's words for a value its type or choices refuse: "argument --ttl: invalid int
# value: 'abc'", "argument --locality: invalid choice: 'x' (choose from 'all', ...)".
_BAD_VALUE = re.compile(r"argument (?:-\w/)?(?P<flag>--[a-z0-9-]+): invalid "
                        r"(?P<kind>int value|float value|choice): (?P<value>'.*?')"
                        r"(?: \(choose from (?P<choices>.*)\))?")
_KIND_WORDS = {"int value": "a whole number", "float value": "a number"}


class OneLineParser(argparse.ArgumentParser):
    """A parser whose refusal of a flag's value is one line, the line ``DNSSIDE_<FLAG>``
    gets for it (``dnsside: --ttl 'abc': expected a whole number of seconds``), the same for
    serve, explain and install: argparse prints the whole usage first (30 lines and more),
    which hides the one that matters. Other mistakes (an unknown flag, a missing argument)
    keep argparse's usage, which lists the flags there are."""

    def error(self, message: str) -> NoReturn:
        m = _BAD_VALUE.fullmatch(message)
        if m is None:
            super().error(message)
        f = next((f for f in FLAGS if f.name == m["flag"]), None)
        if f is not None and (f.choices or f.type in (int, float)):
            what = expected(f)
        elif m["choices"]:
            what = "one of " + m["choices"].replace("'", "")
        else:
            what = _KIND_WORDS.get(m["kind"], "another value")
        self.exit(2, f"dnsside: {m['flag']} {m['value']}: expected {what}\n")


def add_flag(parser: argparse.ArgumentParser, flag: Flag) -> None:
    """``flag`` on ``parser``, None when not given: ``DNSSIDE_<FLAG>`` and the default are
    filled in after parsing, by :func:`dnsside.flagvalues.flag_values`, where a bad value
    is one line instead of a traceback while the parser is built."""
    shown = f"default {flag.shown_default}; env {flag.env}"
    kw: dict[str, Any] = {"help": f"{flag.help} ({shown})" if flag.help else f"({shown})",
                          "default": None}
    if flag.metavar:
        kw["metavar"] = flag.metavar
    if flag.switch:
        kw.update(action="store_true")
    elif flag.repeatable:
        kw.update(action="append")
    else:
        kw.update(type=flag.type)
        if flag.choices:
            kw["choices"] = list(flag.choices)
    parser.add_argument(flag.name, **kw)


def _parsers(
    admin: bool,
) -> tuple[argparse.ArgumentParser, Mapping[str, argparse.ArgumentParser]]:
    parser = OneLineParser(prog="dnsside", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dnsside {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(SERVE, help=COMMANDS[SERVE], description=COMMANDS[SERVE])
    explain = sub.add_parser(EXPLAIN, help=COMMANDS[EXPLAIN], description=COMMANDS[EXPLAIN])
    for command, p in ((SERVE, serve), (EXPLAIN, explain)):
        for flag in flags_for(command):
            add_flag(p, flag)
    explain.add_argument("name", metavar="NAME", help="a name in a served zone, e.g. "
                         "nginx-svc.default.svc-global")
    explain.add_argument("type", metavar="TYPE", nargs="?", default="A",
                         help=f"the second word, not a flag: {EXPLAIN_TYPES} (default A)")
    explain.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                         help="text for people (default), json or yaml for machines")
    if admin:
        from dnsside.ops.commands import add_admin_commands

        add_admin_commands(sub)
    else:  # only named, so that the usage line lists every command
        for command in ADMIN_COMMANDS:
            sub.add_parser(command, help=COMMANDS[command], add_help=False)
    return parser, sub.choices


def build_parser(admin: bool = True) -> argparse.ArgumentParser:
    """The whole command line; ``admin=False`` leaves out install and check (and with
    them the operations code)."""
    return _parsers(admin)[0]


def serve_parser() -> argparse.ArgumentParser:
    """The parser of ``dnsside serve`` alone."""
    return _parsers(admin=False)[1][SERVE]


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if not words:  # a newcomer's first try: the commands, not a complaint about them
        build_parser(admin=False).print_help(sys.stderr)
        return 2
    command = next((w for w in words if not w.startswith("-")), None)
    parser, commands = _parsers(admin=command in ADMIN_COMMANDS)
    args, unknown = parser.parse_known_args(words)
    if unknown and args.command == EXPLAIN and any(
            u.split("=")[0] in ("--type", "-t", "--qtype") for u in unknown):
        print(f"dnsside: explain: TYPE is the word after NAME, not a flag: `dnsside explain "
              f"NAME TYPE`, TYPE one of {EXPLAIN_TYPES}", file=sys.stderr)
        return 2
    if unknown:  # said by the command's own parser, whose usage lists its flags
        commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command in ADMIN_COMMANDS:
        from dnsside.ops.commands import run_admin_command

        return run_admin_command(args, words)
    from dnsside.serving.commands import run_serving_command

    return run_serving_command(args)


if __name__ == "__main__":
    sys.exit(main())
