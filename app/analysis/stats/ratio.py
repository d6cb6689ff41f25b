"""Statistics for comparisons: ratio estimates with intervals, and verdicts (analysis layer).

Pure numpy. Three estimators of candidate / baseline, each with the mirror property
(swapping baseline and candidate gives the reciprocal ratio and the reciprocal interval,
``ci(b, a) == (1/hi, 1/lo)``):

- ``estimate_ratio``: the within-run method chosen by the simulation study
  (``benchmarks/stats_study.py``, docs/compare.md): Yuen's t on 20 % trimmed means of log step
  times, widened for serial correlation (the Hodges–Lehmann runner-up is in ``stats_rank``).
- ``hierarchical_ratio``: replicated runs per side; a t interval on the runs' log medians, so
  run-to-run variance is in the interval.
- ``bootstrap_ratio_of_medians``: the earlier percentile bootstrap of the ratio of medians (kept
  for the other quantities that use it). Each sample's resampling stream is seeded from the
  sample's own content, not from its role, and the interval takes symmetric order statistics.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from app.analysis.stats.dist import t_quantile

__all__ = [
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "DEFAULT_THRESHOLD",
    "METHOD_BOOTSTRAP",
    "METHOD_HIERARCHICAL",
    "METHOD_YUEN",
    "MIN_STEPS",
    "RUN_TO_RUN_MARGIN",
    "Direction",
    "Verdict",
    "RatioEstimate",
    "bootstrap_ratio_of_medians",
    "classify_ratio",
    "estimate_ratio",
    "hierarchical_ratio",
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
# run-to-run noise. Provisional, set by the issue 10 contract until the A/A benchmark (stream
# "ab") measures the run-to-run spread of single-run pairs and replaces it. Sized between what
# this project measured so far: A/A pairs of the agent-overhead benchmark 0.97-1.02 on a quiet
# machine, single pairs 0.79-1.13 under load (benchmarks/README.md), and the 26 % real change of
# issue 10 that must still be called.
RUN_TO_RUN_MARGIN = 0.10
METHOD_BOOTSTRAP = "percentile bootstrap of medians"
METHOD_YUEN = "yuen trimmed-mean t on logs, serial-correlation corrected"
METHOD_HIERARCHICAL = "run-level t on log medians"
# Serial correlation above this is not trusted to be estimated from one run (variance x19).
_RHO_MAX = 0.9
# Share trimmed from each end of a side's log step times (Yuen's 20 %).
_TRIM = 0.2


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


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).ravel()
    return x[np.isfinite(x)]


def _rng_for(sample: np.ndarray, seed: int) -> np.random.Generator:
    # Seeding from the content makes a sample's resamples independent of its role (baseline
    # or candidate), which is what makes diff(a, b) and diff(b, a) exact mirror images.
    digest = hashlib.blake2b(np.sort(sample).tobytes(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


def _bootstrap_medians(sample: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Medians of ``resamples`` bootstrap resamples of ``sample``, in O(resamples), exactly.

    Resampling n values with replacement draws n indices uniformly from 0..n-1; over the sorted
    sample the median of a resample is the value at the k-th smallest drawn index (k = (n+1)/2,
    or the mean of the k-th and (k+1)-th for even n). The k-th smallest of n uniform indices is
    floor(n * U_(k)), with U_(k) ~ Beta(k, n-k+1) the k-th order statistic of n uniforms, and
    U_(k+1) = U_(k) + (1 - U_(k)) * Beta(1, n-k). So each resampled median costs two Beta draws
    instead of materialising n indices (tests compare it with direct resampling).
    """
    rng = _rng_for(sample, seed)
    x = np.sort(sample)
    n = x.size
    if n == 1:
        return np.full(resamples, x[0])
    k = (n + 1) // 2 if n % 2 else n // 2  # 1-based rank of the (lower) middle order statistic
    u_k = rng.beta(k, n - k + 1, size=resamples)
    lo = np.minimum((n * u_k).astype(np.int64), n - 1)
    if n % 2:
        return x[lo]
    u_next = u_k + (1.0 - u_k) * rng.beta(1, n - k, size=resamples)
    hi = np.minimum((n * u_next).astype(np.int64), n - 1)
    out: np.ndarray = 0.5 * (x[lo] + x[hi])
    return out


def _ratio(num: float, den: float) -> float:
    if den == 0.0:
        return math.inf if num > 0 else (1.0 if num == 0 else -math.inf)
    return num / den


def bootstrap_ratio_of_medians(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
) -> RatioEstimate:
    """Return median(candidate) / median(baseline) with a percentile bootstrap interval.

    The two samples are resampled independently (with replacement, ``resamples`` times,
    vectorised; see ``_bootstrap_medians`` for how a resample's median is drawn); the interval is the pair of symmetric order statistics of the
    resampled ratios at ``(1 - confidence) / 2``. Non-finite values are dropped. Raises
    ValueError when a sample is empty after that, or for resamples < 100 or a confidence
    outside (0, 1).
    """
    if resamples < 100:
        raise ValueError(f"resamples must be at least 100, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    a, b = _clean(baseline), _clean(candidate)
    if a.size == 0 or b.size == 0:
        raise ValueError(f"need at least one finite value on each side (baseline {a.size}, candidate {b.size})")
    med_a, med_b = float(np.median(a)), float(np.median(b))
    lo = hi = math.nan
    if a.size >= 2 and b.size >= 2 and med_a > 0 and med_b > 0:
        ratios = np.sort(_bootstrap_medians(b, resamples, seed) / _bootstrap_medians(a, resamples, seed))
        k = int(math.floor((1.0 - confidence) / 2.0 * resamples))
        lo, hi = float(ratios[k]), float(ratios[resamples - 1 - k])
    return RatioEstimate(
        baseline=med_a,
        candidate=med_b,
        ratio=_ratio(med_b, med_a),
        lo=lo,
        hi=hi,
        n_baseline=int(a.size),
        n_candidate=int(b.size),
        resamples=resamples,
        confidence=confidence,
    )


def _positive(values: Sequence[float] | np.ndarray, side: str) -> np.ndarray:
    """The finite values, in their order (time order matters for serial correlation)."""
    x = _clean(values)
    if x.size == 0:
        raise ValueError(f"{side}: need at least one finite value")
    if (x <= 0).any():
        raise ValueError(f"{side}: step times must be positive, got {float(x.min())!r}")
    return x


def _check(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 with ties given their average rank (a constant series has no correlation)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.concatenate([[True], xs[1:] != xs[:-1]]))
    ends = np.concatenate([starts[1:], [x.size]])
    ranks = np.empty(x.size)
    ranks[order] = np.repeat(0.5 * (starts + ends - 1), ends - starts)
    return ranks


def _serial_variance_factor(logs: np.ndarray) -> float:
    """Long-run variance factor (>= 1) of a series in time order: how much serial correlation
    inflates the variance of a (trimmed) mean of it over the iid value (factor 1).

    From the lag-1 and lag-2 autocorrelations r1, r2 of the series' ranks (robust to the slow
    outliers): the correlation is modelled as r1 * phi^(k-1) at lag k, with decay
    phi = r2 / r1 kept within [r1, 0.9], so the factor is 1 + 2 r1 / (1 - phi). Outliers dilute
    the correlation (r1 < phi); a plain AR(1) plug-in (1 + r1) / (1 - r1) then under-covers
    (pilot runs of the study: 88 % instead of 96 % at lag-1 correlation 0.7 and 200 steps).
    A negative r1 never narrows the interval; below 6 values only r1 is used, below 4 none.
    """
    n = logs.size
    if n < 4:
        return 1.0
    r = _average_ranks(logs)
    r -= r.mean()
    denom = float(r @ r)
    if denom == 0.0:
        return 1.0
    r1 = min(float(r[:-1] @ r[1:]) / denom, _RHO_MAX)
    if r1 <= 0.0:
        return 1.0
    if n < 6:
        return (1.0 + r1) / (1.0 - r1)
    phi = min(max(float(r[:-2] @ r[2:]) / denom / r1, r1), _RHO_MAX)
    return 1.0 + 2.0 * r1 / (1.0 - phi)


def _trimmed_log_location(logs: np.ndarray) -> tuple[float, float, int]:
    """20 % trimmed mean of the logs, its squared standard error (Tukey–McLaughlin, from the
    winsorized variance) and h, the number of values kept."""
    x = np.sort(logs)
    n = x.size
    g = int(math.floor(_TRIM * n))
    h = n - 2 * g
    winsorized = np.clip(x, x[g], x[n - 1 - g])
    var_w = float(winsorized.var(ddof=1))
    return float(x[g:n - g].mean()), (n - 1) * var_w / (h * (h - 1)), h


def estimate_ratio(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> RatioEstimate:
    """Return the within-run ratio candidate / baseline of per-step times, with its interval.

    The method chosen by the simulation study (docs/compare.md, "Choosing the interval"): Yuen's
    trimmed-mean t on log step times, widened for serial correlation. Each side's logs give a
    20 % trimmed mean and its squared standard error from the winsorized variance; both the
    squared error and the Welch–Satterthwaite degrees of freedom (h - 1) of a side are scaled by
    that side's long-run variance factor (``_serial_variance_factor``, from the lag-1 and lag-2
    autocorrelations of its ranks in time order), and the interval is the difference of the
    trimmed means ± t · se. The ratio is exp(difference): the ratio of 20 % trimmed geometric
    means, which for two step-time distributions that differ by a factor is that factor.
    ``baseline``/``candidate`` of the result are the sides' medians.

    Values are taken in time order. Deterministic: ``resamples`` and ``seed`` are accepted for a
    signature common with the bootstrap and not used. Non-finite values are dropped; raises
    ValueError for an empty side, a value <= 0 or a confidence outside (0, 1). No interval
    (NaN) when a side has fewer than 2 values.
    """
    del resamples, seed  # a t interval: nothing to resample
    _check(confidence)
    a, b = _positive(baseline, "baseline"), _positive(candidate, "candidate")
    la, lb = np.log(a), np.log(b)
    lo = hi = math.nan
    if a.size >= 2 and b.size >= 2:
        ta, va, ha = _trimmed_log_location(la)
        tb, vb, hb = _trimmed_log_location(lb)
        fa, fb = _serial_variance_factor(la), _serial_variance_factor(lb)
        va, vb = va * fa, vb * fb
        se2 = va + vb
        shift = tb - ta
        if se2 > 0.0:
            df = se2 * se2 / (va * va * fa / (ha - 1) + vb * vb * fb / (hb - 1))
            half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(se2)
        else:  # both sides constant: nothing varies, the interval is the point
            half = 0.0
        lo, hi = math.exp(shift - half), math.exp(shift + half)
        ratio = math.exp(shift)
    else:
        ratio = math.exp(float(np.mean(lb) - np.mean(la)))
    return RatioEstimate(
        baseline=float(np.median(a)),
        candidate=float(np.median(b)),
        ratio=ratio,
        lo=lo,
        hi=hi,
        n_baseline=int(a.size),
        n_candidate=int(b.size),
        resamples=0,
        confidence=confidence,
        method=METHOD_YUEN,
    )


def hierarchical_ratio(
    baseline_runs: Sequence[Sequence[float] | np.ndarray],
    candidate_runs: Sequence[Sequence[float] | np.ndarray],
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> RatioEstimate:
    """Return candidate / baseline from replicated runs, with an interval that includes
    run-to-run variance.

    Each run is reduced to the log of its median step time; the ratio is exp(mean of the
    candidate runs' log medians - mean of the baseline runs'), i.e. the ratio of the geometric
    means of the runs' medians, and the interval is the pooled two-sample t interval on those
    log medians with k_a + k_b - 2 degrees of freedom. The spread between a side's runs holds
    both the run-to-run variance and each run's own step-to-step noise, so both are in the
    interval; with 2 or 3 runs per side the t quantile (4.30 at 2 + 2 runs) keeps it honest
    where resampling only 2 or 3 runs is anti-conservative (docs/compare.md, simulation study).
    Assumes the run-to-run variance is alike on both sides. Deterministic: ``resamples`` and
    ``seed`` are accepted for a common signature and not used. Raises ValueError with fewer
    than 2 runs on a side, an empty run or a value <= 0.
    """
    del resamples, seed
    _check(confidence)
    sides = []
    for side, runs in (("baseline", baseline_runs), ("candidate", candidate_runs)):
        if len(runs) < 2:
            raise ValueError(f"{side}: need at least 2 runs, got {len(runs)}")
        sides.append([_positive(r, f"{side} run {i}") for i, r in enumerate(runs)])
    la = np.log([float(np.median(r)) for r in sides[0]])
    lb = np.log([float(np.median(r)) for r in sides[1]])
    ka, kb = la.size, lb.size
    shift = float(lb.mean() - la.mean())
    df = ka + kb - 2
    pooled = (float(((la - la.mean()) ** 2).sum()) + float(((lb - lb.mean()) ** 2).sum())) / df
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(pooled * (1.0 / ka + 1.0 / kb))
    return RatioEstimate(
        baseline=math.exp(float(la.mean())),
        candidate=math.exp(float(lb.mean())),
        ratio=math.exp(shift),
        lo=math.exp(shift - half),
        hi=math.exp(shift + half),
        n_baseline=int(sum(r.size for r in sides[0])),
        n_candidate=int(sum(r.size for r in sides[1])),
        resamples=0,
        confidence=confidence,
        method=METHOD_HIERARCHICAL,
    )


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
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        if (larger and lo <= 1.0) or (not larger and hi >= 1.0):
            return Verdict.SAME
    if direction is Direction.NONE:
        return Verdict.CHANGED
    return _VERDICT_WORDS[(direction, larger)]
