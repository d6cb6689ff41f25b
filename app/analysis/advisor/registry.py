"""The advisor's rule registry: a decorator that registers a rule function (analysis layer).

Adding a rule is one decorated function in its family's module::

    @rule("data_loading_bound", family="dataloading", title="Input pipeline stalls the step")
    def data_loading_bound(ev: RunEvidence) -> list[Finding]: ...

A rule is a pure function: it reads the evidence and returns zero or more findings, or raises
:class:`MissingEvidence` when the run cannot show the problem either way.

A rule may name the quantity it guards (``guards=Guard(...)``): the number that says how bad the
problem is (the data share of the step, the best validation loss), which way is better, and how to
measure it on any run. The advisor measures it on every run the rule checked, fired or not, so a
comparison never calls a finding "resolved" when that quantity got worse (diff.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .model import Finding, RunEvidence

__all__ = ["Guard", "Rule", "RuleFunc", "rule", "registered_rules", "get_rule"]

RuleFunc = Callable[[RunEvidence], list[Finding]]


@dataclass(frozen=True)
class Guard:
    """The quantity a rule guards: ``key`` (its name, the finding's evidence key when it has one),
    ``better`` ("lower" or "higher"), ``label`` (for people, e.g. "best val_loss"), and
    ``measure(ev)``: its value on a run, None when the run cannot show it (may raise
    MissingEvidence, read as None)."""

    key: str
    better: Literal["lower", "higher"]
    label: str
    measure: Callable[[RunEvidence], float | None]

    def __post_init__(self) -> None:
        if self.better not in ("lower", "higher"):
            raise ValueError(f"Guard {self.key!r}: better must be 'lower' or 'higher', not {self.better!r}")

    def got_worse(self, baseline: float, candidate: float) -> bool:
        """True when ``candidate`` is worse than ``baseline`` in this quantity's direction."""
        return candidate > baseline if self.better == "lower" else candidate < baseline


@dataclass(frozen=True)
class Rule:
    """A registered rule: its id, family, a one-line description, the function, and the quantity
    it guards (None: the diff judges its findings by presence alone)."""

    id: str
    family: str
    title: str
    func: RuleFunc
    guards: Guard | None = None


_RULES: dict[str, Rule] = {}


def rule(rule_id: str, *, family: str, title: str, guards: Guard | None = None) -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func`` under ``rule_id``; raises ValueError when the id is taken."""

    def decorate(func: RuleFunc) -> RuleFunc:
        if rule_id in _RULES and _RULES[rule_id].func is not func:
            raise ValueError(f"advisor rule {rule_id!r} is registered twice")
        _RULES[rule_id] = Rule(id=rule_id, family=family, title=title, func=func, guards=guards)
        return func

    return decorate


def registered_rules() -> list[Rule]:
    """Every registered rule, in registration order (family modules are imported by the package)."""
    return list(_RULES.values())


def get_rule(rule_id: str) -> Rule:
    """The rule registered under ``rule_id``; raises KeyError naming the known ids."""
    try:
        return _RULES[rule_id]
    except KeyError:
        raise KeyError(f"unknown advisor rule {rule_id!r}; known: {', '.join(sorted(_RULES))}") from None
