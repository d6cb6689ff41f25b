"""The interval methods the comparison headline uses, from app.analysis.stats (analysis layer).

This is the one place the comparison imports ``estimate_ratio``, ``hierarchical_ratio``,
``MIN_STEPS`` and ``RUN_TO_RUN_MARGIN``: the within-run method, the replicate method, the step
count below which a verdict is not judged, and the single-run margin of practical difference
(docs/compare.md, "The headline").

TEMPORARY FALLBACK (remove at the merge of wave3-stats): until app.analysis.stats defines these
names, the ``except ImportError`` branch below provides minimal stand-ins so the comparison and
its tests run. They keep the contract's properties (mirror symmetry: estimate(b, a) has ratio
1/r and interval (1/hi, 1/lo)) but were not chosen by the simulation study.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from app.analysis.stats import DEFAULT_RESAMPLES, RatioEstimate

__all__ = ["MIN_STEPS", "RUN_TO_RUN_MARGIN", "estimate_ratio", "hierarchical_ratio", "estimate_method"]

try:  # TODO(merge wave3-stats): keep only this import; delete the except branch.
    from app.analysis.stats import MIN_STEPS, RUN_TO_RUN_MARGIN, estimate_ratio, hierarchical_ratio
except ImportError:  # pragma: no cover - replaced at merge
    MIN_STEPS = 10  # provisional: the stats study sets the real value
    RUN_TO_RUN_MARGIN = 0.10  # provisional: measured on A/A pairs by the benchmark (stream "ab")

    def _ratio_estimate(base: float, cand: float, ratio: float, lo: float, hi: float, na: int, nb: int,
                        resamples: int, confidence: float) -> RatioEstimate:
        return RatioEstimate(baseline=base, candidate=cand, ratio=ratio, lo=lo, hi=hi, n_baseline=na,
                             n_candidate=nb, resamples=resamples, confidence=confidence)

    def _grid(x: np.ndarray, limit: int = 2000) -> np.ndarray:
        # Evenly spaced order statistics: keeps n·m pairwise differences bounded, role-independent.
        x = np.sort(x)
        return x if x.size <= limit else x[np.linspace(0, x.size - 1, limit).round().astype(int)]

    def estimate_ratio(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, *,
                       confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> RatioEstimate:
        """Hodges–Lehmann shift of log times with the Mann–Whitney (normal approximation) interval."""
        a = np.asarray(baseline, float)
        b = np.asarray(candidate, float)
        a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
        if a.size == 0 or b.size == 0:
            raise ValueError(f"need positive values on each side (baseline {a.size}, candidate {b.size})")
        la, lb = np.log(_grid(a)), np.log(_grid(b))
        d = np.sort((lb[None, :] - la[:, None]).ravel())
        shift = float(np.median(d))
        lo = hi = math.nan
        n, m = la.size, lb.size
        if n >= 2 and m >= 2:
            z = NormalDist().inv_cdf(0.5 + confidence / 2)
            c = int(math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12.0)))
            c = min(max(c, 0), d.size - 1)
            lo, hi = math.exp(float(d[c])), math.exp(float(d[d.size - 1 - c]))
        return _ratio_estimate(float(np.median(a)), float(np.median(b)), math.exp(shift), lo, hi, int(a.size),
                               int(b.size), resamples, confidence)

    def _side_rng(runs: Sequence[np.ndarray], seed: int) -> np.random.Generator:
        digest = hashlib.blake2b(b"".join(np.sort(r).tobytes() for r in sorted(runs, key=lambda r: r.tobytes())),
                                 digest_size=8).digest()
        return np.random.default_rng([seed, int.from_bytes(digest, "little")])

    def _hier_stats(runs: Sequence[np.ndarray], resamples: int, seed: int) -> np.ndarray:
        rng = _side_rng(runs, seed)
        out = np.empty(resamples)
        k = len(runs)
        for i in range(resamples):
            picked = rng.integers(0, k, size=k)
            out[i] = np.mean([np.median(rng.choice(runs[j], size=runs[j].size)) for j in picked])
        return out

    def hierarchical_ratio(baseline_runs: Sequence[Sequence[float]], candidate_runs: Sequence[Sequence[float]], *,
                           confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES,
                           seed: int = 0) -> RatioEstimate:
        """Ratio of the means of per-run medians; percentile interval of a two-level bootstrap
        (runs with replacement, then steps within each picked run)."""
        ra = [np.asarray(r, float)[np.isfinite(np.asarray(r, float))] for r in baseline_runs]
        rb = [np.asarray(r, float)[np.isfinite(np.asarray(r, float))] for r in candidate_runs]
        ra, rb = [r for r in ra if r.size], [r for r in rb if r.size]
        if len(ra) < 2 or len(rb) < 2:
            raise ValueError(f"need at least 2 runs per side (baseline {len(ra)}, candidate {len(rb)})")
        sa = float(np.mean([np.median(r) for r in ra]))
        sb = float(np.mean([np.median(r) for r in rb]))
        n = min(resamples, 1000)  # python loop: bounded for the stand-in
        ratios = np.sort(_hier_stats(rb, n, seed) / _hier_stats(ra, n, seed))
        k = int(math.floor((1.0 - confidence) / 2.0 * n))
        return _ratio_estimate(sa, sb, sb / sa, float(ratios[k]), float(ratios[n - 1 - k]),
                               sum(r.size for r in ra), sum(r.size for r in rb), n, confidence)

    estimate_ratio.method = "hodges-lehmann/mann-whitney (stand-in)"  # type: ignore[attr-defined]
    hierarchical_ratio.method = "hierarchical bootstrap (stand-in)"  # type: ignore[attr-defined]


def estimate_method(est: RatioEstimate, default: str) -> str:
    """The method an estimate names (``RatioEstimate.method`` once stats has it), else ``default``."""
    method = getattr(est, "method", "")
    return str(method) if method else default
