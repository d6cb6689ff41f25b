"""The advisor's rule registry: a decorator that registers a rule function (analysis layer).

Adding a rule is one decorated function in its family's module::

    @rule("data_loading_bound", family="dataloading", title="Input pipeline stalls the step")
    def data_loading_bound(ev: RunEvidence) -> list[Finding]: ...

A rule is a pure function: it reads the evidence and returns zero or more findings, or raises
:class:`MissingEvidence` when the run cannot show the problem either way.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .model import Finding, RunEvidence

__all__ = ["Rule", "RuleFunc", "rule", "registered_rules", "get_rule"]

RuleFunc = Callable[[RunEvidence], list[Finding]]


@dataclass(frozen=True)
class Rule:
    """A registered rule: its id, family, a one-line description and the function."""

    id: str
    family: str
    title: str
    func: RuleFunc


_RULES: dict[str, Rule] = {}


def rule(rule_id: str, *, family: str, title: str) -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func`` under ``rule_id``; raises ValueError when the id is taken."""

    def decorate(func: RuleFunc) -> RuleFunc:
        if rule_id in _RULES and _RULES[rule_id].func is not func:
            raise ValueError(f"advisor rule {rule_id!r} is registered twice")
        _RULES[rule_id] = Rule(id=rule_id, family=family, title=title, func=func)
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
