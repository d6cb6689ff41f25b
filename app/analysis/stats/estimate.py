"""A ratio estimate (candidate / baseline) with its interval, and the verdict rule on it (analysis layer, pure).

The constants the estimators and the comparison share (resamples, seed, practical threshold,
minimum steps, run-to-run margin, method names) live here too, with why they have their values.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

__all__ = [
    "DEFAULT_RESAMPLES", "DEFAULT_SEED", "DEFAULT_THRESHOLD", "METHOD_BOOTSTRAP", "METHOD_HIERARCHICAL",
    "METHOD_YUEN", "MIN_STEPS", "RUN_TO_RUN_MARGIN", "Direction", "Verdict", "RatioEstimate", "classify_ratio",
    "finite_values", "safe_ratio",
]

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
# Practical-significance threshold: a ratio within 2 % of 1 is "same" even when the interval
# excludes 1 (see docs/compare.md for why).
DEFAULT_THRESHOLD = 0.02
# Steps per side from which estimate_ratio's 95 % interval covered the true ratio in >= 93 % of
# the simulation study's replications in every scenario, lag-1 correlation 0.7 included (worst
# cell at 8+ steps: 93.1 %; at 5 steps 91.2 %; docs/compare.md, "Choosing the interval"). Below
# it the estimate exists, but callers say "too few steps to judge".
MIN_STEPS = 8
# Margin of practical difference for a comparison of one run per side, whose interval cannot see
# run-to-run noise: the 95th percentile of |log ratio| over A/A pairs, as a fraction, rounded up.
# Calibrated on 12 pairs of identical 300-step runs of benchmarks/ab_job.py on this project's
# 2-core VM (benchmarks/results/ab_calibration.json: p95 |log ratio| 0.158, i.e. 17 %; largest
# 0.206), and validated on a separate set (benchmarks/results/ab_verdicts.json). It was 0.10 before,
# provisional; identical runs differed by more than that in 2 of those 12 pairs. It is a property
# of the machine: on a quieter one it is smaller (benchmarks/README.md says how to measure it).
RUN_TO_RUN_MARGIN = 0.17
METHOD_BOOTSTRAP = "percentile bootstrap of medians"
METHOD_YUEN = "yuen trimmed-mean t on logs, serial-correlation corrected"
METHOD_HIERARCHICAL = "run-level t on log medians"


class Direction(StrEnum):
    """Which way is better for a quantity."""

    LOWER = "lower"  # step time, memory, loss
    HIGHER = "higher"  # throughput, accuracy
    NONE = "none"  # unknown: report the change, no verdict


class Verdict(StrEnum):
    """Outcome of comparing a candidate with the baseline on one quantity."""

    FASTER = "faster"
    SLOWER = "slower"
    LESS = "less"  # memory
    MORE = "more"
    BETTER = "better"  # loss and other logged metrics
    WORSE = "worse"
    SAME = "same"  # no significant (or no practically relevant) difference
    CHANGED = "changed"  # a significant change of a quantity with no known better direction
    UNKNOWN = "n/a"  # not enough data on one side


@dataclass(frozen=True)
class RatioEstimate:
    """``ratio`` = candidate / baseline as estimated by ``method``, with its interval ``[lo, hi]``.

    ``baseline``/``candidate`` are each side's median step (for ``hierarchical_ratio`` the
    geometric mean of the runs' medians), the numbers other views show; ``ratio`` is the
    method's estimate, which equals candidate / baseline for the bootstrap of medians and the
    run-level method, and can differ from it for ``estimate_ratio`` (a ratio of trimmed
    geometric means) and Hodges–Lehmann (a shift over all pairs of steps) when the two sides'
    shapes differ. ``resamples`` is 0 for methods that do not resample. ``lo``/``hi`` are NaN
    when no interval is possible (fewer than 2 values on a side, or too few for the confidence
    asked).
    """

    baseline: float
    candidate: float
    ratio: float
    lo: float
    hi: float
    n_baseline: int
    n_candidate: int
    resamples: int
    confidence: float
    method: str = METHOD_BOOTSTRAP

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def excludes_one(self) -> bool:
        """True when the interval lies entirely on one side of 1.0."""
        return self.has_interval and (self.hi < 1.0 or self.lo > 1.0)


def finite_values(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """The finite values, flattened, in their order."""
    x = np.asarray(values, dtype=np.float64).ravel()
    return x[np.isfinite(x)]


def safe_ratio(num: float, den: float) -> float:
    """num / den, with ±inf (or 1 for 0/0) when den is 0."""
    if den == 0.0:
        return math.inf if num > 0 else (1.0 if num == 0 else -math.inf)
    return num / den


_VERDICT_WORDS = {
    # (direction, candidate is larger) -> verdict; the caller maps "faster/slower" for time.
    (Direction.LOWER, True): Verdict.WORSE,
    (Direction.LOWER, False): Verdict.BETTER,
    (Direction.HIGHER, True): Verdict.BETTER,
    (Direction.HIGHER, False): Verdict.WORSE,
}


def classify_ratio(
    ratio: float,
    lo: float | None = None,
    hi: float | None = None,
    *,
    direction: Direction = Direction.LOWER,
    threshold: float = DEFAULT_THRESHOLD,
) -> Verdict:
    """Return BETTER/WORSE (or CHANGED without a direction), SAME, or UNKNOWN for a ratio.

    A change counts only when it is practically relevant (``|ratio - 1| > threshold``) and,
    when an interval is given, statistically significant (the interval excludes 1.0 on the same
    side as the ratio). Without an interval (a single number such as a peak) only the threshold
    applies. UNKNOWN when the ratio is not finite.
    """
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return Verdict.UNKNOWN
    if abs(ratio - 1.0) <= threshold:
        return Verdict.SAME
    larger = ratio > 1.0
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) and (
            (larger and lo <= 1.0) or (not larger and hi >= 1.0)):
        return Verdict.SAME
    if direction is Direction.NONE:
        return Verdict.CHANGED
    return _VERDICT_WORDS[(direction, larger)]
