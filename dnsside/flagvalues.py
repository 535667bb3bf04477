"""The one path from the command line and ``DNSSIDE_*`` to a checked :class:`Config`.

``serve`` and ``explain`` read their flags here; ``install`` passes the ConfigMap it is
about to print through the same :func:`checked_config`, so that it refuses what the pods
would refuse (a crash loop after ``kubectl apply`` is far from the typo).

The subtle point: the environment is read *after* argparse, never as argparse defaults.
A default argparse cannot convert is a traceback while the parser is being built, for
every command, ``--help`` included; a default it can convert is never checked against
the flag's choices. Here a bad ``DNSSIDE_<FLAG>`` is one line naming the variable, the
value and what it accepts, for the commands that read it (``serve``, ``explain``);
``--help``, ``--version``, ``install`` and ``check`` do not read it.

It is in the bottom layer with :mod:`dnsside.config`, the only dnsside module it imports.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from collections.abc import Mapping
from typing import Any

from dnsside.config import FLAGS, Config, Flag, flags_for, is_host_label

BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
# The least value of a number flag, and whether the least itself is allowed; a number
# flag not named here must be >= 0. Every number must be finite: float() reads "nan".
LEAST: dict[str, tuple[float, bool]] = {
    "--tcp-idle-timeout": (0, False), "--tcp-max-connections": (1, True),
    "--reload-interval": (0, False), "--kube-backoff-cap": (0, False),
    "--gateway-probe-period": (0, False), "--gateway-probe-timeout": (0, False),
    "--gateway-probe-failures": (1, True),
    "--flat-network-max-endpoints": (1, True), "--flat-network-max-objects": (1, True),
    "--flat-network-max-object-bytes": (1, True), "--flat-network-timeout": (0, False),
}
MAX_TTL = 2**31 - 1  # RFC 2181 §8: a resolver reads a TTL above it as 0


def expected(f: Flag) -> str:
    """What ``f`` accepts, in the words of an error message."""
    if f.switch:
        return "true or false (also 1/0, yes/no)"
    if f.choices:
        return "one of " + ", ".join(f.choices)
    if f.type is int:
        return "a whole number" + (" of seconds" if f.metavar == "SECONDS" else "")
    if f.type is float:
        return "a number" + (" of seconds, e.g. 5 or 0.5" if f.metavar == "SECONDS" else "")
    return f.metavar or "a value"


def env_value(f: Flag, text: str) -> Any:
    """The value ``DNSSIDE_<FLAG>=text`` stands for, checked as ``--flag text`` is on the
    command line (type and choices). A switch takes only the spellings of
    :data:`BOOLEANS`: a typo that quietly meant "off" would hide. Raises ValueError
    naming the variable, the value and what it accepts."""
    try:
        if f.switch:
            return BOOLEANS[text.strip().lower()]
        if f.repeatable:
            return f.from_env(text)
        value = f.type(text.strip())
    except (KeyError, ValueError):
        raise ValueError(f"{f.env}={text!r}: expected {expected(f)}") from None
    if f.choices and value not in f.choices:
        raise ValueError(f"{f.env}={text!r}: expected {expected(f)}")
    return value


def flag_values(command: str, given: Mapping[str, Any],
                environ: Mapping[str, str]) -> dict[str, Any]:
    """Every flag of ``command`` by dest: the command line's value (``given``; None or
    absent = not given), else its ``DNSSIDE_<FLAG>`` in ``environ`` (checked by
    :func:`env_value`), else the default. The command line replaces a variable, also
    for a repeatable flag."""
    out = {}
    for f in flags_for(command):
        value = given.get(f.dest)
        if value is None and f.env in environ:
            value = env_value(f, environ[f.env])
        out[f.dest] = f.default if value is None else value
    return out


def misspelt_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each ``DNSSIDE_*`` variable that is no flag's but nearly one's (a typo
    would otherwise be ignored without a word). Names far from every flag's are left alone:
    tools around dnsside may have variables of their own (the tests' DNSSIDE_FUZZ_*)."""
    names = [f.env for f in FLAGS]
    out = []
    for name in sorted(environ):
        if name.startswith("DNSSIDE_") and name not in names:
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.85)
            if close:
                out.append(f"{name} is no dnsside variable and is ignored; did you mean "
                           f"{close[0]}?")
    return out


def checked_config(command: str, given: Mapping[str, Any], environ: Mapping[str, str],
                   pod_ip: str | None = None, name_the_variable: bool = True) -> Config:
    """The :class:`Config` ``command`` runs with (:func:`flag_values`), checked by
    :meth:`Config.check` and this module's ``check_*``. Raises ValueError, one line; an
    error about a flag whose value came from ``environ`` also names the variable and its
    value (``name_the_variable=False``: ``install``, whose ConfigMap holds its own
    flags)."""
    values = flag_values(command, given, environ)
    try:
        config = Config.from_flags(command, values, pod_ip)
        config.check()
        check_numbers(config)
        check_namespaces(config)
        check_networks(config)
    except ValueError as exc:
        message = str(exc)
        named = re.match(r"--[a-z-]+", message)
        f = next((f for f in FLAGS if named and f.name == named.group(0)), None)
        if (name_the_variable and f is not None and given.get(f.dest) is None
                and f.env in environ):
            message += f" (from {f.env}={environ[f.env]!r})"
        raise ValueError(message) from None
    return config


def check_numbers(config: Config) -> None:
    """Raise ValueError for a number flag's value out of its range (:data:`LEAST`):
    :meth:`Config.check` checks some; a flag added to the table is checked here unless
    :data:`LEAST` says otherwise."""
    for f in FLAGS:
        if f.type not in (int, float) or f.repeatable or not hasattr(config, f.dest):
            continue
        value = getattr(config, f.dest)
        least, inclusive = LEAST.get(f.name, (0, True))
        if not math.isfinite(value):
            raise ValueError(f"{f.name} {value}: expected a finite number")
        if value < least or (value == least and not inclusive):
            raise ValueError(f"{f.name} must be {'>=' if inclusive else '>'} {least:g}, "
                             f"not {value}")
    if config.ttl > MAX_TTL:
        raise ValueError(f"--ttl must be <= {MAX_TTL} (RFC 2181), "
                         f"not {config.ttl}")


def check_namespaces(config: Config) -> None:
    """Raise ValueError for a ``--namespace`` no namespace can have (a lower-case DNS
    label): it would watch nothing, silently."""
    for ns in config.namespaces:
        if not is_host_label(ns):
            raise ValueError(f"--namespace {ns!r} is not a namespace name (a lower-case DNS "
                             "label: letters, digits and '-')")


def check_networks(config: Config) -> None:
    """Raise ValueError for a network with host bits set (``10.0.0.1/8``): it is read as
    10.0.0.0/8, far wider than the one address its writer probably meant."""
    for name, values in (("--explain-from", config.explain_from),
                         ("--allow-transfer", config.allow_transfer)):
        for value in values:
            try:
                ipaddress.ip_network(value.strip())
            except ValueError:
                wide = ipaddress.ip_network(value.strip(), strict=False)  # Config.check read it
                host = value.strip().partition("/")[0]
                raise ValueError(f"{name} {value!r} has host bits set: write {wide} for the "
                                 f"network, or {host} for the one address") from None
