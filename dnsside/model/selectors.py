"""A Link's ``remoteDiscoverySelector``: a Kubernetes label selector, read as Linkerd reads it.

The subtle point is the empty selector. Kubernetes takes a selector without requirements
to select everything; Linkerd's service mirror takes it to select nothing, and so must
dnsside, or a Link written without a selector would publish every Service of its cluster.
A malformed selector is a :class:`SelectorError`, which the Link's parser turns into a
selector that selects nothing and says why, so that it never costs the whole Link.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard


class SelectorError(ValueError):
    """A selector that is not a metav1.LabelSelector; the text names the field."""


def is_map(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping)


def is_str_list(raw: Any) -> bool:
    """A list of strings."""
    return type(raw) is list and all(isinstance(v, str) for v in raw)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector as Linkerd reads a Link's ``remoteDiscoverySelector``: the
    requirements are ANDed, and one without any requirement selects *nothing* (Kubernetes
    would say everything; Linkerd does not, and neither may dnsside)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    # (key, operator, values): In, NotIn, Exists, DoesNotExist
    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.match_labels and not self.expressions:
            return False
        if any(labels.get(k) != v for k, v in self.match_labels):
            return False
        for key, operator, values in self.expressions:
            value = labels.get(key)
            if operator == "In" and value not in values:
                return False
            if operator == "NotIn" and value in values:
                return False
            if operator == "Exists" and value is None:
                return False
            if operator == "DoesNotExist" and value is not None:
                return False
        return True

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        for key, operator, values in self.expressions:
            if operator == "Exists":
                parts.append(key)
            elif operator == "DoesNotExist":
                parts.append("!" + key)
            else:
                parts.append(f"{key} {operator.lower()} ({','.join(values)})")
        return ",".join(parts) or "(empty: selects nothing)"


OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def parse_label_selector(raw: Any, ident: str) -> LabelSelector:
    """``spec.remoteDiscoverySelector``; ObjectError naming the field when malformed."""
    if raw is None:
        return LabelSelector()
    if not is_map(raw):
        raise SelectorError(f"{ident}: spec.remoteDiscoverySelector must be an object")
    labels = raw.get("matchLabels") or {}
    if not is_map(labels) or not all(isinstance(k, str) and isinstance(v, str)
                                      for k, v in labels.items()):
        raise SelectorError(f"{ident}: spec.remoteDiscoverySelector.matchLabels must map "
                          "strings to strings")
    expressions = []
    for i, e in enumerate(raw.get("matchExpressions") or []):
        field = f"spec.remoteDiscoverySelector.matchExpressions[{i}]"
        if not is_map(e) or not isinstance(e.get("key"), str):
            raise SelectorError(f"{ident}: {field} must be an object with a key")
        operator, values = e.get("operator"), e.get("values") or []
        if operator not in OPERATORS:
            raise SelectorError(f"{ident}: {field}.operator {operator!r} is not one of "
                              f"{', '.join(OPERATORS)}")
        if not is_str_list(values):
            raise SelectorError(f"{ident}: {field}.values must be a list of strings")
        expressions.append((e["key"], operator, tuple(values)))
    return LabelSelector(tuple(sorted(labels.items())), tuple(expressions))
