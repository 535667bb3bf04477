"""YAML as ``dnsside install`` prints it: block style, and Corefiles as literal blocks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml


class Dumper(yaml.SafeDumper):
    """Block style everywhere, literal blocks for multi-line strings (Corefiles)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


Dumper.add_representer(str, _str)


def to_yaml(objs: Sequence[Mapping[str, Any]], header: str = "") -> str:
    """The objects as one YAML stream, ``header`` above them as comment lines."""
    body = yaml.dump_all([dict(o) for o in objs], Dumper=Dumper, sort_keys=False,
                         default_flow_style=False, explicit_start=True, width=100)
    return comment(header) + body


def comment(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines())
