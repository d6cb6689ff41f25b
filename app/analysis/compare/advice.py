"""The advisor's verdict on a comparison: which findings the candidate resolved, kept or added (analysis layer).

A thin bridge from comparison sides to ``app.analysis.advisor`` (which owns the rules and the
matching): the sides' already-loaded traces and analyses are reused, nothing is read twice.
"""
from __future__ import annotations

from collections.abc import Iterable

from app.analysis.advisor import (
    Advice,
    Finding,
    FindingsDiff,
    advise,
    diff_advice,
    evidence_from_run,
    evidence_from_traces,
)
from app.analysis.compare.side import CompareSide

__all__ = ["side_advice", "diff_side_advice", "findings_diff_rows"]


def side_advice(side: CompareSide) -> Advice:
    """The advisor's ``Advice`` for one side (a run, or bare traces)."""
    if side.run is not None:
        evidence = evidence_from_run(side.run, traces=list(side.traces), analysis=side.analysis,
                                     module_tree=side.module_tree)
    else:
        evidence = evidence_from_traces(list(side.traces), source=str(side.path), analysis=side.analysis)
    return advise(evidence)


def diff_side_advice(baseline: CompareSide, candidate: CompareSide) -> FindingsDiff:
    """The advisor's FindingsDiff (resolved / remaining / new / unverified / worse) between two sides."""
    return diff_advice(side_advice(baseline), side_advice(candidate))


def findings_diff_rows(diff: FindingsDiff) -> list[dict[str, str]]:
    """One row per finding of a FindingsDiff: ``status``, ``rule``, ``severity``, ``title``, ``fix``."""
    def rows(findings: Iterable[Finding], status: str) -> list[dict[str, str]]:
        return [{"status": status, "rule": f.rule, "severity": str(f.severity), "title": f.title,
                 "fix": f.fix_summary} for f in findings]

    worse = [{"status": "not resolved: got worse", "rule": w.baseline.rule, "severity": str(w.baseline.severity),
              "title": f"{w.baseline.title} ({w.reason})", "fix": w.baseline.fix_summary}
             for w in diff.worse]
    return (rows(diff.resolved, "resolved") + rows([r.candidate for r in diff.remaining], "remaining")
            + rows(diff.new, "new") + rows(diff.unverified, "not checked on the candidate") + worse)
