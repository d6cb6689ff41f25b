"""Percentile bootstrap of the ratio of medians, with exact O(resamples) resampled medians (analysis layer, pure).

The earlier estimator, kept for the quantities that use it (logged metrics' final values). Each
sample's resampling stream is seeded from the sample's own content, not from its role, and the
interval takes symmetric order statistics, so diff(a, b) and diff(b, a) are mirror images.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from app.analysis.stats.estimate import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    RatioEstimate,
    finite_values,
    safe_ratio,
)

__all__ = ["bootstrap_medians", "bootstrap_ratio_of_medians"]


def _rng_for(sample: np.ndarray, seed: int) -> np.random.Generator:
    # Seeding from the content makes a sample's resamples independent of its role (baseline
    # or candidate), which is what makes diff(a, b) and diff(b, a) exact mirror images.
    digest = hashlib.blake2b(np.sort(sample).tobytes(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


def bootstrap_medians(sample: np.ndarray, resamples: int, seed: int) -> np.ndarray:
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
    vectorised; see ``bootstrap_medians`` for how a resample's median is drawn); the interval is the pair of symmetric order statistics of the
    resampled ratios at ``(1 - confidence) / 2``. Non-finite values are dropped. Raises
    ValueError when a sample is empty after that, or for resamples < 100 or a confidence
    outside (0, 1).
    """
    if resamples < 100:
        raise ValueError(f"resamples must be at least 100, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    a, b = finite_values(baseline), finite_values(candidate)
    if a.size == 0 or b.size == 0:
        raise ValueError(f"need at least one finite value on each side (baseline {a.size}, candidate {b.size})")
    med_a, med_b = float(np.median(a)), float(np.median(b))
    lo = hi = math.nan
    if a.size >= 2 and b.size >= 2 and med_a > 0 and med_b > 0:
        ratios = np.sort(bootstrap_medians(b, resamples, seed) / bootstrap_medians(a, resamples, seed))
        k = int(math.floor((1.0 - confidence) / 2.0 * resamples))
        lo, hi = float(ratios[k]), float(ratios[resamples - 1 - k])
    return RatioEstimate(
        baseline=med_a,
        candidate=med_b,
        ratio=safe_ratio(med_b, med_a),
        lo=lo,
        hi=hi,
        n_baseline=int(a.size),
        n_candidate=int(b.size),
        resamples=resamples,
        confidence=confidence,
    )
