"""Which findings a candidate run resolved, which remain, which are new, and which went away while
the quantity they guard got worse (analysis layer)."""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .model import Advice, Finding, json_number
from .registry import Guard, get_rule

__all__ = ["FindingsDiff", "RemainingFinding", "WorseFinding", "diff_findings", "diff_advice"]


@dataclass(frozen=True)
class RemainingFinding:
    """A problem found in both runs; ``evidence_delta`` is candidate − baseline per shared number."""

    baseline: Finding
    candidate: Finding

    @property
    def evidence_delta(self) -> dict[str, float]:
        b, c = self.baseline.evidence, self.candidate.evidence
        return {k: float(c[k]) - float(b[k]) for k in b if k in c}

    @property
    def gain_delta(self) -> float:
        """Change of the estimated gain (negative: the problem shrank)."""
        return float(self.candidate.gain_share) - float(self.baseline.gain_share)


@dataclass(frozen=True)
class WorseFinding:
    """A baseline finding the candidate does not repeat although the quantity its rule guards got
    worse (e.g. no overfitting finding, but a worse best validation loss): not "resolved"."""

    baseline: Finding
    guard: Guard
    baseline_value: float
    candidate_value: float

    @property
    def reason(self) -> str:
        """For people: "best val_loss 0.61 → 0.952 (+56%; lower is better)"."""
        b, c = self.baseline_value, self.candidate_value
        rel = f"{(c / b - 1) * 100:+.0f}%; " if b else ""
        return f"{self.guard.label} {b:.4g} → {c:.4g} ({rel}{self.guard.better} is better)"

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline.to_json(), "guards": self.guard.key, "better": self.guard.better,
                "baseline_value": json_number(self.baseline_value),
                "candidate_value": json_number(self.candidate_value), "reason": self.reason}


@dataclass(frozen=True)
class FindingsDiff:
    """``resolved``: baseline findings absent from a candidate on which their rule was checked and
    whose guarded quantity did not get worse; ``remaining``: in both; ``new``: only in the
    candidate; ``unverified``: baseline findings whose rule could not look at the candidate (e.g. it
    has no trace), so nothing can be claimed; ``worse``: baseline findings absent from the
    candidate while the quantity their rule guards got worse (registry.Guard), never "resolved"."""

    resolved: tuple[Finding, ...]
    remaining: tuple[RemainingFinding, ...]
    new: tuple[Finding, ...]
    unverified: tuple[Finding, ...] = ()
    worse: tuple[WorseFinding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "resolved": [f.to_json() for f in self.resolved],
            "remaining": [{"baseline": r.baseline.to_json(), "candidate": r.candidate.to_json(),
                           "evidence_delta": r.evidence_delta, "gain_delta": r.gain_delta} for r in self.remaining],
            "new": [f.to_json() for f in self.new],
            "unverified": [f.to_json() for f in self.unverified],
            "worse": [w.to_json() for w in self.worse],
        }


def _guard(rule_id: str) -> Guard | None:
    try:
        return get_rule(rule_id).guards
    except KeyError:  # a finding of a rule this build does not know (an old saved advice, a test)
        return None


def _worse(f: Finding, baseline_measures: Mapping[str, float], candidate_measures: Mapping[str, float]) -> WorseFinding | None:
    """The WorseFinding for baseline finding ``f`` when its rule's guarded quantity got worse."""
    guard = _guard(f.rule)
    if guard is None or f.rule not in candidate_measures:
        return None
    base = baseline_measures.get(f.rule, f.evidence.get(guard.key))
    if base is None:
        return None
    cand = float(candidate_measures[f.rule])
    return WorseFinding(f, guard, float(base), cand) if guard.got_worse(float(base), cand) else None


def diff_findings(baseline: Sequence[Finding], candidate: Sequence[Finding], *,
                  checked: Collection[str] | None = None, baseline_measures: Mapping[str, float] | None = None,
                  candidate_measures: Mapping[str, float] | None = None) -> FindingsDiff:
    """Match findings by ``key`` (rule + subject).

    ``checked`` lists the rules that could look at the candidate (``Advice.checked``); a
    baseline finding whose rule is not in it goes to ``unverified`` rather than ``resolved``.
    When ``checked`` is None every rule is assumed checked. ``*_measures`` are the runs' guarded
    quantities (``Advice.measures``; the baseline's default to the finding's evidence): a baseline
    finding absent from the candidate whose guarded quantity got worse goes to ``worse``.
    """
    cand_by_key = {f.key: f for f in candidate}
    base_keys = {f.key for f in baseline}
    resolved, remaining, unverified, worse = [], [], [], []
    for f in baseline:
        if f.key in cand_by_key:
            remaining.append(RemainingFinding(baseline=f, candidate=cand_by_key[f.key]))
        elif checked is not None and f.rule not in checked:
            unverified.append(f)
        elif (w := _worse(f, baseline_measures or {}, candidate_measures or {})) is not None:
            worse.append(w)
        else:
            resolved.append(f)
    new = [f for f in candidate if f.key not in base_keys]
    return FindingsDiff(resolved=tuple(resolved), remaining=tuple(remaining), new=tuple(new),
                        unverified=tuple(unverified), worse=tuple(worse))


def diff_advice(baseline: Advice, candidate: Advice) -> FindingsDiff:
    """diff_findings of two Advice objects, using the candidate's checked rules and both runs' measures."""
    return diff_findings(list(baseline.findings), list(candidate.findings), checked=candidate.checked,
                         baseline_measures=baseline.measures, candidate_measures=candidate.measures)
