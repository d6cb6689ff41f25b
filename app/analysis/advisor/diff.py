"""Which findings a candidate run resolved, which remain and which are new (analysis layer)."""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from .model import Advice, Finding

__all__ = ["FindingsDiff", "RemainingFinding", "diff_findings", "diff_advice"]


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
class FindingsDiff:
    """``resolved``: baseline findings absent from a candidate on which their rule was checked;
    ``remaining``: in both; ``new``: only in the candidate; ``unverified``: baseline findings whose
    rule could not look at the candidate (e.g. it has no trace), so nothing can be claimed."""

    resolved: tuple[Finding, ...]
    remaining: tuple[RemainingFinding, ...]
    new: tuple[Finding, ...]
    unverified: tuple[Finding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "resolved": [f.to_json() for f in self.resolved],
            "remaining": [{"baseline": r.baseline.to_json(), "candidate": r.candidate.to_json(),
                           "evidence_delta": r.evidence_delta, "gain_delta": r.gain_delta} for r in self.remaining],
            "new": [f.to_json() for f in self.new],
            "unverified": [f.to_json() for f in self.unverified],
        }


def diff_findings(baseline: Sequence[Finding], candidate: Sequence[Finding], *,
                  checked: Collection[str] | None = None) -> FindingsDiff:
    """Match findings by ``key`` (rule + subject).

    ``checked`` lists the rules that could look at the candidate (``Advice.checked``); a
    baseline finding whose rule is not in it goes to ``unverified`` rather than ``resolved``.
    When ``checked`` is None every rule is assumed checked.
    """
    cand_by_key = {f.key: f for f in candidate}
    base_keys = {f.key for f in baseline}
    resolved, remaining, unverified = [], [], []
    for f in baseline:
        if f.key in cand_by_key:
            remaining.append(RemainingFinding(baseline=f, candidate=cand_by_key[f.key]))
        elif checked is not None and f.rule not in checked:
            unverified.append(f)
        else:
            resolved.append(f)
    new = [f for f in candidate if f.key not in base_keys]
    return FindingsDiff(resolved=tuple(resolved), remaining=tuple(remaining), new=tuple(new),
                        unverified=tuple(unverified))


def diff_advice(baseline: Advice, candidate: Advice) -> FindingsDiff:
    """diff_findings of two Advice objects, using the candidate's checked rules."""
    return diff_findings(list(baseline.findings), list(candidate.findings), checked=candidate.checked)
