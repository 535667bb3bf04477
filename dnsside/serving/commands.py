"""`dnsside serve` and `dnsside explain` as commands: what runs once the command line is
parsed, from the flags' values to the exit status.

The entry (:mod:`dnsside.cli`) loads this module, and with it the serving wing, only when
one of these two is the command, as it loads :mod:`dnsside.ops.commands` only for install
and check: `--version`, `--help` and a mistyped flag import nearly nothing (the test suite
starts dnsside hundreds of times; issue 38).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time

from dnslib import QTYPE

from dnsside.config import EXPLAIN, EXPLAIN_TYPES, Config
from dnsside.dns.tsig import TsigKey, load_key_file
from dnsside.dns.wire import to_wire
from dnsside.flagvalues import checked_config, flag_values, misspelt_variables
from dnsside.kubeapi.errors import KubeConfigError
from dnsside.serving.app import NO_CLUSTER_HINT, App, explain_index, make_source
from dnsside.sources.file import FileSourceError

EXPLAIN_SYNC_SECONDS = 30.0  # how long `explain` waits for its source's first complete list


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


def tsig_key(config: Config) -> TsigKey | None:
    """The key of ``--tsig-key-file``, read before anything starts: a file that does not
    parse is one line and exit status 2, not a server that refuses every transfer."""
    if config.tsig_key_file is None:
        return None
    try:
        return load_key_file(config.tsig_key_file)
    except ValueError as exc:
        raise ValueError(f"--tsig-key-file: {exc}") from None


async def _serve(config: Config, key: TsigKey | None) -> int:
    app = App(config, make_source(config), key)
    return await app.run()


def explain_question(name: str, qtype: str) -> tuple[str, str]:
    """The question `explain` asks, checked before any source is loaded (a bad one is one
    line and exit status 2, not a report after a whole sync)."""
    if not name.strip(". "):
        raise ValueError(f"explain: {name!r}: give a name in a served zone, e.g. "
                         "nginx-svc.default.svc-global")
    try:
        to_wire(name)
    except ValueError as exc:
        raise ValueError(f"explain: {exc}") from None
    upper = qtype.upper()
    if QTYPE.reverse.get(upper) is None:
        raise ValueError(f"explain: {qtype!r} is not a DNS record type: {EXPLAIN_TYPES}")
    return name, upper


async def _explain(config: Config, name: str, qtype: str, output: str = "text") -> int:
    from dnsside.core.explain import Explainer, render

    try:
        async with asyncio.timeout(EXPLAIN_SYNC_SECONDS):
            index = await explain_index(config)
    except TimeoutError:
        raise ValueError(f"explain: the source ({config.source}) did not finish its first "
                         f"complete list within {EXPLAIN_SYNC_SECONDS:.0f} s; "
                         "`dnsside serve --log-level debug` shows why") from None
    report = Explainer(index).explain(name, qtype)
    if "error" in report:
        print(f"dnsside: explain: {report['error']}", file=sys.stderr)
        return 1
    if output == "json":
        print(json.dumps(report, indent=2))
    elif output == "yaml":
        import yaml

        print(yaml.safe_dump(report, sort_keys=False, allow_unicode=True), end="")
    else:
        print(render(report), end="")
    return 0


def run_serving_command(args: argparse.Namespace) -> int:
    """Run ``serve`` or ``explain``: their flags' values (``DNSSIDE_<FLAG>`` among them)
    checked, the logging set up, then the server's life or the one report; every error a
    user can cause is one line and exit status 2."""
    try:
        values = flag_values(args.command, vars(args), os.environ)
    except ValueError as exc:
        print(f"dnsside: {exc}", file=sys.stderr)
        return 2
    setup_logging(values["log_format"], values["log_level"])
    for warning in misspelt_variables(os.environ):
        print(f"dnsside: warning: {warning}", file=sys.stderr)
    try:
        config = checked_config(args.command, vars(args), os.environ, os.environ.get("POD_IP"))
        key = tsig_key(config)
        if args.command == EXPLAIN:
            name, qtype = explain_question(args.name, args.type)
            return asyncio.run(_explain(config, name, qtype, args.output))
        if not values["no_uvloop"]:
            try:
                import uvloop

                return int(uvloop.run(_serve(config, key)))
            except ImportError:
                pass
        return asyncio.run(_serve(config, key))
    except KubeConfigError as exc:
        print(f"dnsside: {exc}; {NO_CLUSTER_HINT}", file=sys.stderr)
        return 2
    except (FileSourceError, ValueError, OSError) as exc:
        print(f"dnsside: {exc}", file=sys.stderr)
        return 2
