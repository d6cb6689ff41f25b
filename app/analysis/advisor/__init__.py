"""The advisor: rules that find problems in a run, show the evidence and give the fix (analysis layer).

Public surface::

    advise(evidence) -> Advice                 # run every registered rule
    diff_findings(baseline, candidate, checked=None) -> FindingsDiff   # resolved / remaining / new / worse
    diff_advice(baseline, candidate) -> FindingsDiff   # the same, with the rules' guarded measures
    describe_weight(finding.weight) -> str     # "from 3 profiled steps in 1 window, 7.5–35 ms per step; …"

Loading a run or trace path and advising on it is the workspace's (app.workspace.evidence:
``load_evidence``, ``advise_path``).

Rules live one family per module (dataloading, precision, transfers, launch, utilization, memory,
evaluation, optimizer, gradients, training, distributed, threads) and register themselves with
``@rule`` from :mod:`registry`. docs/advisor.md documents every rule's threshold and reasoning.
"""
from __future__ import annotations

import math

from . import (  # noqa: F401 - importing a family module registers its rules
    dataloading,
    distributed,
    evaluation,
    gradients,
    inference,
    launch,
    memory,
    optimizer,
    precision,
    threads,
    training,
    transfers,
    utilization,
)
from .common import describe_weight
from .diff import FindingsDiff, RemainingFinding, WorseFinding, diff_advice, diff_findings
from .evidence import evidence_from_run, evidence_from_traces
from .model import SEVERITY_ORDER, Advice, Finding, MissingEvidence, RunEvidence, Severity, Weight
from .registry import Guard, Rule, get_rule, registered_rules, rule

__all__ = [
    "SEVERITY_ORDER",
    "Advice",
    "Finding",
    "FindingsDiff",
    "Guard",
    "MissingEvidence",
    "RemainingFinding",
    "Rule",
    "RunEvidence",
    "Severity",
    "Weight",
    "WorseFinding",
    "advise",
    "diff_advice",
    "describe_weight",
    "diff_findings",
    "evidence_from_run",
    "evidence_from_traces",
    "get_rule",
    "order_findings",
    "registered_rules",
    "rule",
]


def order_findings(findings: list[Finding]) -> list[Finding]:
    """Findings by expected gain (largest first), then severity, then rule id."""
    return sorted(findings, key=lambda f: (-float(f.gain_share), SEVERITY_ORDER[f.severity], f.key))


def advise(evidence: RunEvidence, *, rules: list[str] | None = None) -> Advice:
    """Run the registered rules (or only ``rules``) over ``evidence``.

    A rule that raises MissingEvidence is listed in ``skipped`` with its reason; one that raises
    anything else is listed in ``errors`` (a bug in the rule must not hide the other findings).
    ``measures`` holds, for every checked rule with a Guard, the guarded quantity on this run.
    """
    selected = [r for r in registered_rules() if rules is None or r.id in rules]
    findings: list[Finding] = []
    checked: list[str] = []
    skipped: dict[str, str] = {}
    errors: dict[str, str] = {}
    for r in selected:
        try:
            found = r.func(evidence)
        except MissingEvidence as e:
            skipped[r.id] = str(e)
            continue
        except Exception as e:  # noqa: BLE001 - reported in Advice.errors, never swallowed silently
            errors[r.id] = f"{type(e).__name__}: {e}"
            continue
        checked.append(r.id)
        findings.extend(found)
    measures = _measures([r for r in selected if r.id in checked], evidence, errors)
    return Advice(source=evidence.source, findings=tuple(order_findings(findings)), checked=tuple(checked),
                  skipped=skipped, errors=errors, problems=evidence.problems, measures=measures)


def _measures(rules: list[Rule], evidence: RunEvidence, errors: dict[str, str]) -> dict[str, float]:
    """Rule id → the quantity it guards on this run, for the ``rules`` that have a Guard and can
    measure it (a failing measure is reported in ``errors``, like a failing rule)."""
    measures: dict[str, float] = {}
    for r in rules:
        if r.guards is None:
            continue
        try:
            v = r.guards.measure(evidence)
        except MissingEvidence:
            continue
        except Exception as e:  # noqa: BLE001 - reported, never swallowed; the diff then claims nothing
            errors[r.id] = f"measuring {r.guards.key}: {type(e).__name__}: {e}"
            continue
        if v is not None and math.isfinite(float(v)):
            measures[r.id] = float(v)
    return measures
