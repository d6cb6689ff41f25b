"""Advisor data model: findings, severities and the evidence bundle rules read (analysis layer).

A rule reads a :class:`RunEvidence` (everything known about one run: manifest config, curves,
trace tables and their analysis) and returns :class:`Finding` objects. Nothing here imports
streamlit, plotly or torch.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from app.analysis.trace.summary import TraceAnalysis
from app.analysis.trace.windows import ProfiledWindow
from app.data.trace import TraceTables

__all__ = ["Severity", "Finding", "Weight", "RunEvidence", "MissingEvidence", "Advice", "SEVERITY_ORDER"]


class Severity(enum.StrEnum):
    """How much a finding matters; ``HIGH`` first."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


SEVERITY_ORDER: dict[Severity, int] = {Severity.HIGH: 0, Severity.MEDIUM: 1, Severity.LOW: 2}


class MissingEvidence(Exception):  # noqa: N818 - a signal, not an error shown to users
    """Raised by a rule when the run lacks what the rule needs (no trace, no grad_norm, ...).

    The advisor records the rule as *not checked* with this message instead of *silent*, so a
    comparison never calls a problem "resolved" on a run that could not show it.
    """


@dataclass(frozen=True)
class Weight:
    """What a finding's measure rests on, so a reader can tell a firm finding from a hint.

    ``steps``: how many steps (or points, see ``basis``) the measure was taken over; ``windows``:
    how many profiler windows (traces) those steps came from, 0 when measured from logged curves or
    samples; ``basis``: what ``steps`` counts ("profiled steps", "logged steps", "evaluation points",
    "samples"); ``measure``: the evidence key whose per-step values ``spread`` describes;
    ``spread``: (min, max) of that measure over the steps, None when it has no per-step values;
    ``step_ms``: (min, max) duration of those steps in ms, None when unknown; ``stable``: the
    severity gate's verdict (common.weigh: the signal holds across the steps), None when not
    judged; ``note``: why the severity was capped below HIGH ("" when it was not).
    """

    steps: int
    windows: int = 0
    basis: str = "profiled steps"
    measure: str = ""
    spread: tuple[float, float] | None = None
    step_ms: tuple[float, float] | None = None
    stable: bool | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """The ``weight`` object of a finding in `torchscope advise --json` (docs/advisor.md)."""
        def pair(p: tuple[float, float] | None) -> list[float | None] | None:
            return None if p is None else [json_number(p[0]), json_number(p[1])]

        return {"steps": int(self.steps), "windows": int(self.windows), "basis": self.basis,
                "measure": self.measure, "spread": pair(self.spread), "step_ms": pair(self.step_ms),
                "stable": self.stable, "note": self.note}


@dataclass(frozen=True)
class Finding:
    """One problem found in a run, with the numbers that prove it and what to do.

    ``evidence`` holds numbers only (JSON-ready); ``gain_share`` is the estimated fraction of
    step time the fix can save (0–1), or for training-health rules a fixed priority documented
    in docs/advisor.md; findings are ordered by it. ``chart`` names the tab/chart that shows
    the evidence. ``key`` identifies the finding across runs (rule + subject). ``weight`` says
    how many steps and windows the measure rests on and how it spread (None for rules that do not
    measure over steps).
    """

    rule: str
    family: str
    severity: Severity
    title: str
    explanation: str
    evidence: Mapping[str, float]
    fix_summary: str
    fix: str
    expected_gain: str
    gain_share: float
    doc_url: str
    chart: str
    subject: str = ""
    step: int | None = None
    rank: int | None = None
    weight: Weight | None = None

    @property
    def key(self) -> str:
        """Identity across runs: the rule, plus the subject when a rule can fire several times."""
        return f"{self.rule}:{self.subject}" if self.subject else self.rule

    def to_json(self) -> dict[str, Any]:
        """The documented JSON object of `torchscope advise --json` (docs/advisor.md)."""
        return {
            "rule": self.rule,
            "key": self.key,
            "family": self.family,
            "severity": str(self.severity),
            "title": self.title,
            "explanation": self.explanation,
            "evidence": {k: json_number(v) for k, v in self.evidence.items()},
            "fix_summary": self.fix_summary,
            "fix": self.fix,
            "expected_gain": self.expected_gain,
            "gain_share": round(float(self.gain_share), 4),
            "doc_url": self.doc_url,
            "chart": self.chart,
            "subject": self.subject,
            "step": self.step,
            "rank": self.rank,
            "weight": self.weight.to_json() if self.weight is not None else None,
        }


def json_number(v: float) -> float | int | None:
    """``v`` for JSON: ints and bools as ints, NaN as None, ±Inf as ±1e308, floats to 6 decimals."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    f = float(v)
    if math.isnan(f):
        return None
    if math.isinf(f):
        return 1e308 if f > 0 else -1e308
    return round(f, 6)


@dataclass(frozen=True)
class RunEvidence:
    """Everything the rules may read about one run; any part may be missing.

    ``config`` is the manifest's hyperparameters, ``devices`` its device list (the agent writes
    a cpu entry with ``count`` and ``threads``); ``metrics`` has ``step``, ``rank`` and one
    column per logged key; ``traces`` are TraceTables (app.data.trace) and ``analysis`` their
    TraceAnalysis (``steps``, ``ops``, ``kernels``, ``memory``). ``has_run`` is False for a
    bare trace, so rules that need curves or config stay silent. ``problems`` says what could
    not be read (an unreadable trace, a recovered truncated one): advice is then partial.
    """

    source: str
    has_run: bool = False
    config: Mapping[str, Any] = field(default_factory=dict)
    devices: tuple[Mapping[str, Any], ...] = ()
    world_size: int = 1
    metrics: pd.DataFrame | None = None
    system: pd.DataFrame | None = None
    traces: tuple[TraceTables, ...] = ()
    analysis: TraceAnalysis | None = None
    module_tree: Mapping[str, Any] | None = None
    # The manifest's ``threads``: intra_op, inter_op, cpu_count, affinity_cpus (docs/run-format.md).
    threads: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    # The manifest's profiler windows with their reasons; steps only anomaly windows recorded are
    # not typical training steps (common.training_steps leaves them out).
    windows: tuple[ProfiledWindow, ...] = ()

    @cached_property
    def steps(self) -> pd.DataFrame:
        """The per-rank step table of the trace analysis (empty without traces)."""
        steps = getattr(self.analysis, "steps", None)
        return steps if isinstance(steps, pd.DataFrame) else pd.DataFrame()

    @cached_property
    def device_properties(self) -> list[Mapping[str, Any]]:
        """deviceProperties of the first trace that has them (CUDA/ROCm traces)."""
        for t in self.traces:
            props = (getattr(t, "meta", None) or {}).get("deviceProperties") or []
            if props:
                return list(props)
        return []

    @cached_property
    def has_device_trace(self) -> bool:
        """True when some trace has GPU kernels."""
        return any(_has_kernels(t) for t in self.traces)


def _has_kernels(trace: TraceTables) -> bool:
    ev = getattr(trace, "events", None)
    return ev is not None and len(ev) > 0 and bool((ev["cat"].astype(str) == "kernel").any())


@dataclass(frozen=True)
class Advice:
    """What the advisor said about one run.

    ``findings`` ordered by expected gain; ``checked`` the rules that had their inputs (a rule
    in ``checked`` without a finding is a clean bill); ``skipped`` rule → why it could not look;
    ``errors`` rule → message of a rule that failed (a bug, reported rather than hidden);
    ``problems`` what could not be read from the run (see RunEvidence.problems); ``measures``
    rule → the value of the quantity the rule guards (registry.Guard) on this run, for every
    checked rule that has one, whether it fired or not (the diff uses it to tell "resolved" from
    "went away while the quantity got worse").
    """

    source: str
    findings: tuple[Finding, ...]
    checked: tuple[str, ...]
    skipped: Mapping[str, str]
    errors: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    measures: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "findings": [f.to_json() for f in self.findings],
            "checked": list(self.checked),
            "skipped": dict(self.skipped),
            "errors": dict(self.errors),
            "problems": list(self.problems),
            "measures": {k: json_number(v) for k, v in self.measures.items()},
        }
