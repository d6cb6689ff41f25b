"""Latency of inference runs compared: p50, p90 and p99 per sample with intervals (analysis layer, pure).

An inference run's steps are its model calls (the agent's ``inference: true`` lines,
docs/run-format.md "Inference runs"). The headline judges ``latency_per_sample`` with the
training statistics (compare_headline: the same estimator, steps and decision rule); this module
adds the rows for the distribution's quantiles: p50, p90 and p99 of latency per sample, each with
the ratio candidate / baseline and an interval from :data:`QUANTILE_METHOD`, chosen by the
simulation study in ``benchmarks/latency_study.py`` (docs/compare.md, "Inference latency").

Methods (all on the ratio of the two sides' q-quantiles; ``quantile_ratio_interval``):

* ``bootstrap``: percentile bootstrap, calls resampled independently (each resampled quantile
  is one order statistic, drawn exactly from a Beta, as ``stats.bootstrap`` does for medians);
* ``block_bootstrap``: moving-block bootstrap (blocks of ``ceil(n ** (1/3))`` consecutive calls),
  which keeps the serial correlation of latencies (contention comes in episodes);
* ``maritz_jarrett``: the Maritz–Jarrett standard error of each side's quantile, on the log
  scale (delta method), a normal interval for the log ratio;
* ``order_statistic``: each side's distribution-free order-statistic interval at level
  sqrt(confidence), divided (conservative).

A quantile's interval needs :data:`MIN_TAIL_CALLS` calls beyond it on each side (p99: 500
calls); with fewer the row has no interval and says why.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.stats.dist import normal_quantile
from app.analysis.stats.estimate import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    RatioEstimate,
    Verdict,
    classify_ratio,
)

__all__ = ["QUANTILES", "QUANTILE_METHOD", "METHODS", "MIN_TAIL_CALLS", "INFERENCE_KEY", "INFERENCE_LINE_KEYS",
           "is_inference_summary_key", "is_inference_table", "quantile_ratio_interval", "compute_latency_rows"]

QUANTILES = (0.50, 0.90, 0.99)
METHODS = ("bootstrap", "block_bootstrap", "maritz_jarrett", "order_statistic")
QUANTILE_METHOD = "block_bootstrap"  # the study's choice (docs/compare.md, "Inference latency")
MIN_TAIL_CALLS = 3  # calls above the quantile per side: n >= MIN_TAIL_CALLS / (1 - q) (p99: 300)
INFERENCE_KEY = "inference"  # metrics.jsonl: the line of one inference call (profiler_agent/inference.py)
# Per-call marks and the run's summary line: coordinates, not outcomes (compare.metrics skips them).
INFERENCE_LINE_KEYS = frozenset({INFERENCE_KEY, "warmup", "idle_s", "grad_enabled", "train_mode"})
_SUMMARY_PREFIXES = ("latency_", "inference_calls", "warmup_calls", "compile_calls", "profiled_calls",
                     "steady_calls", "grad_enabled_calls", "train_mode_calls", "throughput_samples_per_s",
                     "batch_size_median")


def is_inference_summary_key(key: str) -> bool:
    """True for the keys of the inference summary line and the per-call marks."""
    return key in INFERENCE_LINE_KEYS or key.startswith(_SUMMARY_PREFIXES)


def is_inference_table(table: pd.DataFrame) -> bool:
    """True for a step table (compare_steps.compute_step_times) of an inference run."""
    return bool(table.attrs.get(INFERENCE_KEY, False))


def _rng(seed: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([seed, salt])


def _order_index(n: int, q: float) -> int:
    """0-based index of the order statistic that is the sample q-quantile (inverse cdf)."""
    return min(n - 1, max(0, math.ceil(q * n) - 1))


def _boot_quantiles(x: np.ndarray, q: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    # The k-th smallest of n resampled indices is floor(n * U_(k)), U_(k) ~ Beta(k, n - k + 1).
    xs = np.sort(x)
    n = len(xs)
    k = _order_index(n, q) + 1
    u = rng.beta(k, n - k + 1, size=resamples)
    out: np.ndarray = xs[np.minimum((u * n).astype(np.int64), n - 1)]
    return out


def _block_quantiles(x: np.ndarray, qs: Sequence[float], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(len(qs), resamples) quantiles of moving-block resamples of ``x`` (in its order)."""
    n = len(x)
    b = max(1, math.ceil(n ** (1 / 3)))
    blocks = math.ceil(n / b)
    starts = rng.integers(0, n - b + 1, size=(resamples, blocks))
    idx = (starts[:, :, None] + np.arange(b)[None, None, :]).reshape(resamples, -1)[:, :n]
    sample = np.sort(x[idx], axis=1)
    cols = [_order_index(n, q) for q in qs]
    out: np.ndarray = sample[:, cols].T
    return out


def _binom_pmf(n: int, p: float | np.ndarray) -> np.ndarray:
    """(len(p), n + 1) binomial probabilities of 0..n successes (log-factorials, no scipy)."""
    logfact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    j = np.arange(n + 1)
    pp = np.clip(np.atleast_1d(np.asarray(p, float)), 1e-300, 1 - 1e-16)[:, None]
    logc = logfact[n] - logfact[j] - logfact[n - j]
    out: np.ndarray = np.exp(logc + j * np.log(pp) + (n - j) * np.log1p(-pp))
    return out


def _beta_cdf_int(x: np.ndarray, a: int, b: int) -> np.ndarray:
    """Regularized incomplete beta I_x(a, b) for integers a, b >= 1: P(Binomial(a + b - 1, x) >= a)."""
    out: np.ndarray = _binom_pmf(a + b - 1, x)[:, a:].sum(axis=1)
    return out


def _mj_se(x: np.ndarray, q: float) -> float:
    """Maritz–Jarrett standard error of the sample q-quantile X_(m), m = round(q n)."""
    xs = np.sort(x)
    n = len(xs)
    m = min(n - 1, max(2, int(math.floor(q * n + 0.5))))
    # X_(m) = F^-1(U_(m)), U_(m) ~ Beta(m, n - m + 1): weight of x_(i) is P((i-1)/n < U_(m) <= i/n).
    grid = np.arange(n + 1) / n
    w = np.diff(_beta_cdf_int(grid, m, n - m + 1))
    c1 = float(np.sum(w * xs))
    c2 = float(np.sum(w * xs * xs))
    return math.sqrt(max(0.0, c2 - c1 * c1))


def _os_interval(x: np.ndarray, q: float, level: float) -> tuple[float, float]:
    """Distribution-free interval [X_(l), X_(u)] of the q-quantile at ``level`` (binomial)."""
    xs = np.sort(x)
    n = len(xs)
    alpha = 1 - level
    cdf = np.cumsum(_binom_pmf(n, q)[0])
    lo = int(np.searchsorted(cdf, alpha / 2))  # P(Bin < lo) <= alpha / 2: X_(lo) <= the quantile
    hi = int(np.searchsorted(cdf, 1 - alpha / 2)) + 1
    if lo < 1 or hi > n:
        return math.nan, math.nan
    return float(xs[lo - 1]), float(xs[hi - 1])


def _percentile(ratios: np.ndarray, confidence: float) -> tuple[float, float]:
    a = (1 - confidence) / 2
    return float(np.quantile(ratios, a)), float(np.quantile(ratios, 1 - a))


def quantile_ratio_interval(baseline: np.ndarray, candidate: np.ndarray, q: float, *,
                            method: str = QUANTILE_METHOD, confidence: float = 0.95,
                            resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> RatioEstimate:
    """Ratio of the sides' q-quantiles (candidate / baseline, numpy's linear quantile) and its
    interval by ``method`` (one of METHODS; raises ValueError otherwise). NaN bounds when a side
    has fewer than MIN_TAIL_CALLS / (1 - q) values."""
    if method not in METHODS:
        raise ValueError(f"unknown quantile interval method {method!r}; valid: {', '.join(METHODS)}")
    a = np.asarray(baseline, float)
    b = np.asarray(candidate, float)
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    qa = float(np.quantile(a, q)) if len(a) else math.nan
    qb = float(np.quantile(b, q)) if len(b) else math.nan
    ratio = qb / qa if len(a) and len(b) and qa > 0 else math.nan
    lo = hi = math.nan
    need = MIN_TAIL_CALLS / (1 - q)
    if len(a) >= need and len(b) >= need:
        lo, hi = _interval(a, b, q, method, confidence, resamples, seed)
    return RatioEstimate(baseline=qa, candidate=qb, ratio=ratio, lo=lo, hi=hi, n_baseline=len(a),
                         n_candidate=len(b), resamples=resamples if "bootstrap" in method else 0,
                         confidence=confidence, method=f"{method} of the p{round(q * 100):g} ratio")


def _interval(a: np.ndarray, b: np.ndarray, q: float, method: str, confidence: float, resamples: int,
              seed: int) -> tuple[float, float]:
    if method == "bootstrap":
        ra, rb = _boot_quantiles(a, q, resamples, _rng(seed, 1)), _boot_quantiles(b, q, resamples, _rng(seed, 2))
        return _percentile(rb / ra, confidence)
    if method == "block_bootstrap":
        ra, rb = _block_quantiles(a, [q], resamples, _rng(seed, 1))[0], _block_quantiles(b, [q], resamples,
                                                                                           _rng(seed, 2))[0]
        return _percentile(rb / ra, confidence)
    if method == "maritz_jarrett":
        qa, qb = _order_value(a, q), _order_value(b, q)
        se = math.hypot(_mj_se(a, q) / qa, _mj_se(b, q) / qb)
        z = normal_quantile(0.5 + confidence / 2)
        centre = math.log(qb / qa)
        return math.exp(centre - z * se), math.exp(centre + z * se)
    level = math.sqrt(confidence)
    la, ha = _os_interval(a, q, level)
    lb, hb = _os_interval(b, q, level)
    return lb / ha, hb / la


def _order_value(x: np.ndarray, q: float) -> float:
    xs = np.sort(x)
    return float(xs[min(len(xs) - 1, max(0, int(math.floor(q * len(xs) + 0.5)) - 1))])


def _per_sample(tables: Sequence[pd.DataFrame]) -> np.ndarray:
    parts = []
    for t in tables:
        kept = t[t["kept"].astype(bool)] if len(t) else t
        if len(kept):
            s = pd.to_numeric(kept["samples"], errors="coerce").to_numpy(float)
            v = kept["step_time_s"].to_numpy(float) / s
            parts.append(v[np.isfinite(v) & (v > 0)])
    return np.concatenate(parts) if parts else np.array([])


def compute_latency_rows(baseline: Sequence[pd.DataFrame], candidate: Sequence[pd.DataFrame],
                         *, confidence: float, resamples: int, seed: int, threshold: float) -> list[dict[str, Any]]:
    """Verdict-table rows (compare_verdict_table.VERDICT_COLUMNS) for latency per sample at p50,
    p90 and p99 of the kept calls of each side's step tables (pooled over a group's runs); [] when
    a side has no calls. ``threshold``: the practical limit a change must exceed (the comparison
    passes at least the run-to-run margin: the interval sees call-to-call noise only)."""
    a, b = _per_sample(baseline), _per_sample(candidate)
    if not len(a) or not len(b):
        return []
    rows = []
    for q in QUANTILES:
        est = quantile_ratio_interval(a, b, q, confidence=confidence, resamples=resamples, seed=seed)
        if est.has_interval:
            raw = classify_ratio(est.ratio, est.lo, est.hi, threshold=threshold)
            verdict = {Verdict.BETTER: "faster", Verdict.WORSE: "slower"}.get(raw, str(raw))
            note = (f"{est.method}; {len(a)} and {len(b)} steady calls; faster/slower needs a change beyond "
                    f"{threshold:.0%} (calls pooled: the interval cannot see run-to-run noise)")
            if q >= 0.99:  # the study: block bootstrap covers ~0.96 iid, ~0.75 when slow calls come in episodes
                note += "; a p99 interval is optimistic when slow calls come in bursts (docs/compare.md)"
        else:
            verdict = str(Verdict.UNKNOWN)
            need = math.ceil(MIN_TAIL_CALLS / (1 - q))
            note = f"no interval: {len(a)} and {len(b)} steady calls, p{round(q * 100):g} needs {need} per side"
        rows.append({"quantity": f"latency per sample p{round(q * 100):g}", "unit": "s", "baseline": est.baseline,
                     "candidate": est.candidate, "ratio": est.ratio, "ci_lo": est.lo, "ci_hi": est.hi,
                     "verdict": verdict, "note": note})
    return rows
