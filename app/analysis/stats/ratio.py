"""Statistics for comparisons: ratio estimates with intervals, and verdicts (analysis layer).

Pure numpy. Three estimators of candidate / baseline, each with the mirror property
(swapping baseline and candidate gives the reciprocal ratio and the reciprocal interval,
``ci(b, a) == (1/hi, 1/lo)``):

- ``estimate_ratio``: the within-run method chosen by the simulation study
  (``benchmarks/stats_study.py``, docs/compare.md): Yuen's t on 20 % trimmed means of log step
  times, widened for serial correlation (the Hodges–Lehmann runner-up is in ``stats_rank``).
- ``hierarchical_ratio``: replicated runs per side; a t interval on the runs' log medians, so
  run-to-run variance is in the interval.
- ``bootstrap_ratio_of_medians`` (stats/bootstrap.py): the earlier percentile bootstrap of the ratio of medians (kept
  for the other quantities that use it). Each sample's resampling stream is seeded from the
  sample's own content, not from its role, and the interval takes symmetric order statistics.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from app.analysis.stats.bootstrap import bootstrap_ratio_of_medians
from app.analysis.stats.dist import t_quantile
from app.analysis.stats.estimate import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    DEFAULT_THRESHOLD,
    METHOD_BOOTSTRAP,
    METHOD_HIERARCHICAL,
    METHOD_YUEN,
    MIN_STEPS,
    RUN_TO_RUN_MARGIN,
    Direction,
    RatioEstimate,
    Verdict,
    classify_ratio,
    finite_values,
)

# The estimators are defined here; the result type, the verdict rule and the bootstrap live in
# stats/estimate.py and stats/bootstrap.py and are re-exported, so this stays the one import.
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

# Serial correlation above this is not trusted to be estimated from one run (variance x19).
_RHO_MAX = 0.9
# Floor of a side's degrees of freedom once divided by its serial-correlation factor (_side_df).
_MIN_SIDE_DF = 3
# Share trimmed from each end of a side's log step times (Yuen's 20 %).
_TRIM = 0.2


def _positive(values: Sequence[float] | np.ndarray, side: str) -> np.ndarray:
    """The finite values, in their order (time order matters for serial correlation)."""
    x = finite_values(values)
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


def _side_df(h: int, factor: float) -> float:
    """Degrees of freedom of one side's widened squared error: the kept values' h - 1 divided by
    the serial-correlation factor (an effective sample size), but never below ``_MIN_SIDE_DF``
    (or h - 1 when that is smaller).

    Without the floor a short run with a level shift (five fast steps, then seven slower ones)
    reads as strongly correlated: factors of 3-5 left 1.4-2 df per side, t(0.975) near 6, and an
    interval of 0.15-1.71 for two runs whose steps did not overlap at all. The factor already
    widens the squared error; dividing the df as well counts the same uncertainty twice where the
    factor itself is large and poorly estimated. With the floor at 4 the simulation study keeps
    coverage >= 93 % from 8 steps in every scenario but one cell (lag-1 correlation 0.7 and 20
    steps: 92.8 %, within its 1.1 % standard error), and gains power at 8-30 steps
    (docs/compare.md, "Choosing the interval").
    """
    return max((h - 1) / factor, float(min(_MIN_SIDE_DF, h - 1)))


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
    autocorrelations of its ranks in time order; the df never below 4, ``_side_df``), and the interval is the difference of the
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
            df = se2 * se2 / (va * va / _side_df(ha, fa) + vb * vb / _side_df(hb, fb))
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
