"""The step-time and throughput section of a comparison: per-step tables, estimates, verdicts (analysis layer).

``compute_step_section`` reads each side's steady-state steps (compare/steps.py), estimates the
step-time and throughput ratios with the headline's within-run method, and judges them;
``follow_headline`` then aligns those verdicts with the comparison's one headline.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from app.analysis.compare import steps as cs
from app.analysis.compare.estimators import estimate_ratio
from app.analysis.compare.headline import Headline, HeadlineQuantity, HeadlineVerdict
from app.analysis.compare.options import CompareOptions
from app.analysis.compare.side import CompareSide
from app.analysis.stats.ratio import Direction, RatioEstimate, Verdict, classify_ratio

__all__ = ["StepSection", "compute_step_section", "follow_headline", "no_interval_reason"]

_TIME_WORDS = {Verdict.BETTER: Verdict.FASTER, Verdict.WORSE: Verdict.SLOWER}


@dataclass(frozen=True)
class StepSection:
    """Step times of both sides and what they say: ``est`` (step time) and ``tp`` (throughput in
    ``tp_unit``) ratios, their verdicts, ``why`` the step time is not judged ("" when it is),
    ``sources`` of the step times and ``notes`` for people."""

    tables: tuple[pd.DataFrame, pd.DataFrame]
    sources: tuple[str, str]
    est: RatioEstimate | None
    verdict: Verdict | HeadlineVerdict
    why: str
    tp: RatioEstimate | None
    tp_unit: str
    tp_verdict: Verdict | HeadlineVerdict
    notes: tuple[str, ...]


def _speed_estimate(a: np.ndarray, b: np.ndarray, o: CompareOptions) -> RatioEstimate | None:
    """The headline's within-run method (estimate_ratio) on per-step times or rates, so the
    step-time and throughput rows state the same ratio and interval as a step-time headline."""
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    if len(a) == 0 or len(b) == 0:
        return None
    return estimate_ratio(a, b, resamples=o.resamples, confidence=o.confidence, seed=o.seed)


def no_interval_reason(est: RatioEstimate) -> str:
    """Why ``est`` has no confidence interval, in words ("1 step per side: no confidence interval")."""
    na, nb = est.n_baseline, est.n_candidate
    if na < 2 or nb < 2:
        counts = f"{na} step per side" if na == nb else f"{na} step(s) in the baseline, {nb} in the candidate"
        return f"{counts}: no confidence interval"
    return "a median of 0 on one side: no confidence interval"


def _interval_verdict(est: RatioEstimate | None, direction: Direction, o: CompareOptions) -> tuple[Verdict, str]:
    """(verdict, reason it is not judged) of a time or throughput estimate.

    faster/slower needs a bootstrap interval that excludes 1.0 and a ratio beyond the practical
    threshold; without an interval (fewer than 2 kept steps on a side) the verdict is ``same``
    and the reason says why, so a CI gate never fails on a single step."""
    if est is None:
        return Verdict.UNKNOWN, ""
    if not est.has_interval:
        if not math.isfinite(est.ratio) or est.ratio <= 0:
            return Verdict.UNKNOWN, ""
        return Verdict.SAME, f"{no_interval_reason(est)}, so no faster/slower verdict (ratio {est.ratio:.3f})"
    raw = classify_ratio(est.ratio, est.lo, est.hi, direction=direction, threshold=o.threshold)
    return _TIME_WORDS.get(raw, raw), ""  # BETTER/WORSE → FASTER/SLOWER; SAME, UNKNOWN as they are


def compute_step_section(a: CompareSide, b: CompareSide, o: CompareOptions) -> StepSection:
    """The step section of ``diff_sides`` (module docstring)."""
    ta, src_a = cs.compute_step_times(a, o.warmup_steps)
    tb, src_b = cs.compute_step_times(b, o.warmup_steps)
    notes = []
    if src_a != src_b:
        notes.append(f"step times come from {src_a} (baseline) and {src_b} (candidate); trace steps "
                     "include profiler overhead, so the ratio is less reliable")
    est = _speed_estimate(cs.kept_step_times(ta), cs.kept_step_times(tb), o)
    verdict, why = _interval_verdict(est, Direction.LOWER, o)
    if why:
        notes.append(f"step time: {why}")
    (tp_a, unit_a), (tp_b, unit_b) = cs.kept_throughput(ta), cs.kept_throughput(tb)
    if unit_a != unit_b:
        tp_a, tp_b, unit_a = 1.0 / cs.kept_step_times(ta), 1.0 / cs.kept_step_times(tb), "steps_per_s"
    tp = _speed_estimate(tp_a, tp_b, o)
    sa, sb = (float(np.nanmedian(t.loc[t["kept"].astype(bool), "samples"].to_numpy(float)))
              if t["kept"].astype(bool).any() and t["samples"].notna().any() else math.nan for t in (ta, tb))
    if unit_a == "samples_per_s" and math.isfinite(sa) and math.isfinite(sb) and sa != sb:
        notes.append(f"samples per step differ ({sa:g} vs {sb:g}): judge speed by throughput, not step time")
    tp_verdict, _ = _interval_verdict(tp, Direction.HIGHER, o)  # same steps: the step-time note covers it
    return StepSection(tables=(ta, tb), sources=(str(src_a), str(src_b)), est=est, verdict=verdict, why=why,
                       tp=tp, tp_unit=unit_a, tp_verdict=tp_verdict, notes=tuple(notes))


def follow_headline(section: StepSection, headline: Headline) -> StepSection:
    """One verdict for one comparison: the step-time and throughput verdicts are the headline's
    whenever they measure the judged quantity (or its inverse); a step time that is not the
    judged quantity (samples per step differ) is not judged on its own."""
    verdict = headline.verdict
    if headline.quantity == HeadlineQuantity.STEP_TIME:
        return replace(section, verdict=verdict, tp_verdict=verdict)
    # time per sample / token: step times are not comparable, throughput is the judged quantity's inverse
    # (diff --json step_time.verdict is the comparison's speed verdict)
    why = f"not judged on its own: the headline judges {headline.quantity_words}"
    judged_tp = headline.quantity in (HeadlineQuantity.TIME_PER_SAMPLE, HeadlineQuantity.LATENCY_PER_SAMPLE) \
        and section.tp_unit == "samples_per_s"
    return replace(section, verdict=verdict, why=why, tp_verdict=verdict if judged_tp else section.tp_verdict)
