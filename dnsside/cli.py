"""dnsside: `serve` answers *.svc-global, `explain` says why; `install`, `check` in cli_admin.

Every serve flag can also come from `DNSSIDE_<FLAG>`.

Environment values are defaults that the command line overrides; repeatable
flags take a comma-separated list from the environment (`DNSSIDE_ZONE=a.,b.`).
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
from dnsside.app import App, Config, make_source, ns_addresses, parse_hostport

_TRUE = {"1", "true", "yes", "on"}


def _env(flag: str) -> str | None:
    return os.environ.get("DNSSIDE_" + flag.lstrip("-").replace("-", "_").upper())


def _add(p: argparse.ArgumentParser, flag: str, **kw: Any) -> None:
    env = _env(flag)
    action = kw.get("action")
    if env is not None:
        if action == "store_true":
            kw["default"] = env.lower() in _TRUE
        elif action == "append":
            kw["default"] = [v for v in env.split(",") if v]
        else:
            kw["default"] = kw.get("type", str)(env)
    if action == "append":
        kw.setdefault("default", None)
    p.add_argument(flag, **kw)


def _source_flags(p: argparse.ArgumentParser) -> None:
    _add(p, "--source", default="kube", help="`kube` to watch the API server, or a YAML/JSON file "
         "of Services and EndpointSlices (reloaded when it changes)")
    _add(p, "--kubeconfig", default=None, help="kubeconfig for --source kube "
         "(default $KUBECONFIG, ~/.kube/config, else in-cluster)")
    _add(p, "--cluster-name", default="local", help="name of this cluster in answers")
    _add(p, "--zone", action="append", help="served zone, repeatable (default svc-global.)")
    _add(p, "--mcs-zone", action="append", help="also serve the Multi-Cluster Services "
         "(KEP-1645) names under this zone, e.g. clusterset.local.; repeatable")
    _add(p, "--ns-address", action="append", metavar="IP",
         help="address of the zone's name server, the apex (NS glue, A/AAAA), repeatable "
         "(default $POD_IP, else the --listen address if specific, else 127.0.0.1)")
    _add(p, "--ttl", type=int, default=5, help="TTL of every record and SOA minimum")
    _add(p, "--publish-not-ready", action="store_true", help="answer with not-ready members too")
    _add(p, "--no-local", action="store_true", help="leave this cluster's endpoints out")
    _add(p, "--srv-priority", default="equal", choices=["equal", "local-first"],
         help="SRV priority: all 0, or local members 0 and remote 10")
    _add(p, "--namespace", action="append", help="watch only this namespace, repeatable "
         "(Links are always read cluster-wide)")
    _add(p, "--no-federated", action="store_true",
         help="leave out the members of Linkerd federated services (<svc>-federated)")
    _add(p, "--kube-backoff-cap", type=float, default=30.0,
         help="longest wait, in seconds, between retries against the API server")
    _add(p, "--reload-interval", type=float, default=1.0,
         help="seconds between checks of a --source FILE for changes")
    _add(p, "--log-format", default="text", choices=["text", "json"])
    _add(p, "--log-level", default="info", choices=["debug", "info", "warning", "error"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dnsside", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"dnsside {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="answer *.svc-global over DNS")
    _source_flags(serve)
    _add(serve, "--listen", default="127.0.0.1:5353", help="DNS address (UDP and TCP)")
    _add(serve, "--http-listen", default="127.0.0.1:9153",
         help="/metrics, /healthz, /readyz, /debug/explain")
    _add(serve, "--tcp-idle-timeout", type=float, default=10.0, help="seconds")
    _add(serve, "--tcp-max-connections", type=int, default=512)
    _add(serve, "--query-log", action="store_true", help="log every query (slow)")
    _add(serve, "--gateway-probe", default="auto", choices=["auto", "on", "off"],
         help="probe each link's gateway and leave out the members behind a failing one "
         "(auto: on with --source kube, off with a file)")
    _add(serve, "--gateway-probe-period", type=float, default=1.0,
         help="seconds between two probes of a gateway")
    _add(serve, "--gateway-probe-timeout", type=float, default=1.0,
         help="seconds a probe may take before it counts as failed")
    _add(serve, "--gateway-probe-failures", type=int, default=2,
         help="consecutive failed probes after which a gateway counts as failing")
    _add(serve, "--no-uvloop", action="store_true", help="use asyncio's own event loop")
    _add(serve, "--lameduck", type=float, default=5.0, metavar="SECONDS",
         help="after SIGTERM, stay not ready but keep answering this long, then stop")
    _add(serve, "--udp-io", default="batch", choices=["batch", "plain"],
         help="UDP system calls: batch (recvmmsg/sendmmsg, Linux; falls back to plain where "
         "unavailable) or plain (one recvfrom and one sendto per query)")
    explain = sub.add_parser("explain", help="print the answer to NAME and where it comes from")
    _source_flags(explain)
    explain.add_argument("name")
    explain.add_argument("type", nargs="?", default="A")
    from dnsside.cli_admin import add_admin_commands

    add_admin_commands(sub, serve)
    return parser


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


def config_from(args: argparse.Namespace) -> Config:
    config = Config(
        source=args.source,
        kubeconfig=args.kubeconfig,
        cluster_name=args.cluster_name.lower(),
        zones=tuple(z if z.endswith(".") else z + "." for z in (args.zone or ["svc-global."])),
        mcs_zones=tuple(dict.fromkeys(z.lower() if z.endswith(".") else z.lower() + "."
                                      for z in (args.mcs_zone or ()))),
        ttl=args.ttl,
        publish_not_ready=args.publish_not_ready,
        no_local=args.no_local,
        srv_priority=args.srv_priority,
        namespaces=tuple(args.namespace or ()),
        reload_interval=args.reload_interval,
        kube_backoff_cap=args.kube_backoff_cap,
        ns_addresses=ns_addresses(args.ns_address, os.environ.get("POD_IP"),
                                  args.listen if args.command == "serve" else None),
        no_federated=args.no_federated,
    )
    if args.command == "serve":
        config.gateway_probe = args.gateway_probe
        config.gateway_probe_period = args.gateway_probe_period
        config.gateway_probe_timeout = args.gateway_probe_timeout
        config.gateway_probe_failures = args.gateway_probe_failures
        config.listen = args.listen
        config.http_listen = args.http_listen
        config.tcp_idle_timeout = args.tcp_idle_timeout
        config.tcp_max_connections = args.tcp_max_connections
        config.query_log = args.query_log
        config.lameduck = args.lameduck
        config.udp_io = args.udp_io
    return config


def _check(config: Config) -> None:
    from dnsside.linkerd import is_dns_label
    from dnsside.wire import to_wire

    if not is_dns_label(config.cluster_name):
        raise ValueError(f"--cluster-name {config.cluster_name!r} is not a DNS label")
    for zone in config.zones:
        to_wire(zone)
    for zone in config.mcs_zones:
        to_wire(zone)
        if zone == ".":
            raise ValueError("--mcs-zone . would claim every name; give a zone such as "
                             "clusterset.local.")
        for other in (*config.zones, *(z for z in config.mcs_zones if z != zone)):
            if _within(zone, other) or _within(other, zone):
                flag = "--zone" if other in config.zones else "--mcs-zone"
                raise ValueError(f"--mcs-zone {zone} overlaps {flag} {other}: a name in both "
                                 "would have two meanings; serve zones that do not nest")
    if config.ttl < 0:
        raise ValueError("--ttl must be >= 0")
    for flag, value in (("--gateway-probe-period", config.gateway_probe_period),
                        ("--gateway-probe-timeout", config.gateway_probe_timeout)):
        if not value > 0:
            raise ValueError(f"{flag} must be > 0 seconds, not {value}")
    if config.gateway_probe_failures < 1:
        raise ValueError("--gateway-probe-failures must be >= 1")
    if config.lameduck < 0:
        raise ValueError("--lameduck must be >= 0")
    parse_hostport(config.listen, "--listen")
    parse_hostport(config.http_listen, "--http-listen")


def _within(name: str, zone: str) -> bool:
    """``name`` is ``zone`` or below it (both absolute, any case)."""
    name, zone = name.lower(), zone.lower()
    return zone == "." or name == zone or name.endswith("." + zone)


async def _serve(config: Config) -> int:
    app = App(config, make_source(config))
    return await app.run()


async def _explain(config: Config, name: str, qtype: str) -> int:
    from dnsside.explain import Explainer

    app = App(config, make_source(config))
    async for batch in app.source.events():
        app.index.apply(batch)
        if app.index.synced:
            break
    print(json.dumps(Explainer(app.index).explain(name, qtype), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("install", "check"):
        from dnsside.cli_admin import run_admin_command

        return run_admin_command(args, list(sys.argv[1:] if argv is None else argv))
    setup_logging(args.log_format, args.log_level)
    from dnsside.sources.file import FileSourceError

    try:
        config = config_from(args)
        _check(config)
        if args.command == "explain":
            return asyncio.run(_explain(config, args.name, args.type))
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
