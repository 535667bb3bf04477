"""Checks as entries, the way `linkerd check` declares them, and the walk that runs them.

An entry (:class:`Check`) holds all there is to one check: the line it prints, the hint
shown when it fails, whether a failure ends the run, fails it or only warns, and the
function that checks. Entries sit in lists grouped in categories, and the list order is
the run order and the order of the output. A check's function reads what it needs from
a context, the facts gathered so far (a fact several checks judge is read once, by the
first that asks: :func:`once`), and yields what it found: one finding, or one per item
for a check over many (each resource RBAC must grant), or none when there is nothing to
judge.

Checks depend on each other without saying so: a check never asks whether an
earlier one failed: it finds the fact it needs missing (the Links could not be listed,
the Secret has no kubeconfig) and says nothing, because the check that could not read it
already said why. Only a fatal failure stops the walk, where nothing after it could read
anything (no client, no API server).
"""

from __future__ import annotations

import contextlib
import enum
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeAlias, TypeVar, cast

OK, FAIL, WARN = "\u2713", "\u00d7", "\u203c"  # check mark, cross, double !, as linkerd

C = TypeVar("C")  # what a check reads: the cluster's facts, one Link, one zone...
C_contra = TypeVar("C_contra", contravariant=True)
Item = TypeVar("Item")
S = TypeVar("S")
T = TypeVar("T")


class Severity(enum.Enum):
    ERROR = "error"  # a failure fails the run (exit status 1)
    FATAL = "fatal"  # and ends it: the checks after it could read nothing
    WARNING = "warning"  # a failure is shown with its hint and fails nothing


class Finding:
    """What one check found: ``ok``, and the facts that fill in its description and hint
    (``text`` replaces the description where the finding says more than it)."""

    __slots__ = ("facts", "ok", "text")

    def __init__(self, ok: bool, text: str | None = None, **facts: object) -> None:
        self.ok = ok
        self.text = text
        self.facts = facts


Findings: TypeAlias = AsyncGenerator[Finding, None]


@dataclass(frozen=True)
class Result:
    """One line of output: a finding with its texts filled in."""

    topic: str
    ok: bool
    text: str
    hint: str = ""
    warning: bool = False


class Step(Protocol[C_contra]):
    """What a list of checks holds: a check, or checks run over several contexts."""

    async def walk(self, topic: str, context: C_contra, results: list[Result]) -> bool:
        """Run over ``context``, adding to ``results``; False when a fatal check failed."""


@dataclass(frozen=True)
class Check(Generic[C]):
    """One check: ``description`` and ``hint`` are templates filled in by each finding's
    facts; ``run`` checks, over the context its list walks."""

    id: str
    description: str
    hint: str
    severity: Severity
    run: Callable[[C], Findings]

    async def walk(self, topic: str, context: C, results: list[Result]) -> bool:
        async with contextlib.aclosing(self.run(context)) as findings:
            async for found in findings:
                facts = found.facts
                text = self.description.format(**facts) if found.text is None else found.text
                hint = "" if found.ok else self.hint.format(**facts)
                results.append(Result(topic, found.ok, text, hint,
                                      self.severity is Severity.WARNING))
                if not found.ok and self.severity is Severity.FATAL:
                    return False
        return True


def check(id: str, description: str, hint: str = "", severity: Severity = Severity.ERROR
          ) -> Callable[[Callable[[C], Findings]], Check[C]]:
    """Make the decorated function the entry's ``run``: the texts, the severity and the
    code of a check sit together, and the name of the function names the entry."""

    def entry(run: Callable[[C], Findings]) -> Check[C]:
        return Check(id, description, hint, severity, run)

    return entry


@dataclass(frozen=True)
class ForEach(Generic[C, Item]):
    """``checks`` run over each context that ``over`` yields, in turn: each Link, each
    zone; or once when a setting applies (one context) and never when it does not (none).
    What ``over`` opens for a context it closes after the yield, when its checks ran."""

    over: Callable[[C], AsyncGenerator[Item, None]]
    checks: Sequence[Step[Item]]

    async def walk(self, topic: str, context: C, results: list[Result]) -> bool:
        async with contextlib.aclosing(self.over(context)) as items:
            async for item in items:
                for step in self.checks:
                    if not await step.walk(topic, item, results):
                        return False
        return True


@dataclass(frozen=True)
class Category(Generic[C]):
    """A heading of the output and the checks under it."""

    name: str
    checks: Sequence[Step[C]]


def once(read: Callable[[S], Awaitable[T]]) -> Callable[[S], Awaitable[T]]:
    """An async method without arguments that reads once: every later call returns the
    first call's result (on the same object), so checks that judge the same fact from
    different angles cost one request between them."""
    key = f"_once_{read.__name__}"

    @functools.wraps(read)
    async def first(self: S) -> T:
        memo = vars(self)
        if key not in memo:
            memo[key] = await read(self)
        return cast(T, memo[key])

    return first


async def walk(categories: Sequence[Category[C]], context: C) -> list[Result]:
    """Run every check in order; the results up to a fatal failure, if one fails."""
    results: list[Result] = []
    for category in categories:
        for step in category.checks:
            if not await step.walk(category.name, context, results):
                return results
    return results


def passed(result: Result) -> bool:
    """A result that does not fail the run: it passed, or it is a warning."""
    return result.ok or result.warning


def render_results(results: Sequence[Result]) -> str:
    lines: list[str] = []
    topic = None
    for r in results:
        if r.topic != topic:
            if topic is not None:
                lines.append("")
            lines += [r.topic, "-" * len(r.topic)]
            topic = r.topic
        lines.append(f"{OK if r.ok else WARN if r.warning else FAIL} {r.text}")
        if not r.ok and r.hint:
            lines.append(f"    hint: {r.hint}")
    failed = sum(1 for r in results if not passed(r))
    lines += ["", f"Status check results are {FAIL if failed else OK}"
              + (f" ({failed} failed)" if failed else "")]
    return "\n".join(lines) + "\n"


__all__ = ["Category", "Check", "Finding", "Findings", "ForEach", "Result", "Severity", "Step",
           "check", "once", "passed", "render_results", "walk"]
