"""dnsside: `serve` answers *.svc-global, `explain` says why; `install`, `check` in ops.

Every serve flag can also come from `DNSSIDE_<FLAG>` (the table is dnsside.config.FLAGS).
Environment values are defaults that the command line overrides; repeatable
flags take a comma-separated list from the environment (`DNSSIDE_ZONE=a.,b.`).

`serve` and `explain` never load :mod:`dnsside.ops`: :func:`main` builds the install
and check parsers only when one of them is the command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from dnsside import __version__
from dnsside.config import EXPLAIN, SERVE, Config, Flag, flags_for
from dnsside.serving.app import App, explain_index, make_source

ADMIN_COMMANDS = ("install", "check")  # parsed and run by dnsside.ops.cli, loaded only for them


def add_flag(parser: argparse.ArgumentParser, flag: Flag) -> None:
    """``flag`` on ``parser``, its default taken from ``DNSSIDE_<FLAG>`` when that is set."""
    kw: dict[str, Any] = {"help": flag.help}
    if flag.metavar:
        kw["metavar"] = flag.metavar
    env = os.environ.get(flag.env)
    given = flag.from_env(env) if env is not None else None
    if flag.switch:
        kw.update(action="store_true", default=bool(given))
    elif flag.repeatable:
        kw.update(action="append", default=given)
    else:
        kw.update(type=flag.type, default=flag.default if given is None else given)
        if flag.choices:
            kw["choices"] = list(flag.choices)
    parser.add_argument(flag.name, **kw)


def _parsers(admin: bool) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="dnsside", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"dnsside {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(SERVE, help="answer *.svc-global over DNS")
    explain = sub.add_parser(EXPLAIN, help="print the answer to NAME and where it comes from")
    for command, p in ((SERVE, serve), (EXPLAIN, explain)):
        for flag in flags_for(command):
            add_flag(p, flag)
    explain.add_argument("name")
    explain.add_argument("type", nargs="?", default="A")
    explain.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                         help="text for people (default), json or yaml for machines")
    if admin:
        from dnsside.ops.cli import add_admin_commands

        add_admin_commands(sub)
    return parser, {SERVE: serve, EXPLAIN: explain}


def build_parser(admin: bool = True) -> argparse.ArgumentParser:
    """The whole command line; ``admin=False`` leaves out install and check (and with
    them the operations code)."""
    return _parsers(admin)[0]


def serve_parser() -> argparse.ArgumentParser:
    """The parser of ``dnsside serve`` alone."""
    return _parsers(admin=False)[1][SERVE]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


async def _serve(config: Config) -> int:
    app = App(config, make_source(config))
    return await app.run()


async def _explain(config: Config, name: str, qtype: str, output: str = "text") -> int:
    from dnsside.core.explain import Explainer, render

    report = Explainer(await explain_index(config)).explain(name, qtype)
    if output == "json":
        print(json.dumps(report, indent=2))
    elif output == "yaml":
        import yaml

        print(yaml.safe_dump(report, sort_keys=False, allow_unicode=True), end="")
    else:
        print(render(report), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((w for w in words if not w.startswith("-")), None)
    args = build_parser(admin=command not in (SERVE, EXPLAIN)).parse_args(words)
    if args.command in ADMIN_COMMANDS:
        from dnsside.ops.cli import run_admin_command

        return run_admin_command(args, words)
    setup_logging(args.log_format, args.log_level)
    from dnsside.sources.file import FileSourceError

    try:
        config = Config.from_flags(args.command, vars(args), os.environ.get("POD_IP"))
        config.check()
        if args.command == "explain":
            return asyncio.run(_explain(config, args.name, args.type, args.output))
        if not args.no_uvloop:
            try:
                import uvloop

                return int(uvloop.run(_serve(config)))
            except ImportError:
                pass
        return asyncio.run(_serve(config))
    except (FileSourceError, ValueError, OSError) as exc:
        print(f"dnsside: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
