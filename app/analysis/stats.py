"""Statistics for comparisons: seeded bootstrap of a ratio of medians and verdicts (analysis layer).

Pure numpy. The bootstrap is built so that swapping baseline and candidate gives exactly the
reciprocal ratio and the reciprocal interval (``ci(b, a) == (1/hi, 1/lo)``): each sample's
resampling stream is seeded from the sample's own content, not from its role, and the interval
takes symmetric order statistics instead of interpolated percentiles.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

__all__ = [
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "DEFAULT_THRESHOLD",
    "Direction",
    "Verdict",
    "RatioEstimate",
    "bootstrap_ratio_of_medians",
    "classify_ratio",
]

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
# Practical-significance threshold: a ratio within 2 % of 1 is "same" even when the interval
# excludes 1 (see docs/compare.md for why).
DEFAULT_THRESHOLD = 0.02


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
    """``ratio`` = candidate statistic / baseline statistic, with a bootstrap interval ``[lo, hi]``.

    ``lo``/``hi`` are NaN when either sample has fewer than 2 values (no interval possible).
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
    return 0.5 * (x[lo] + x[hi])


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
