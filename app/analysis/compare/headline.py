"""The one verdict of a comparison: which quantity, how much, how sure, and why (analysis layer).

``compute_headline`` judges the candidate against the baseline on

* **the right quantity**: latency per sample when both sides are inference runs (each step one
  call of the model, ``compare_latency``; the tails are the verdict table's p90/p99 rows), else
  time per token when both sides log ``tokens`` per step and the
  tokens per step are not one constant shared by both, else time per sample when the samples
  per step differ between the sides (a batch of 64 against 16), else step time;
* **the steady-state steps** (compare_steps: warm-up, profiled and evaluation steps left out);
* **the interval method**: ``estimate_ratio`` (step-to-step noise only) with one run per side,
  ``hierarchical_ratio`` (run-to-run noise too) with replicates (two or more runs per side);
* **the decision rule**: ``faster``/``slower`` needs the interval to exclude 1 and the change
  to exceed a practical limit, symmetric in the two sides (max(r, 1/r) − 1 > limit, so
  diff(a, b) and diff(b, a) agree). The limit is the threshold (2 % by default) with
  replicates, and at least ``RUN_TO_RUN_MARGIN`` with one run per side, since the interval
  cannot see run-to-run noise then;
* ``same`` needs the interval within ±max(limit, ``RUN_TO_RUN_MARGIN``) (``_equivalence_band``);
  an interval that holds 1 but reaches beyond that band is ``inconclusive``, not ``same``;
* ``inconclusive``: the sides differ in contention (compare_contention), or fewer than
  ``MIN_STEPS`` steady-state steps on a side (the method's coverage is not established there)
  unless the whole interval lies within the limit (then ``same``), or no interval at all.

Thresholds and reasons are documented in docs/compare.md ("The headline").
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.compare import estimators as est_
from app.analysis.compare.contention import ContentionCheck
from app.analysis.compare.latency import is_inference_table
from app.analysis.compare.options import CompareOptions
from app.analysis.stats.ratio import RatioEstimate

__all__ = ["HeadlineQuantity", "HeadlineVerdict", "Headline", "compute_headline", "quantity_series",
           "choose_quantity", "QUANTITY_WORDS"]


class HeadlineQuantity(StrEnum):
    STEP_TIME = "step_time"
    TIME_PER_SAMPLE = "time_per_sample"
    TIME_PER_TOKEN = "time_per_token"
    LATENCY_PER_SAMPLE = "latency_per_sample"


class HeadlineVerdict(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"
    INCONCLUSIVE = "inconclusive"


QUANTITY_WORDS = {HeadlineQuantity.STEP_TIME: "step time", HeadlineQuantity.TIME_PER_SAMPLE: "time per sample",
                  HeadlineQuantity.TIME_PER_TOKEN: "time per token",
                  HeadlineQuantity.LATENCY_PER_SAMPLE: "latency per sample"}
_DIVISOR = {HeadlineQuantity.TIME_PER_SAMPLE: "samples", HeadlineQuantity.TIME_PER_TOKEN: "tokens",
            HeadlineQuantity.LATENCY_PER_SAMPLE: "samples"}


@dataclass(frozen=True)
class Headline:
    """The comparison's verdict (docs/compare.md, "The headline"; ``diff --json`` ``headline``).

    ``baseline``/``candidate``: the estimator's location of each side in seconds per step, per
    sample or per token (None without data); ``ratio`` candidate/baseline; ``ci95`` (lo, hi) or
    None; ``replicates`` run counts per side."""

    quantity: HeadlineQuantity
    baseline: float | None
    candidate: float | None
    ratio: float | None
    ci95: tuple[float, float] | None
    verdict: HeadlineVerdict
    method: str
    replicates: dict[str, int]
    reasons: list[str] = field(default_factory=list)

    @property
    def quantity_words(self) -> str:
        """The quantity for people: "step time", "time per sample", "time per token"."""
        return QUANTITY_WORDS.get(HeadlineQuantity(self.quantity), self.quantity)

    def to_json(self) -> dict[str, Any]:
        def num(v: float | None) -> float | None:
            return float(v) if v is not None and math.isfinite(v) else None

        return {"quantity": self.quantity, "baseline": num(self.baseline), "candidate": num(self.candidate),
                "ratio": num(self.ratio), "ci95": [num(self.ci95[0]), num(self.ci95[1])] if self.ci95 else None,
                "verdict": self.verdict, "method": self.method, "replicates": dict(self.replicates),
                "reasons": list(self.reasons)}


def _kept(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["kept"].astype(bool)] if len(table) else table


def _per_step(tables: Sequence[pd.DataFrame], col: str) -> np.ndarray:
    parts = [pd.to_numeric(_kept(t)[col], errors="coerce").to_numpy(float) for t in tables if len(t)]
    return np.concatenate(parts) if parts else np.array([])


def _logged_everywhere(values: np.ndarray) -> bool:
    return len(values) > 0 and bool(np.isfinite(values).all() and (values > 0).all())


def choose_quantity(baseline: Sequence[pd.DataFrame], candidate: Sequence[pd.DataFrame]) -> tuple[HeadlineQuantity, str]:
    """(quantity, reason) from the kept steps of each side's step tables (several per side for a group)."""
    if baseline and candidate and all(is_inference_table(t) for t in (*baseline, *candidate)):
        sa, sb = _per_step(baseline, "samples"), _per_step(candidate, "samples")
        if _logged_everywhere(sa) and _logged_everywhere(sb):
            return HeadlineQuantity.LATENCY_PER_SAMPLE, (
                f"judged latency per sample: both sides are inference runs (a step is one call of the model; "
                f"batch median {np.median(sa):g} vs {np.median(sb):g})")
    ta, tb = _per_step(baseline, "tokens"), _per_step(candidate, "tokens")
    if _logged_everywhere(ta) and _logged_everywhere(tb):
        both = np.concatenate([ta, tb])
        if not np.all(both == both[0]):
            return HeadlineQuantity.TIME_PER_TOKEN, (
                f"judged time per token: tokens per step vary or differ (median {np.median(ta):g} vs "
                f"{np.median(tb):g}), so step times are not comparable")
    sa, sb = _per_step(baseline, "samples"), _per_step(candidate, "samples")
    if _logged_everywhere(sa) and _logged_everywhere(sb) and float(np.median(sa)) != float(np.median(sb)):
        return HeadlineQuantity.TIME_PER_SAMPLE, (
            f"judged time per sample: samples per step differ ({np.median(sa):g} vs {np.median(sb):g}), so step "
            "times are not comparable")
    return HeadlineQuantity.STEP_TIME, ""


def quantity_series(table: pd.DataFrame, quantity: HeadlineQuantity) -> np.ndarray:
    """Per kept step: seconds per step, per sample or per token (finite, positive values only)."""
    kept = _kept(table)
    if len(kept) == 0:
        return np.array([])
    t = pd.to_numeric(kept["step_time_s"], errors="coerce").to_numpy(float)
    if quantity in _DIVISOR:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = t / pd.to_numeric(kept[_DIVISOR[quantity]], errors="coerce").to_numpy(float)
    out: np.ndarray = t[np.isfinite(t) & (t > 0)]
    return out


def _far(ratio: float, limit: float) -> bool:
    # symmetric in the two sides: 0.90 one way is 1.111 the other, both judged the same
    return max(ratio, 1.0 / ratio) - 1.0 > limit + 1e-12


def _equivalence_band(limit: float) -> float:
    """How narrow the interval must be for ``same``: within ±max(limit, RUN_TO_RUN_MARGIN).

    ``same`` says "no change beyond the band"; an interval that holds 1 but reaches beyond it
    cannot say that, and the verdict is ``inconclusive`` instead. With replicates the limit is
    the 2 % threshold, and the band stays at the run-to-run margin: asking a 3 + 3 run interval
    to be within ±2 % would make nearly every identical pair inconclusive."""
    return max(limit, est_.RUN_TO_RUN_MARGIN)


def _decide(est: RatioEstimate, limit: float) -> HeadlineVerdict:
    r = est.ratio
    if r < 1.0 and est.hi < 1.0 and _far(r, limit):
        return HeadlineVerdict.FASTER
    if r > 1.0 and est.lo > 1.0 and _far(r, limit):
        return HeadlineVerdict.SLOWER
    return HeadlineVerdict.SAME


# How far the medians' change and the judged ratio may differ before the headline says so: the
# sentence shows the medians next to the ratio, and a user reads one from the other.
SHAPE_GAP = 0.10


def _shape_reason(est: RatioEstimate, words: str, threshold: float) -> str:
    """Why the medians shown beside the ratio move otherwise than the ratio, or "" when they agree.

    ``estimate_ratio`` judges the ratio of 20 % trimmed geometric means, which for two sides that
    differ by one factor is that factor, and so is the medians' ratio. When the sides differ in
    shape (a contended run: a few steps several times slower, or a bimodal side) the two part,
    even in sign: a comparison once read "196.77 → 230.68 ms/step; ratio 0.952". Flagged when they
    point opposite ways beyond the threshold, or differ by more than ``SHAPE_GAP``."""
    if not (est.baseline and est.candidate and est.baseline > 0 and est.candidate > 0) or \
            not math.isfinite(est.ratio) or est.ratio <= 0:
        return ""
    medians = est.candidate / est.baseline
    opposite = (medians > 1.0) != (est.ratio > 1.0) and _far(medians, threshold) and _far(est.ratio, threshold)
    if not opposite and not _far(medians / est.ratio, SHAPE_GAP):
        return ""
    what = "20 % trimmed geometric means" if est.method == est_.METHOD_YUEN else f"the {est.method}"
    how = "point opposite ways" if opposite else "differ"
    return (f"the medians' change ({(medians - 1.0) * 100:+.1f} %) and the judged ratio ({est.ratio:.3f}, {what}: "
            f"{(est.ratio - 1.0) * 100:+.1f} %) {how}: the two sides' {words}s differ in shape, not by one factor "
            "(some steps far slower or faster on one side), so no single number is the change; the step-time "
            "chart shows which steps moved")


@dataclass(frozen=True)
class _Inputs:
    quantity: HeadlineQuantity
    runs: tuple[list[np.ndarray], list[np.ndarray]]  # per side: one array per run


def _estimate(inp: _Inputs, replicated: bool, o: CompareOptions) -> tuple[RatioEstimate, str]:
    a_runs, b_runs = inp.runs
    if replicated:
        est = est_.hierarchical_ratio(a_runs, b_runs, confidence=o.confidence, resamples=o.resamples, seed=o.seed)
        return est, est_.estimate_method(est, getattr(est_.hierarchical_ratio, "method", "hierarchical_ratio"))
    est = est_.estimate_ratio(np.concatenate(a_runs), np.concatenate(b_runs), confidence=o.confidence,
                              resamples=o.resamples, seed=o.seed)
    return est, est_.estimate_method(est, getattr(est_.estimate_ratio, "method", "estimate_ratio"))


def _limit(replicated: bool, counts: dict[str, int], steps: str, method: str, threshold: float) -> tuple[float, str]:
    """The practical limit a change must exceed, and the reason saying which and why."""
    if replicated:
        return threshold, (f"{steps}; replicates: the interval includes run-to-run variance ({method}); "
                           f"faster/slower needs a change beyond the {threshold:.0%} threshold")
    limit = max(threshold, est_.RUN_TO_RUN_MARGIN)
    one = "one run per side" if counts == {"baseline": 1, "candidate": 1} else "fewer than 2 runs on a side"
    return limit, (f"{steps}, {one}: the interval covers step-to-step noise only, not run-to-run noise; "
                   f"faster/slower also needs a change beyond the {limit:.0%} run-to-run margin "
                   "(use groups of runs to judge smaller changes)")


def compute_headline(
    baseline_tables: Sequence[pd.DataFrame],
    candidate_tables: Sequence[pd.DataFrame],
    contention: ContentionCheck,
    options: CompareOptions,
) -> Headline:
    """The headline of a comparison from each side's step tables (compare_steps.compute_step_times;
    one per run: several for a group of replicates), the contention check and CompareOptions."""
    counts = {"baseline": max(1, len(baseline_tables)), "candidate": max(1, len(candidate_tables))}
    quantity, why_quantity = choose_quantity(baseline_tables, candidate_tables)
    runs = ([r for r in (quantity_series(t, quantity) for t in baseline_tables) if len(r)],
            [r for r in (quantity_series(t, quantity) for t in candidate_tables) if len(r)])
    reasons = [why_quantity] if why_quantity else []

    def out(verdict: HeadlineVerdict, est: RatioEstimate | None = None, method: str = "") -> Headline:
        ci = (est.lo, est.hi) if est is not None and est.has_interval else None
        return Headline(quantity=quantity, baseline=est.baseline if est else None,
                        candidate=est.candidate if est else None, ratio=est.ratio if est else None, ci95=ci,
                        verdict=verdict, method=method, replicates=counts, reasons=reasons)

    if not runs[0] or not runs[1]:
        reasons.append("no steady-state step times on one side: nothing to judge")
        return out(HeadlineVerdict.INCONCLUSIVE)
    replicated = len(runs[0]) >= 2 and len(runs[1]) >= 2
    est, method = _estimate(_Inputs(quantity, runs), replicated, options)
    na, nb = sum(len(r) for r in runs[0]), sum(len(r) for r in runs[1])
    words = QUANTITY_WORDS[quantity]
    steps = f"{na} and {nb} steady-state steps" + (f" in {len(runs[0])} and {len(runs[1])} runs" if replicated else "")
    limit, why_limit = _limit(replicated, counts, steps, method, options.threshold)
    reasons.append(why_limit)
    shape = _shape_reason(est, words, options.threshold)
    if shape:
        reasons.append(shape)
    if contention.inconclusive:
        reasons.insert(0, contention.reason)
        return out(HeadlineVerdict.INCONCLUSIVE, est, method)
    if contention.reason:
        reasons.append(contention.reason)
    if not est.has_interval or not math.isfinite(est.ratio) or est.ratio <= 0:
        reasons.append(f"no confidence interval ({na} and {nb} steps): {words} is not judged")
        return out(HeadlineVerdict.INCONCLUSIVE, est, method)
    verdict = _decide(est, limit)
    if min(na, nb) < est_.MIN_STEPS:
        # Below MIN_STEPS the interval's coverage is not established: no difference is claimed,
        # and "same" only when the whole interval lies within the limit (an equivalence check).
        if verdict is HeadlineVerdict.SAME and not _far(est.lo, limit) and not _far(est.hi, limit):
            reasons.append(f"few steps ({na} and {nb}; the interval's coverage is established from "
                           f"{est_.MIN_STEPS} per side), but the whole interval lies within the {limit:.0%} limit")
            return out(verdict, est, method)
        reasons.append(f"too few steps to judge: {na} and {nb} steady-state steps, the interval's coverage is "
                       f"established from {est_.MIN_STEPS} steps per side")
        return out(HeadlineVerdict.INCONCLUSIVE, est, method)
    band = _equivalence_band(limit)
    if verdict is HeadlineVerdict.SAME and (_far(est.lo, band) or _far(est.hi, band)):
        # The interval holds 1, but also changes beyond the band: "same" would claim more than
        # the data show (12 steps with a level shift once gave "same" at 0.51×, CI 0.15-1.71).
        reasons.append(f"the interval ({est.lo:.3f}-{est.hi:.3f}) holds 1 but also changes beyond "
                       f"±{band:.0%}: too wide to call {words} the same or different; more steps or "
                       "replicates narrow it")
        return out(HeadlineVerdict.INCONCLUSIVE, est, method)
    if verdict is HeadlineVerdict.SAME and est.excludes_one():
        reasons.append(f"the interval excludes 1 but the change ({est.ratio:.3f}×) is within the {limit:.0%} limit")
    return out(verdict, est, method)
