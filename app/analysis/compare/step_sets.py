"""The two step sets of a comparison and why their signs may disagree (analysis layer).

The headline judges steady-state, unprofiled steps (compare_headline); the waterfall and the
op and kernel deltas average typical profiled steps (step_window). ``step_sets`` names both;
``sign_note`` explains a waterfall that moves the other way than a faster/slower headline.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from app.analysis.compare.headline import Headline, HeadlineQuantity, HeadlineVerdict

__all__ = ["StepSet", "step_sets", "sign_note"]


@dataclass(frozen=True)
class StepSet:
    """Which steps a part of the comparison uses: ``name`` ("headline" or "deltas"), what they
    are in words, and how many of them each side has."""

    name: str
    description: str
    baseline: int
    candidate: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "baseline": self.baseline,
                "candidate": self.candidate}



def step_sets(headline: Headline, delta_steps: tuple[int, int],
              replicated: tuple[list[pd.DataFrame], list[pd.DataFrame]]) -> dict[str, StepSet]:
    def kept(ts: list[pd.DataFrame]) -> int:
        return int(sum(t["kept"].astype(bool).sum() for t in ts if len(t)))

    runs = " (all runs of each group)" if any(len(r) > 1 for r in replicated) else ""
    return {
        "headline": StepSet("headline", f"steady-state steps{runs}: warm-up, profiled and evaluation steps left out; "
                                        f"the headline judges {headline.quantity_words} on them",
                            kept(replicated[0]), kept(replicated[1])),
        "deltas": StepSet("deltas", "typical profiled steps (first run of a group): the waterfall and the operator "
                                    "and kernel deltas average them; steps that held an evaluation, and on bare "
                                    "traces stalls over 2x the median, are left out whole",
                          delta_steps[0], delta_steps[1]),
    }


def sign_note(breakdown: pd.DataFrame, headline: Headline, sets: dict[str, StepSet]) -> str:
    """Why the waterfall's mean profiled step moves the other way than the headline, or ""."""
    if len(breakdown) == 0 or headline.verdict not in (HeadlineVerdict.FASTER, HeadlineVerdict.SLOWER):
        return ""
    row = breakdown[(breakdown["view"] == "device") & (breakdown["category"] == "step")]
    if len(row) == 0:
        return ""
    base, cand = float(row["baseline_us"].iloc[0]), float(row["candidate_us"].iloc[0])
    if not base or abs(cand - base) <= 0.01 * abs(base):
        return ""
    grew = cand > base
    if grew == (headline.verdict == HeadlineVerdict.SLOWER):
        return ""
    d = sets["deltas"]
    why = [f"the waterfall's mean profiled step went {base / 1e3:,.2f} → {cand / 1e3:,.2f} ms "
           f"({'longer' if grew else 'shorter'}) while the headline says {headline.verdict} by "
           f"{headline.quantity_words}"]
    if headline.quantity != HeadlineQuantity.STEP_TIME:
        why.append(f"the headline is per {headline.quantity.split('_per_')[-1]}: a step that does more work "
                   "may take longer and still be faster per unit of work")
    why.append(f"the waterfall averages {d.baseline} and {d.candidate} profiled steps, recorded under the profiler "
               f"(which slows code unevenly), while the headline uses {sets['headline'].baseline} and "
               f"{sets['headline'].candidate} unprofiled steady-state steps; the headline is the verdict")
    return "; ".join(why)
